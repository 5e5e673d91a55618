// DeviceOverheads: memory a process holds on the GPU outside any tensor formula. Always reported
// as explicit terms (Note [Every number traceable]), never folded into a factor.
//
// Default CUDA context: 552,402,944 B, measured for this project on an H100 80GB HBM3 and an
// H200 (torch 2.11.0+cu130, driver 580.159.04): torch.cuda.mem_get_info() total minus free right
// after the first CUDA call, the same on both. It grows as lazily loaded kernels are first used.
// Other published values: 287,047,680 B with lazy / 666,632,192 B with eager module loading
// (pytorch PR #86509), 650 MB (gpu_poor), 1000 MiB (vram-calculator), 1343 MB on a V100
// (transformers docs). The library workspace (cuBLAS, cuDNN, NCCL buffers) defaults to 0
// because no public source gives a defensible default: set it for your stack.
#pragma once

#include <vector>

#include "estimator/term.h"

namespace fragscope::estimator {

inline constexpr double kDefaultCudaContextBytes = 552402944.0;

struct DeviceOverheads {
  double cuda_context_bytes = kDefaultCudaContextBytes;
  double workspace_bytes = 0;
};

// Two device terms, "cuda_context" and "workspace", always present (possibly 0).
std::vector<Term> DeviceOverheadTerms(const DeviceOverheads& overheads);

}  // namespace fragscope::estimator
