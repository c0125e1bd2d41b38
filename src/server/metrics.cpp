#include "server/metrics.h"

#include <fmt/format.h>

namespace df::server {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v, uint64_t n) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i] += n;
  sum_ += v * double(n);
  count_ += n;
}

void Histogram::write(std::string& out, const std::string& name, const std::string& help) const {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cum);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
}

Metrics::Metrics()
    : ttft_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      per_token_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}) {}

void Metrics::count_request(int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++requests_[status];
}

void Metrics::count_tokens(int prompt, int generated) {
  std::lock_guard<std::mutex> lk(mu_);
  prompt_tokens_ += uint64_t(prompt);
  generated_tokens_ += uint64_t(generated);
}

void Metrics::observe_ttft(double seconds) {
  std::lock_guard<std::mutex> lk(mu_);
  ttft_.observe(seconds);
}

void Metrics::observe_token_intervals(const std::vector<double>& seconds) {
  if (seconds.empty()) return;
  std::lock_guard<std::mutex> lk(mu_);
  for (double s : seconds) per_token_.observe(s);
}

void Metrics::count_speculation(int draft_steps, int drafted, int accepted) {
  std::lock_guard<std::mutex> lk(mu_);
  draft_steps_ += uint64_t(draft_steps);
  drafted_tokens_ += uint64_t(drafted);
  accepted_tokens_ += uint64_t(accepted);
}

std::string Metrics::render(int queue_depth, int running) const {
  std::lock_guard<std::mutex> lk(mu_);
  std::string out;
  out += "# HELP deltaflash_requests_total HTTP requests answered, by status (499: client went away)\n";
  out += "# TYPE deltaflash_requests_total counter\n";
  for (const auto& [status, n] : requests_) out += fmt::format("deltaflash_requests_total{{status=\"{}\"}} {}\n", status, n);
  out += fmt::format("# HELP deltaflash_prompt_tokens_total Prompt tokens processed\n"
                     "# TYPE deltaflash_prompt_tokens_total counter\ndeltaflash_prompt_tokens_total {}\n",
                     prompt_tokens_);
  out += fmt::format("# HELP deltaflash_generated_tokens_total Tokens generated\n"
                     "# TYPE deltaflash_generated_tokens_total counter\ndeltaflash_generated_tokens_total {}\n",
                     generated_tokens_);
  out += fmt::format("# HELP deltaflash_spec_draft_steps_total Speculative verify steps (DFlash)\n"
                     "# TYPE deltaflash_spec_draft_steps_total counter\ndeltaflash_spec_draft_steps_total {}\n"
                     "# HELP deltaflash_spec_drafted_tokens_total Draft tokens verified\n"
                     "# TYPE deltaflash_spec_drafted_tokens_total counter\ndeltaflash_spec_drafted_tokens_total {}\n"
                     "# HELP deltaflash_spec_accepted_tokens_total Draft tokens accepted\n"
                     "# TYPE deltaflash_spec_accepted_tokens_total counter\ndeltaflash_spec_accepted_tokens_total {}\n",
                     draft_steps_, drafted_tokens_, accepted_tokens_);
  ttft_.write(out, "deltaflash_time_to_first_token_seconds", "Time from request arrival to its first token");
  per_token_.write(out, "deltaflash_time_per_output_token_seconds", "Time between consecutive generated tokens of a request");
  out += fmt::format("# HELP deltaflash_queue_depth Requests waiting for the engine\n"
                     "# TYPE deltaflash_queue_depth gauge\ndeltaflash_queue_depth {}\n",
                     queue_depth);
  out += fmt::format("# HELP deltaflash_requests_running Requests being generated\n"
                     "# TYPE deltaflash_requests_running gauge\ndeltaflash_requests_running {}\n",
                     running);
  return out;
}

}  // namespace df::server
