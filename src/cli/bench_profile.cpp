#include "cli/bench_profile.h"

#include <cstdio>
#include <map>

namespace df::cli {

double OpProfile::op_seconds() const {
  double t = 0;
  for (const auto& e : entries) t += e.seconds;
  return t;
}

namespace {

double per_forward(const OpProfile& p, int64_t calls) { return p.forwards > 0 ? double(calls) / p.forwards : 0; }

// Achieved weight bandwidth of an entry (GB/s), 0 when it reads no weights or took no time.
double gb_s(const ProfilingBackend::Entry& e) { return e.seconds > 0 && e.weight_bytes > 0 ? e.weight_bytes / e.seconds / 1e9 : 0; }

}  // namespace

void print_profile(const OpProfile& p) {
  const double ops = p.op_seconds();
  std::printf("\n### profile: %s (per forward, mean of %d)\n\n", p.what.c_str(), p.forwards);
  std::printf("| op | group | calls | ms | share %% | us/call | weight GB/s |\n|---|---|---|---|---|---|---|\n");
  for (const auto& e : p.entries) {
    const double calls = per_forward(p, e.calls);
    if (e.seconds <= 0 && e.weight_bytes <= 0) continue;
    std::printf("| %s | %s | %.0f | %.3f | %.1f | %.1f |", e.op.c_str(), e.group.c_str(), calls, e.seconds * 1e3,
                ops > 0 ? 100 * e.seconds / ops : 0.0, calls > 0 ? e.seconds * 1e6 / calls : 0.0);
    if (gb_s(e) > 0) {
      std::printf(" %.1f |\n", gb_s(e));
    } else {
      std::printf("  |\n");
    }
  }
  std::map<std::string, double> groups;
  for (const auto& e : p.entries) groups[e.group] += e.seconds;
  std::printf("\n| group | ms | share %% |\n|---|---|---|\n");
  for (const auto& [g, t] : groups) std::printf("| %s | %.3f | %.1f |\n", g.c_str(), t * 1e3, ops > 0 ? 100 * t / ops : 0.0);
  std::printf("\nsum of op times %.3f ms; wall %.3f ms while profiled", ops * 1e3, p.wall_s * 1e3);
  if (p.plain_wall_s > 0)
    std::printf("; %.3f ms unprofiled -> %.3f ms (%.1f%%) outside the ops (launch gaps, host work)",
                p.plain_wall_s * 1e3, (p.plain_wall_s - ops) * 1e3, 100 * (p.plain_wall_s - ops) / p.plain_wall_s);
  std::printf("\n");
}

nlohmann::json profile_json(const OpProfile& p) {
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& e : p.entries) {
    ops.push_back({{"op", e.op},
                   {"group", e.group},
                   {"calls", per_forward(p, e.calls)},
                   {"ms", e.seconds * 1e3},
                   {"weight_bytes", e.weight_bytes},
                   {"weight_gb_s", gb_s(e)}});
  }
  return {{"what", p.what},       {"forwards", p.forwards}, {"ops_ms", p.op_seconds() * 1e3},
          {"wall_ms", p.wall_s * 1e3}, {"plain_wall_ms", p.plain_wall_s * 1e3}, {"ops", ops}};
}

}  // namespace df::cli
