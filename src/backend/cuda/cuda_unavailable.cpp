// Stand-ins compiled into deltaflash_core when the build has no CUDA backend
// (DELTAFLASH_CUDA off, or AUTO without nvcc), so callers need no #ifdefs.
#include "backend/backend.h"
#include "backend/profiling_backend.h"
#include "util/error.h"

namespace df {

int cuda_device_count() { return 0; }

std::unique_ptr<Backend> make_cuda_backend(int, bool, bool, bool) {
  fail("this build of deltaflash has no CUDA backend (configure with -DDELTAFLASH_CUDA=ON where nvcc is installed)");
}

std::unique_ptr<OpClock> make_cuda_op_clock(Backend&) { return nullptr; }

}  // namespace df
