// The thread pool (harness/model/thread_pool.hpp, shared() and passes()): every task once, worker ids
// in range and never shared at once, exceptions rethrown in the caller, nested
// loops inline, the pool reusable after an error.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <stdexcept>
#include <vector>

#include "harness/model/thread_pool.hpp"

using namespace attnbench;

TEST_CASE("parallel_for runs every task exactly once, on workers in range") {
  ThreadPool pool(4);
  CHECK(pool.size() == 4);
  for (int workers : {0, 1, 2, 4, 9}) {
    std::vector<std::atomic<int>> runs(1000);
    std::vector<std::atomic<int>> busy(4);
    std::atomic<int> bad{0};
    pool.parallel_for(1000, workers, [&](int64_t t, int w) {
      if (w < 0 || w >= 4 || (workers == 1 && w != 0)) ++bad;
      if (busy[static_cast<size_t>(w)].fetch_add(1) != 0) ++bad;  // one task per worker at a time
      runs[static_cast<size_t>(t)].fetch_add(1);
      busy[static_cast<size_t>(w)].fetch_sub(1);
    });
    CHECK(bad.load() == 0);
    int once = 0;
    for (auto& r : runs) once += r.load() == 1;
    CHECK(once == 1000);
  }
  int calls = 0;
  pool.parallel_for(0, 4, [&](int64_t, int) { ++calls; });
  CHECK(calls == 0);
}

TEST_CASE("parallel_for rethrows the first exception and the pool stays usable") {
  ThreadPool pool(3);
  std::atomic<int> after{0};
  CHECK_THROWS_WITH_AS(pool.parallel_for(100, 3,
                                         [&](int64_t t, int) {
                                           if (t == 17) throw std::runtime_error("task 17");
                                         }),
                       "task 17", std::runtime_error);
  pool.parallel_for(50, 3, [&](int64_t, int) { after.fetch_add(1); });
  CHECK(after.load() == 50);
}

TEST_CASE("a loop started inside a task runs inline on that thread") {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> cells(8 * 8);
  std::atomic<int> bad{0};
  pool.parallel_for(8, 3, [&](int64_t outer, int) {
    pool.parallel_for(8, 3, [&](int64_t inner, int w) {
      if (w != 0) ++bad;
      cells[static_cast<size_t>(outer * 8 + inner)].fetch_add(1);
    });
  });
  int once = 0;
  for (auto& c : cells) once += c.load() == 1;
  CHECK(once == 64);
  CHECK(bad.load() == 0);
}

TEST_CASE("pool sizes: resolve_threads and bad sizes") {
  CHECK(hardware_threads() >= 1);
  CHECK(resolve_threads(0) == hardware_threads());
  CHECK(resolve_threads(5) == 5);
  CHECK(ThreadPool::shared().size() == hardware_threads());
  CHECK_THROWS_AS(ThreadPool(0), std::invalid_argument);
}

TEST_CASE("parallel_chunks covers [0, n) once with disjoint ranges of at most grain elements") {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{64}, size_t{1000}, size_t{1025}}) {
    std::vector<std::atomic<int>> hits(n);
    std::atomic<int> calls{0}, too_long{0};
    parallel_chunks(
        n,
        [&](size_t begin, size_t end) {
          ++calls;
          if (end <= begin || end - begin > 64) ++too_long;
          for (size_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        },
        64);
    int once = 0;
    for (auto& h : hits) once += h.load() == 1;
    CHECK(once == static_cast<int>(n));
    CHECK(too_long.load() == 0);
    CHECK(calls.load() == static_cast<int>((n + 63) / 64));
  }
}

TEST_CASE("the pass pool: its own threads, capped; passes inside a task of either pool run inline") {
  ThreadPool& passes = ThreadPool::passes();
  CHECK(&passes != &ThreadPool::shared());
  CHECK(passes.size() == std::min(hardware_threads(), ThreadPool::kMaxPassThreads));
  std::vector<std::atomic<int>> hits(64 * 8);
  std::atomic<int> bad{0};
  // A pass started from a task of the shared pool (a reference task) runs on that thread.
  ThreadPool::shared().parallel_for(8, 0, [&](int64_t outer, int) {
    const auto self = std::this_thread::get_id();
    parallel_pass(64, [&](int64_t inner) {
      if (std::this_thread::get_id() != self) ++bad;
      hits[static_cast<size_t>(outer * 64 + inner)].fetch_add(1);
    });
  });
  int once = 0;
  for (auto& h : hits) once += h.load() == 1;
  CHECK(once == 64 * 8);
  CHECK(bad.load() == 0);
  // A pass is not held up by a loop that occupies the shared pool (a check's
  // reference beside the next row's prepare): it finishes while that loop waits
  // for it (with one pool the pass would wait for the loop, which would time out).
  if (ThreadPool::shared().size() < 2) return;
  std::atomic<bool> started{false}, pass_done{false}, loop_saw_pass{false};
  std::thread other([&] {
    ThreadPool::shared().parallel_for(2, 2, [&](int64_t, int) {
      started = true;
      for (int i = 0; i < 5000 && !pass_done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (pass_done.load()) loop_saw_pass = true;
    });
  });
  while (!started.load()) std::this_thread::yield();
  std::atomic<int> sum{0};
  parallel_pass(100, [&](int64_t t) { sum.fetch_add(static_cast<int>(t)); });
  pass_done = true;
  other.join();
  CHECK(loop_saw_pass.load());
  CHECK(sum.load() == 4950);
}
