// Noticing that an HTTP client went away while its request waits or generates. cpp-httplib
// 0.11 gives handlers no way to ask (no Request::is_connection_closed, and DataSink::is_writable
// only polls for writability), so we find the connection's socket by its address pair and
// peek at it: end-of-file or a hang-up means the client closed.
#pragma once
#include <string>

namespace df::server {

class ConnectionProbe {
 public:
  // The accepted socket whose local port is local_port and whose peer is remote_addr:remote_port.
  ConnectionProbe(const std::string& remote_addr, int remote_port, int local_port);
  bool found() const { return fd_ >= 0; }
  // True once the peer has closed or reset the connection. Data waiting to be read (a
  // pipelined request) does not count as closed.
  bool closed() const;

 private:
  int fd_ = -1;
};

}  // namespace df::server
