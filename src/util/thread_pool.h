// A fixed set of worker threads that run one parallel loop at a time.
// Workers spin briefly between loops (a decode step issues hundreds of small loops, and a
// sleep/wake per loop would cost more than the work), then block on an atomic wait.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
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
  void run(const std::function<void(int)>& fn);

  // Splits [0, n) into contiguous ranges of at least `grain` items, one range per thread:
  // fn(begin, end, thread_index).
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace df
