// A bounded load test of `deltaflash serve` on loopback: many concurrent clients, streaming and
// not, some cancelled mid-request, some invalid, with a queue small enough that some requests
// are turned away. Every request must be answered or cleanly rejected (no 5xx except the
// intended 503 queue_full), memory must not grow across rounds, and the server must stay healthy.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "server/server_process.h"
#include "support/subprocess.h"

namespace df {
namespace {

using nlohmann::json;
using test::RawConnection;
using test::ServerProcess;

const std::string kBin = DELTAFLASH_BIN;
constexpr int kClients = 16;
constexpr int kMaxQueue = 10;  // fewer than the clients: some requests are turned away

enum class Kind { Chat, ChatStream, CancelStream, CancelPlain, Invalid, Completion };

Kind kind_of(int i) {
  switch (i % 10) {
    case 0: case 1: case 2: return Kind::Chat;
    case 3: case 4: return Kind::ChatStream;
    case 5: return Kind::CancelStream;
    case 6: return Kind::CancelPlain;
    case 7: return Kind::Invalid;
    default: return Kind::Completion;
  }
}

struct Outcome {
  std::map<int, int> statuses;  // final HTTP status -> count (0: no answer)
  std::vector<std::string> problems;
  int cancelled = 0;
  int rejected = 0;  // 503 queue_full answers that were retried
};

int status_of(const std::string& raw) {
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || raw.size() < 12) return 0;
  return std::stoi(raw.substr(9, 3));
}

// One request of the given kind; records its status and anything wrong with the answer.
// Returns the status (503: the caller retries, as clients honouring Retry-After do).
int one_request(int port, int i, bool last_try, Outcome& out, std::mutex& mu) {
  const Kind k = kind_of(i);
  json body = {{"messages", {{{"role", "user"}, {"content", "Request number " + std::to_string(i)}}}},
               {"max_tokens", 4 + i % 13}, {"seed", i}, {"temperature", 1.0}};
  std::string path = "/v1/chat/completions";
  if (k == Kind::ChatStream || k == Kind::CancelStream) body["stream"] = true;
  if (k == Kind::CancelStream || k == Kind::CancelPlain) body["max_tokens"] = 400;
  if (k == Kind::Completion) {
    path = "/v1/completions";
    body = {{"prompt", "Completion " + std::to_string(i)}, {"max_tokens", 8}, {"seed", i}};
  }
  std::string payload = body.dump();
  if (k == Kind::Invalid) payload = i % 20 == 7 ? "{\"messages\": [" : R"({"messages": [], "n": 2})";

  RawConnection conn(port);
  if (!conn.send_all(test::post_request(path, payload, ""))) {
    std::lock_guard<std::mutex> lk(mu);
    out.problems.push_back("send failed for request " + std::to_string(i));
    return 0;
  }
  std::string raw;
  if (k == Kind::CancelStream) {
    // Half of them hang up after the role chunk (often still queued), half after a few tokens.
    raw = conn.read_until_count("data: ", i % 20 == 5 ? 1 : 4);
    if (status_of(raw) == 200) {
      conn.close();
      std::lock_guard<std::mutex> lk(mu);
      out.cancelled++;
      out.statuses[200]++;
      return 200;
    }
    raw = conn.read_all();  // a rejection: the whole answer
  } else if (k == Kind::CancelPlain) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2 + i % 5));
    conn.close();
    std::lock_guard<std::mutex> lk(mu);
    out.cancelled++;
    return -1;
  } else {
    raw = conn.read_all();
  }
  const int status = status_of(raw);
  std::string problem;
  const size_t head_end = raw.find("\r\n\r\n");
  std::string payload_out = head_end == std::string::npos ? "" : raw.substr(head_end + 4);
  try {
    if (raw.find("Transfer-Encoding: chunked") != std::string::npos) payload_out = test::dechunk(payload_out);
    if (status == 200 && body.value("stream", false)) {
      if (payload_out.size() < 14 || payload_out.compare(payload_out.size() - 14, 14, "data: [DONE]\n\n") != 0)
        problem = "stream did not end with [DONE]";
    } else if (status == 200) {
      const json j = json::parse(payload_out);
      if (!j.contains("choices") || !j.contains("usage")) problem = "no choices/usage";
    } else if (status == 400) {
      if (k != Kind::Invalid) problem = "unexpected 400";
      if (!json::parse(payload_out).contains("error")) problem = "400 without error body";
    } else if (status == 503) {
      const json j = json::parse(payload_out);
      if (j["error"]["code"] != "queue_full") problem = "503 that is not queue_full";
      if (raw.find("Retry-After: 1") == std::string::npos) problem = "503 without Retry-After";
    } else {
      problem = "status " + std::to_string(status);
    }
  } catch (const std::exception& e) {
    problem = std::string("bad response: ") + e.what();
  }
  std::lock_guard<std::mutex> lk(mu);
  if (!problem.empty()) out.problems.push_back("request " + std::to_string(i) + ": " + problem + "\n" + raw.substr(0, 400));
  if (status == 503 && !last_try) {
    out.rejected++;
    return status;
  }
  out.statuses[status]++;
  return status;
}

