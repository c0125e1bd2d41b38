// deltaflash convert: a Hugging Face checkpoint directory (config.json + safetensors) -> GGUF,
// with the tensor names, shapes, metadata and value transforms of llama.cpp's converter
// (convert_hf_to_gguf.py) for qwen35 and qwen3, so the file runs in both engines.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

namespace df {

struct ConvertOptions {
  std::string input_dir;  // config.json, model.safetensors[.index.json], tokenizer.json
  std::string output;
  // "auto" (llama.cpp's default: bf16 for a bf16 checkpoint, else f16), a ggml type name
  // (f32, f16, bf16, q8_0, q4_k, q6_k, iq4_xs, ...) or a recipe (mix-q4_k_m, mix-iq4_xs). Norms,
  // biases, ssm_a, ssm_dt and ssm_conv1d stay F32 as llama.cpp keeps them.
  std::string type = "auto";
  // Empty: tokenizer.json (+ tokenizer_config.json) of input_dir, an error when absent.
  // "toy": make-model's toy vocabulary (tests). FILE.gguf: every tokenizer.* key of that file.
  std::string vocab;
  bool keep_mtp = true;   // MTP tensors as blk.{n_layer}.nextn.* (llama.cpp's newer converter)
  int threads = 0;        // 0 = all hardware threads; the output does not depend on it
  std::function<void(size_t done, size_t total)> progress;  // bytes written so far
  std::function<void(const std::string&)> log;              // notices; default stderr
};

// Throws df::Error naming the file, tensor or field at fault. Nothing is written on error
// (the writer renames a temporary file only at the end).
void convert_hf(const ConvertOptions& opt);

}  // namespace df
