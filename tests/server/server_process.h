// Test helpers for `deltaflash serve`: start it as a child process on a free port, wait until
// /health answers 200, talk to it (httplib client, raw sockets, the node openai client), stop it.
#pragma once
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace df::test {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ServerProcess {
 public:
  // args: everything after "deltaflash serve"; --port 0 is added. log_path receives stderr.
  ServerProcess(const std::vector<std::string>& args, const std::string& log_path) : log_path_(log_path) {
    std::vector<std::string> argv = {DELTAFLASH_BIN, "serve", "--port", "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      const int err = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int null = open("/dev/null", O_WRONLY);
      dup2(err, 2);
      dup2(null, 1);
      std::vector<char*> cargv;
      for (std::string& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execv(cargv[0], cargv.data());
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (port_ <= 0) {
      const std::string log = read_file(log_path_);
      const size_t at = log.find("listening on http://");
      if (at != std::string::npos) {
        const size_t colon = log.find(':', at + 20);
        const size_t eol = log.find('\n', at);
        if (colon != std::string::npos && eol != std::string::npos) port_ = std::stoi(log.substr(colon + 1, eol - colon - 1));
      }
      if (port_ <= 0) {
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          throw std::runtime_error("deltaflash serve exited early:\n" + log);
        }
        if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("server did not start:\n" + log);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    httplib::Client c("127.0.0.1", port_);
    for (;;) {
      auto r = c.Get("/health");
      if (r && r->status == 200) break;
      if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("server never became healthy:\n" + log());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~ServerProcess() { stop(); }

  // SIGTERM, then the exit status (-1 when it had to be killed).
  int stop() {
    if (pid_ <= 0) return exit_status_;
    kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 500; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        return exit_status_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return exit_status_ = -1;
  }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string log() const { return read_file(log_path_); }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }

  // Resident memory of the server process, from /proc/<pid>/status.
  long rss_kib() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    return -1;
  }

 private:
  std::string log_path_;
  pid_t pid_ = -1;
  int port_ = -1;
  int exit_status_ = -1;
};

// A TCP connection to the server for byte-level checks.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("connect failed");
    timeval tv{30, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RawConnection() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool send_all(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += size_t(n);
    }
    return true;
  }
  // Reads until `marker` appears in what was read so far, EOF, or the timeout.
  std::string read_until(const std::string& marker) {
    char buf[4096];
    while (data_.find(marker) == std::string::npos) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      data_.append(buf, size_t(n));
    }
    return data_;
  }
  // Reads until `marker` occurs `n` times, EOF, or the timeout.
  std::string read_until_count(const std::string& marker, int n) {
    char buf[4096];
    auto count = [&] {
      int c = 0;
      for (size_t p = data_.find(marker); p != std::string::npos; p = data_.find(marker, p + 1)) ++c;
      return c;
    };
    while (count() < n) {
      const ssize_t got = ::recv(fd_, buf, sizeof buf, 0);
      if (got <= 0) break;
      data_.append(buf, size_t(got));
    }
    return data_;
  }
  std::string read_all() { return read_until(std::string(1, '\0') + "never"); }

 private:
  int fd_ = -1;
  std::string data_;
};

inline std::string post_request(const std::string& path, const std::string& body, const std::string& api_key,
                                bool close_connection = true) {
  std::string r = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
  if (!api_key.empty()) r += "Authorization: Bearer " + api_key + "\r\n";
  if (close_connection) r += "Connection: close\r\n";
  r += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  return r;
}

// Body of an HTTP/1.1 response with chunked transfer encoding, de-chunked; throws when the
// framing is wrong.
inline std::string dechunk(const std::string& body) {
  std::string out;
  size_t p = 0;
  for (;;) {
    const size_t eol = body.find("\r\n", p);
    if (eol == std::string::npos) throw std::runtime_error("chunk size line not terminated");
    const size_t n = std::stoul(body.substr(p, eol - p), nullptr, 16);
    p = eol + 2;
    if (n == 0) return out;
    if (p + n + 2 > body.size() || body.compare(p + n, 2, "\r\n") != 0) throw std::runtime_error("bad chunk framing");
    out.append(body, p, n);
    p += n + 2;
  }
}

// Runs a shell command; returns {exit status, stdout+stderr}.
inline std::pair<int, std::string> run_capture(const std::string& cmd) {
  FILE* p = popen(("(" + cmd + ") 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

}  // namespace df::test
