// ggml tensor types as data: ids, block sizes, bytes per block, and which activation
// format each weight type is multiplied against. The one table every other part reads.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace df {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

struct TypeTraits {
  GgmlType type;
  const char* name;        // as llama.cpp prints it: "q4_K", "iq4_xs", "f32", ...
  int block_size;          // elements per block
  int type_size;           // bytes per block
  bool supported;          // we can dequantize it and multiply with it
  GgmlType vec_dot_type;   // activation format for dot products (Q8_0, Q8_1, Q8_K, F16, BF16, F32)
};

// Known ggml type id (supported or not)? Unknown ids are rejected when a file is read.
const TypeTraits* find_type_traits(uint32_t id);
// Traits of a known type; throws df::Error for unknown ids.
const TypeTraits& type_traits(GgmlType t);
inline const char* type_name(GgmlType t) { return type_traits(t).name; }
// Case-insensitive name lookup ("q4_k", "Q4_K", "iq4_xs").
std::optional<GgmlType> type_from_name(std::string_view name);

// Bytes of a row of n elements; n must be a multiple of the block size (checked by callers
// that read files; this function asserts nothing).
inline size_t row_size(GgmlType t, int64_t n) {
  const TypeTraits& tr = type_traits(t);
  return size_t(n / tr.block_size) * size_t(tr.type_size);
}

}  // namespace df
