// The template part of bench_profile.h.
#pragma once
#include <chrono>

namespace df::cli {

template <class Prepare, class Forward>
OpProfile profile_forwards(ProfilingBackend& prof, const std::string& what, int n, Prepare&& prepare,
                           Forward&& forward) {
  using Mode = ProfilingBackend::Mode;
  prof.set_mode(Mode::kOff);
  prepare();
  prof.set_mode(Mode::kTime);
  forward();  // warm-up: first-use allocations and the profiler's events
  prof.set_mode(Mode::kOff);
  prof.reset();
  double wall = 0;
  for (int i = 0; i < n; ++i) {
    prepare();
    prof.inner().synchronize();
    prof.set_mode(Mode::kTime);
    const auto t0 = std::chrono::steady_clock::now();
    forward();
    prof.inner().synchronize();
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    prof.set_mode(Mode::kOff);
  }
  OpProfile p;
  p.what = what;
  p.forwards = n;
  p.wall_s = wall / n;
  p.entries = prof.entries();
  for (auto& e : p.entries) {
    e.seconds /= n;
    e.weight_bytes /= n;
  }
  prof.reset();
  return p;
}

}  // namespace df::cli
