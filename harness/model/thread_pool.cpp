// The persistent thread pool of thread_pool.hpp.
#include "harness/model/thread_pool.hpp"

#include <algorithm>
#ifdef __linux__
#include <sched.h>
#endif
#include <stdexcept>
#include <string>

namespace attnbench {
namespace {

/// The pool whose task the current thread is running (nested loops run inline).
thread_local const ThreadPool* t_in_pool = nullptr;

}  // namespace

int hardware_threads() {
  int n = static_cast<int>(std::thread::hardware_concurrency());
#ifdef __linux__
  // The CPUs this process may run on (a container's cpuset), when fewer.
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) n = n > 0 ? std::min(n, CPU_COUNT(&set)) : CPU_COUNT(&set);
#endif
  return n > 0 ? n : 1;
}

int resolve_threads(int requested) { return requested > 0 ? requested : hardware_threads(); }

ThreadPool::ThreadPool(int threads) {
  if (threads < 1) throw std::invalid_argument("ThreadPool: threads must be >= 1, got " + std::to_string(threads));
  threads_.reserve(static_cast<size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) threads_.emplace_back([this, i] { worker_main(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

ThreadPool& ThreadPool::shared() {
  static ThreadPool* pool = new ThreadPool(hardware_threads());  // never destroyed (see header)
  return *pool;
}

ThreadPool& ThreadPool::passes() {
  static ThreadPool* pool = new ThreadPool(std::min(hardware_threads(), kMaxPassThreads));  // never destroyed
  return *pool;
}

void ThreadPool::work(int worker) {
  const ThreadPool* outer = t_in_pool;
  t_in_pool = this;
  try {
    for (int64_t t; (t = next_.fetch_add(1)) < n_;) fn_(ctx_, t, worker);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::current_exception();
    next_.store(n_);
  }
  t_in_pool = outer;
}

void ThreadPool::worker_main(int index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= workers_) continue;  // not part of this loop
    }
    work(index);
    std::lock_guard<std::mutex> lock(mu_);
    if (--active_ == 0) done_cv_.notify_one();
  }
}

void ThreadPool::run(int64_t n, int workers, TaskFn fn, void* ctx) {
  if (n <= 0) return;
  int w = workers > 0 ? std::min(workers, size()) : size();
  w = static_cast<int>(std::min<int64_t>(w, n));
  if (w <= 1 || t_in_pool != nullptr) {  // serial, or nested inside a task of any pool
    const ThreadPool* outer = t_in_pool;
    t_in_pool = this;
    try {
      for (int64_t t = 0; t < n; ++t) fn(ctx, t, 0);
    } catch (...) {
      t_in_pool = outer;
      throw;
    }
    t_in_pool = outer;
    return;
  }
  std::lock_guard<std::mutex> call(call_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = fn, ctx_ = ctx, n_ = n, workers_ = w;
    active_ = w - 1;
    error_ = nullptr;
    next_.store(0);
    ++generation_;
  }
  start_cv_.notify_all();
  work(0);
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return active_ == 0; });
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace attnbench