Outcome run_round(int port, int n) {
  Outcome out;
  std::mutex mu;
  std::atomic<int> next{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&] {
      for (int i = next++; i < n; i = next++) {
        constexpr int kTries = 200;
        for (int t = 0; t < kTries && one_request(port, i, t + 1 == kTries, out, mu) == 503; ++t)
          std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50, 2 << std::min(t, 5)) + (i * 7 + t) % 11));
      }
    });
  for (auto& t : clients) t.join();
  return out;
}

long metric(const ServerProcess& s, const std::string& name) {
  httplib::Client c = s.client();
  auto r = c.Get("/metrics");
  if (!r) return -1;
  const size_t at = r->body.find("\n" + name + " ");
  return at == std::string::npos ? 0 : std::stol(r->body.substr(at + name.size() + 2));
}

void wait_idle(const ServerProcess& s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((metric(s, "deltaflash_queue_depth") != 0 || metric(s, "deltaflash_requests_running") != 0) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

TEST(ServerLoad, ConcurrentMixedRequests) {
  test::TempDir dir;
  const std::string model = dir.file("m.gguf");
  test::run_command(kBin + " make-model --arch qwen35 --shape tiny --type q8_0 --seed 5 -q -o " + model);
  ServerProcess server({"-m", model, "--threads", "1", "--ctx", "512", "--max-queue", std::to_string(kMaxQueue)},
                       dir.file("server.log"));

  // Warm-up round: allocator pools, thread stacks and caches reach their working size.
  const Outcome warm = run_round(server.port(), 100);
  EXPECT_TRUE(warm.problems.empty()) << warm.problems.front();
  wait_idle(server);
  const long rss_warm = server.rss_kib();

  const auto t0 = std::chrono::steady_clock::now();
  constexpr int kRequests = 200;
  const Outcome load = run_round(server.port(), kRequests);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  wait_idle(server);
  const long rss_after = server.rss_kib();

  std::string summary = fmt::format("{} requests, {} clients, {:.2f} s; statuses:", kRequests, kClients, seconds);
  for (const auto& [status, n] : load.statuses) summary += fmt::format(" {}x{}", status, n);
  summary += fmt::format("; 503 queue_full answers retried: {}; cancelled by the client: {}; RSS after warm-up {} KiB, after load {} KiB (+{} KiB)",
                         load.rejected, load.cancelled, rss_warm, rss_after, rss_after - rss_warm);
  std::printf("%s\n", summary.c_str());
  RecordProperty("summary", summary);

  for (const std::string& p : load.problems) ADD_FAILURE() << p;  // includes any other status
  EXPECT_EQ(load.statuses.count(0), 0u) << "requests without an answer";
  int accounted = 0;
  for (const auto& [status, n] : load.statuses) accounted += n;
  const int plain_cancels = kRequests / 10;
  EXPECT_EQ(accounted + plain_cancels, kRequests) << summary;
  EXPECT_EQ(load.statuses.count(503), 0u) << "a request was refused 200 times: " << summary;
  EXPECT_GT(load.rejected, 0) << "the queue limit was never reached: " << summary;
  EXPECT_EQ(load.statuses.count(400) ? load.statuses.at(400) : 0, kRequests / 10) << summary;
  EXPECT_GT(load.cancelled, 0);
  // Memory: the second round may not grow the process by more than a few MiB.
  EXPECT_LT(rss_after - rss_warm, 8 * 1024) << summary;
  // Still serving, nothing stuck.
  httplib::Client c = server.client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(metric(server, "deltaflash_queue_depth"), 0);
  EXPECT_GE(metric(server, "deltaflash_requests_total{status=\"499\"}"), 1);
  auto r = c.Post("/v1/completions", R"({"prompt": "after the storm", "max_tokens": 4})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(server.stop(), 0) << "the server should exit cleanly on SIGTERM\n" << server.log();
}

// SIGTERM while requests generate and wait: they are cancelled, the server exits at once and cleanly.
TEST(ServerLoad, ShutdownCancelsInFlight) {
  test::TempDir dir;
  const std::string model = dir.file("m.gguf");
  test::run_command(kBin + " make-model --arch qwen35 --shape tiny --type q8_0 --seed 5 -q -o " + model);
  ServerProcess server({"-m", model, "--threads", "1", "--ctx", "8192"}, dir.file("server.log"));
  // No max_tokens: each would run to the end of the 8192-token context (seconds of work).
  const std::string body = R"({"prompt": "Once", "stream": true, "temperature": 1, "logprobs": 5})";
  RawConnection a(server.port()), b(server.port());
  ASSERT_TRUE(a.send_all(test::post_request("/v1/completions", body, "")));
  ASSERT_TRUE(b.send_all(test::post_request("/v1/completions", body, "")));
  a.read_until_count("data: ", 3);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(server.stop(), 0) << server.log();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 2.0) << server.log();
  EXPECT_NE(server.log().find("shutting down"), std::string::npos);
}

}  // namespace
}  // namespace df
