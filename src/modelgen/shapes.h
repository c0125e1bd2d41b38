// Named model shapes (published Qwen3.5 / Qwen3 sizes and small test shapes) and the
// per-dimension overrides make-model accepts (internal to modelgen).
#pragma once
#include <cstdint>
#include <string_view>

#include "model/hparams.h"
#include "modelgen/make_model.h"

namespace df::modelgen {

struct ModelShape {
  HParams hp;          // hp.n_vocab: default token_embd rows, 0 = the vocabulary's own size
  bool tied = true;
};

Arch parse_arch(std::string_view name);  // throws df::Error
// Throws df::Error naming the shapes that exist for the arch.
ModelShape named_shape(Arch arch, std::string_view name);
// Applies overrides, re-deriving dependent values (rope sections, inner size), and validates.
// Throws df::Error for flags that do not apply to the arch or values that make no model.
void apply_overrides(ModelShape& shape, const ShapeOverrides& ov);

}  // namespace df::modelgen
