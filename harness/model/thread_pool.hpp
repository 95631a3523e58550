// The project's thread pool: a persistent set of worker threads that runs
// parallel_for loops for the float64 reference (reference/) and the cpu backend
// (backends/cpu/) on ThreadPool::shared(), and the elementwise host passes over
// large tensors (input generation, dtype encode / decode, layout permutes, .npy
// conversion, non-finite counts) through parallel_chunks / parallel_pass on
// ThreadPool::passes(), a second instance: a reference check that overlaps the
// next row (extra.check_overlap) holds shared() for seconds, and a backend's
// prepare converting its inputs must not wait for it. It lives in the model layer,
// the lowest layer that needs it, so that every layer and backend above may use it.
//
// Contract of parallel_for(n, workers, fn): fn(task, worker) runs once for every
// task in [0, n), on at most `workers` threads (the calling thread included);
// `worker` is in [0, workers) and no two calls with the same `worker` overlap, so
// per-worker scratch indexed by it needs no locking. Tasks are handed out in
// increasing order from an atomic counter (dynamic scheduling): callers make each
// task's result independent of the worker that runs it (determinism). The first
// exception thrown by a task is rethrown in the caller after every worker has
// stopped; the tasks not yet started are skipped.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace attnbench {

/// std::thread::hardware_concurrency(), limited on Linux to the CPUs of the process's
/// affinity mask (a container's cpuset); at least 1.
int hardware_threads();

/// `requested` when > 0, else hardware_threads().
int resolve_threads(int requested);

/// A fixed set of worker threads. Loops of one pool run one at a time (a second
/// caller waits); a loop started from inside a task of any pool (this one or
/// another) runs serially on the calling thread as worker 0, so nesting never
/// deadlocks, within a pool or across the two.
class ThreadPool {
 public:
  /// A pool that runs loops on up to `threads` threads: threads - 1 workers plus
  /// the caller. Throws std::invalid_argument when threads < 1.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Threads a loop can use (the workers plus the caller).
  int size() const { return static_cast<int>(threads_.size()) + 1; }

  /// Run fn(task, worker) for task in [0, n) on min(workers, size(), n) threads
  /// (workers <= 0: size()); see the contract at the top of this file.
  template <class Fn>
  void parallel_for(int64_t n, int workers, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run(n, workers, [](void* ctx, int64_t task, int worker) { (*static_cast<F*>(ctx))(task, worker); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

  /// The process-wide pool with hardware_threads() threads, created on first use
  /// and never destroyed (its idle workers end with the process).
  static ThreadPool& shared();

  /// The process-wide pool of the elementwise host passes (parallel_chunks,
  /// parallel_pass): min(hardware_threads(), kMaxPassThreads) threads of its own,
  /// created on first use and never destroyed.
  static ThreadPool& passes();
  /// Cap of passes(): the passes are memory-bound, more threads only add faults.
  static constexpr int kMaxPassThreads = 32;

 private:
  using TaskFn = void (*)(void*, int64_t, int);
  void run(int64_t n, int workers, TaskFn fn, void* ctx);
  void worker_main(int index);
  void work(int worker);

  std::vector<std::thread> threads_;
  std::mutex call_mu_;  ///< one loop at a time
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  // The current loop (valid while active_ > 0).
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0;
  int workers_ = 0;
  int active_ = 0;  ///< pool workers still in the current loop
  std::atomic<int64_t> next_{0};
  std::exception_ptr error_;
};

/// ThreadPool::shared().parallel_for(n, workers, fn): the form every caller uses.
template <class Fn>
void parallel_for(int64_t n, int workers, Fn&& fn) {
  ThreadPool::shared().parallel_for(n, workers, std::forward<Fn>(fn));
}

/// Elementwise host loops over [0, n) in chunks of `grain` elements on the pass
/// pool (ThreadPool::passes()): fn(begin, end) once per chunk, ranges disjoint and covering [0, n). For
/// loops whose result does not depend on the split (fills, conversions,
/// per-element copies), which run single-threaded below two chunks. Used on the
/// inputs and outputs of large problems, where one thread spent 10-40 ns per
/// element (make_inputs of a packed Llama-3-8B case: 335M elements, 13 s).
template <class Fn>
void parallel_chunks(size_t n, Fn&& fn, size_t grain = size_t{1} << 18) {
  if (n <= grain) {
    if (n > 0) fn(size_t{0}, n);
    return;
  }
  const int64_t chunks = static_cast<int64_t>((n + grain - 1) / grain);
  ThreadPool::passes().parallel_for(chunks, 0, [&](int64_t c, int) {
    const size_t begin = static_cast<size_t>(c) * grain;
    fn(begin, std::min(n, begin + grain));
  });
}

/// fn(task) for every task in [0, n) on the pass pool (ThreadPool::passes()), for
/// host passes split by rows rather than element ranges (layout conversions: one
/// task per (batch, head) or (sequence, head)); tasks write disjoint outputs, so the
/// result does not depend on the thread count.
template <class Fn>
void parallel_pass(int64_t n, Fn&& fn) {
  ThreadPool::passes().parallel_for(n, 0, [&](int64_t task, int) { fn(task); });
}

}  // namespace attnbench
