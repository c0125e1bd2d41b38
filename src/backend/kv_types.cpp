#include "backend/backend.h"
#include "util/error.h"

namespace df {

void check_kv_type(GgmlType type, int head_dim) {
  if (type != GgmlType::F16 && type != GgmlType::F32 && type != GgmlType::Q8_0)
    fail("KV cache type {} is not supported (f16, f32, q8_0)", type_name(type));
  if (type == GgmlType::Q8_0 && head_dim % 32 != 0)
    fail("KV cache type q8_0 needs attention head dims that are multiples of 32 (its block size), not {}: "
         "use --kv-type f16 or f32",
         head_dim);
}

}  // namespace df
