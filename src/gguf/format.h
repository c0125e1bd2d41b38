// GGUF format constants and small helpers shared by the reader and the writer (internal).
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "gguf/gguf.h"

namespace df::gguf::detail {

static_assert(std::endian::native == std::endian::little, "GGUF I/O assumes a little-endian host");

inline constexpr uint32_t kMagic = 0x46554747;  // the bytes 'G','G','U','F' read as a LE u32
inline constexpr uint32_t kWriteVersion = 3;
inline constexpr size_t kDefaultAlignment = 32;
inline constexpr const char* kAlignmentKey = "general.alignment";
inline constexpr int kMaxDims = 4;

// Caps that keep a corrupt length from turning into a huge allocation. Real keys and tensor
// names are < 100 bytes; the largest real string value is a chat template of tens of KiB.
inline constexpr uint64_t kMaxNameBytes = 64 * 1024;
inline constexpr uint64_t kMaxStringBytes = 256ull << 20;

// Smallest possible encodings, used to reject impossible counts before allocating.
inline constexpr uint64_t kMinKvBytes = 8 + 4 + 1;               // empty key, u8 value
inline constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, one dim

bool is_known_value_type(uint32_t t);
// Bytes of one scalar of type t in a file; 0 for STRING, ARRAY and unknown ids.
size_t scalar_size(ValueType t);
bool is_integer_type(ValueType t);  // U8..I64, U64, I64 (not BOOL)
bool is_float_type(ValueType t);
// "u32", "string", "array[i32]": for error messages.
std::string describe(const Value& v);
// A name safe to print: control bytes escaped, long names shortened.
std::string printable(std::string_view s);

inline bool is_pow2(uint64_t a) { return a != 0 && (a & (a - 1)) == 0; }
inline uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }

}  // namespace df::gguf::detail
