// A fixed set of worker threads that run one parallel loop at a time.
// Workers spin briefly between loops (a decode step issues hundreds of small loops, and a
// sleep/wake per loop would cost more than the work), then block on an atomic wait.
// Loops take any callable by reference (no std::function: no allocation per loop).
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace df {

class ThreadPool {
 public:
  // n_threads counts the calling thread; 0 means all hardware threads.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index) once on every thread (the caller is thread 0) and returns when all are done.
  template <typename F>
  void run(F&& fn) {
    using Fn = std::remove_reference_t<F>;
    run_impl(const_cast<void*>(static_cast<const void*>(&fn)), [](void* f, int t) { (*static_cast<Fn*>(f))(t); });
  }

  // Splits [0, n) into contiguous ranges of at least `grain` items, one range per thread:
  // fn(begin, end, thread_index).
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    const int parts = int(std::min<int64_t>(n_threads_, (n + grain - 1) / grain));
    if (parts <= 1) {
      fn(int64_t(0), n, 0);
      return;
    }
    run([&](int t) {
      if (t >= parts) return;
      const int64_t begin = n * t / parts, end = n * (t + 1) / parts;
      if (begin < end) fn(begin, end, t);
    });
  }

 private:
  void run_impl(void* ctx, void (*call)(void*, int));
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  void* job_ctx_ = nullptr;
  void (*job_call_)(void*, int) = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace df
