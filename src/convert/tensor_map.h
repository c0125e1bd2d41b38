// Hugging Face tensor name -> GGUF tensor name plus what happens to the values on the way,
// as llama.cpp's converter does it for qwen35 (Qwen3_5TextModel) and qwen3 (Qwen3Model).
// The rules are data tables in tensor_map.cpp.
#pragma once
#include <string>

#include "convert/hf_config.h"

namespace df::convert {

// Elementwise change of the values.
enum class ValueOp {
  None,
  AddOne,  // Qwen3.5's zero-centred RMSNorm weights: GGUF stores 1 + w
  NegExp,  // A_log -> ssm_a = -exp(A_log)
};

// Where a tensor holds DeltaNet value heads, which GGUF stores in tiled order instead of HF's
// grouped order (see v_heads.h). d = the value head size d_v.
enum class VHeadAxis {
  None,
  QkvRows,       // in_proj_qkv: the V rows after the 2 n_k d_k q/k rows, d rows per head
  Rows,          // in_proj_z: d rows per head
  RowPerHead,    // in_proj_a / in_proj_b: one row per head
  Elements,      // A_log, dt_bias: one value per head
  ConvChannels,  // conv1d [conv_dim, 1, K]: the V channels after the q/k channels, d per head
  Columns,       // out_proj: input columns, d per head
};

struct MappedTensor {
  bool skip = false;
  std::string skip_reason;  // when skipped: "vision tower", "MTP (--no-mtp)", ...
  std::string gguf_name;
  ValueOp op = ValueOp::None;
  VHeadAxis v_heads = VHeadAxis::None;
  int mtp_layer = -1;       // J of mtp.layers.J.*, else -1
};

// Maps one checkpoint tensor. MTP tensors (mtp.*) become block n_layer + J (nextn.* names for
// the MTP head) unless keep_mtp is false. Throws df::Error for names no rule covers.
MappedTensor map_hf_tensor(const std::string& hf_name, const HfModelConfig& cfg, bool keep_mtp);

}  // namespace df::convert
