// Per-op profile tables for `deltaflash bench --profile`: the ProfilingBackend's entries scaled
// to one forward, as a text table and as JSON.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "backend/profiling_backend.h"

namespace df::cli {

struct OpProfile {
  std::string what;   // "decode step (1 row)", "16-row forward"
  int forwards = 0;   // forwards the entries were summed over
  double wall_s = 0;  // wall time per forward while profiled (events add a little)
  double plain_wall_s = 0;  // wall time per forward measured without profiling (0: unknown)
  std::vector<ProfilingBackend::Entry> entries;  // per forward
  double op_seconds() const;                     // sum of the entries' device times
};

// Runs `forward` n times with timing on (after one untimed call) and returns the entries per
// forward. prepare (untimed, may be empty) runs before each forward, e.g. to reset a sequence.
template <class Prepare, class Forward>
OpProfile profile_forwards(ProfilingBackend& prof, const std::string& what, int n, Prepare&& prepare,
                           Forward&& forward);

void print_profile(const OpProfile& p);
nlohmann::json profile_json(const OpProfile& p);

}  // namespace df::cli

#include "cli/bench_profile_impl.h"
