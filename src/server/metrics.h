// Server metrics in the Prometheus text format: requests by status, token counts, latency
// histograms, queue depth.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace df::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v, uint64_t n = 1);  // n observations of the same value
  void write(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  void count_request(int status);
  void count_tokens(int prompt, int generated);
  void observe_ttft(double seconds);
  // The intervals between one request's consecutive committed tokens (one per token after the
  // first), each observed once.
  void observe_token_intervals(const std::vector<double>& seconds);
  // Speculative decoding of one request: verify steps, drafts verified, drafts accepted.
  void count_speculation(int draft_steps, int drafted, int accepted);
  std::string render(int queue_depth, int running) const;

 private:
  mutable std::mutex mu_;
  std::map<int, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, generated_tokens_ = 0;
  uint64_t draft_steps_ = 0, drafted_tokens_ = 0, accepted_tokens_ = 0;
  Histogram ttft_, per_token_;
};

}  // namespace df::server
