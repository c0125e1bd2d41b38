// deltaflash convert for DFlash drafters published in the Hugging Face layout (z-lab style:
// `fc`, `hidden_norm`, `layers.*` Qwen3 decoder layers, `norm`; config with block size, target
// layer ids and mask token) into the drafter GGUF layout (arch qwen35-dflash-draft, dflash.*
// keys; docs/design.md "DFlash drafter").
#pragma once
#include <nlohmann/json.hpp>

#include "convert/convert.h"

namespace df {

// A config.json that describes a DFlash drafter (architectures names DFlashDraftModel, or it
// has a dflash_config block).
bool is_dflash_config(const nlohmann::json& config);

// Throws df::Error naming the file, tensor or field at fault; nothing is written on error.
void convert_dflash(const ConvertOptions& opt, const nlohmann::json& config);

}  // namespace df
