// The tensors a shape implies: GGUF names and ne exactly as llama.cpp's converter writes them
// for qwen35 / qwen3, with the random distribution each one gets (internal to modelgen).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/hparams.h"
#include "quant/types.h"

namespace df::modelgen {

enum class TensorRole {
  TokenEmbd, Output, Norm,
  AttnQ, AttnK, AttnV, AttnOut,
  AttnQkv, AttnGate, SsmConv, SsmDt, SsmA, SsmAlpha, SsmBeta, SsmOut,
  FfnGate, FfnUp, FfnDown,
  NextnEhProj,
};

// Matrices (2-D, name ends in ".weight", not a norm, not the conv kernel) are the tensors a
// quantized file quantizes; everything else stays F32.
bool is_quantizable(TensorRole role);

// How values are drawn. Normal: mean a, std b. NegExp: -exp(U(a, b)) (ssm_a = -exp(A_log)).
struct WeightInit {
  enum class Kind { Normal, NegExp } kind = Kind::Normal;
  float a = 0, b = 0;
};

struct PlannedTensor {
  std::string name;
  std::vector<int64_t> ne;  // ne[0] contiguous
  TensorRole role;
  int layer = -1;           // block index, -1 for globals
  WeightInit init;
  GgmlType type = GgmlType::F32;  // set by assign_types
};

// Order: token_embd, blocks 0..n_layer+n_nextn-1, output_norm, output (when untied).
std::vector<PlannedTensor> plan_tensors(const HParams& hp, bool tied, int64_t n_vocab);

}  // namespace df::modelgen
