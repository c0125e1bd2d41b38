// Running the deltaflash CLI and the llama.cpp peer harness from tests.
#pragma once
#include <string>
#include <vector>

namespace df::test {

// Runs a shell command; returns its stdout. Throws (failing the test) on a non-zero exit,
// including the command and its output in the message.
std::string run_command(const std::string& cmd);

// Reads a file of raw little-endian float32 values.
std::vector<float> read_f32_file(const std::string& path);

// A fresh temporary directory, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace df::test
