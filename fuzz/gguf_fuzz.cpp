// libFuzzer target for the GGUF reader: any input must either parse into a File whose every
// tensor lies inside the input, or be rejected with df::Error. Anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "gguf/gguf.h"
#include "util/error.h"

namespace {

// Exercises the getters on whatever keys the input has; type mismatches are expected errors.
void use_metadata(const df::gguf::File& f) {
  for (const auto& [key, v] : f.metadata()) {
    try { f.get_u32(key); } catch (const df::Error&) {}
    try { f.get_i64(key); } catch (const df::Error&) {}
    try { f.get_f32(key); } catch (const df::Error&) {}
    try { f.get_bool_or(key, false); } catch (const df::Error&) {}
    try { f.get_string(key); } catch (const df::Error&) {}
    try { f.get_string_array(key); } catch (const df::Error&) {}
    try { f.get_int_array(key); } catch (const df::Error&) {}
    try { f.get_float_array(key); } catch (const df::Error&) {}
    if (f.find(key) != &v) std::abort();
  }
}

// Tensors must lie inside the input, aligned, and be found by name; reading their first and
// last byte lets AddressSanitizer check the pointers.
void check_tensors(const df::gguf::File& f, const uint8_t* data, size_t size) {
  unsigned sum = 0;
  for (const auto& t : f.tensors()) {
    if (t.nbytes == 0 || t.data < data || t.nbytes > size_t(data + size - t.data)) std::abort();
    if (t.offset % f.alignment() != 0) std::abort();
    if (f.find_tensor(t.name) != &t) std::abort();
    sum += t.data[0] + t.data[t.nbytes - 1];
  }
  volatile unsigned sink = sum;
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto f = df::gguf::File::parse(data, size, "fuzz.gguf");
    use_metadata(*f);
    check_tensors(*f, data, size);
  } catch (const df::Error&) {
    // Rejected: the expected outcome for most inputs.
  }
  return 0;
}
