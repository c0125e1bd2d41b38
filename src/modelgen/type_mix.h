// Per-tensor type choice: one type for every matrix, or a named recipe mirroring what real
// quantized Qwen3.5 files contain (internal to modelgen).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "model/hparams.h"
#include "modelgen/tensor_plan.h"

namespace df::modelgen {

enum class Recipe { Pure, MixQ4KM, MixIQ4XS };

struct TypeSpec {
  Recipe recipe = Recipe::Pure;
  GgmlType type = GgmlType::Q8_0;  // Pure: the type of every matrix
};

// "q4_k", "F16", "mix-q4_k_m", "mix-iq4_xs". Throws df::Error for names that are not ggml types,
// or types make-model cannot generate.
TypeSpec parse_type_spec(std::string_view name);

// Sets PlannedTensor::type for every tensor. Rows whose length (ne0) is not a multiple of the
// chosen type's block size fall back to Q8_0, then F16, each fallback reported through log.
void assign_types(std::vector<PlannedTensor>& tensors, const TypeSpec& spec, const HParams& hp,
                  const std::function<void(const std::string&)>& log);

// general.file_type (llama_ftype) for the spec: the closest llama.cpp file type.
uint32_t file_type_of(const TypeSpec& spec);

}  // namespace df::modelgen
