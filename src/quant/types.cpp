// The ggml type table. Sizes follow gguf-py's GGML_QUANT_SIZES so that files with types we
// cannot compute with still parse (their tensors can be listed and skipped).
#include "quant/types.h"

#include <array>
#include <cctype>

#include "util/error.h"

namespace df {

namespace {

using T = GgmlType;

constexpr TypeTraits kTraits[] = {
    // type       name       block bytes supported vec_dot_type
    {T::F32, "f32", 1, 4, true, T::F32},
    {T::F16, "f16", 1, 2, true, T::F16},
    {T::Q4_0, "q4_0", 32, 18, true, T::Q8_0},
    {T::Q4_1, "q4_1", 32, 20, true, T::Q8_1},
    {T::Q5_0, "q5_0", 32, 22, true, T::Q8_0},
    {T::Q5_1, "q5_1", 32, 24, true, T::Q8_1},
    {T::Q8_0, "q8_0", 32, 34, true, T::Q8_0},
    {T::Q8_1, "q8_1", 32, 36, false, T::Q8_1},
    {T::Q2_K, "q2_K", 256, 84, true, T::Q8_K},
    {T::Q3_K, "q3_K", 256, 110, true, T::Q8_K},
    {T::Q4_K, "q4_K", 256, 144, true, T::Q8_K},
    {T::Q5_K, "q5_K", 256, 176, true, T::Q8_K},
    {T::Q6_K, "q6_K", 256, 210, true, T::Q8_K},
    {T::Q8_K, "q8_K", 256, 292, false, T::Q8_K},
    {T::IQ2_XXS, "iq2_xxs", 256, 66, false, T::Q8_K},
    {T::IQ2_XS, "iq2_xs", 256, 74, false, T::Q8_K},
    {T::IQ3_XXS, "iq3_xxs", 256, 98, false, T::Q8_K},
    {T::IQ1_S, "iq1_s", 256, 50, false, T::Q8_K},
    {T::IQ4_NL, "iq4_nl", 32, 18, true, T::Q8_0},
    {T::IQ3_S, "iq3_s", 256, 110, false, T::Q8_K},
    {T::IQ2_S, "iq2_s", 256, 82, false, T::Q8_K},
    {T::IQ4_XS, "iq4_xs", 256, 136, true, T::Q8_K},
    {T::I8, "i8", 1, 1, false, T::F32},
    {T::I16, "i16", 1, 2, false, T::F32},
    {T::I32, "i32", 1, 4, false, T::F32},
    {T::I64, "i64", 1, 8, false, T::F32},
    {T::F64, "f64", 1, 8, false, T::F32},
    {T::IQ1_M, "iq1_m", 256, 56, false, T::Q8_K},
    {T::BF16, "bf16", 1, 2, true, T::BF16},
    {T::TQ1_0, "tq1_0", 256, 54, false, T::Q8_K},
    {T::TQ2_0, "tq2_0", 256, 66, false, T::Q8_K},
    {T::MXFP4, "mxfp4", 32, 17, false, T::Q8_0},
};

constexpr uint32_t kMaxId = 39;

// id -> index into kTraits (or -1), built at compile time.
constexpr std::array<int8_t, kMaxId + 1> make_index() {
  std::array<int8_t, kMaxId + 1> idx{};
  for (auto& v : idx) v = -1;
  for (size_t i = 0; i < std::size(kTraits); ++i) idx[uint32_t(kTraits[i].type)] = int8_t(i);
  return idx;
}
constexpr auto kIndex = make_index();

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

}  // namespace

const TypeTraits* find_type_traits(uint32_t id) {
  if (id > kMaxId || kIndex[id] < 0) return nullptr;
  return &kTraits[kIndex[id]];
}

const TypeTraits& type_traits(GgmlType t) {
  const TypeTraits* tr = find_type_traits(uint32_t(t));
  if (!tr) fail("unknown ggml type id {}", uint32_t(t));
  return *tr;
}

std::optional<GgmlType> type_from_name(std::string_view name) {
  for (const TypeTraits& tr : kTraits)
    if (iequal(tr.name, name)) return tr.type;
  return std::nullopt;
}

}  // namespace df
