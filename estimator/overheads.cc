#include "estimator/overheads.h"

#include <string>
#include <utility>

namespace fragscope::estimator {

namespace {

// A term whose bytes are configured by a flag (--`flag`), the default or the user's value.
Term ConfiguredTerm(std::string key, std::string label, const std::string& flag, double bytes,
                    std::string source) {
  return Term{.key = std::move(key),
              .label = std::move(label),
              .value = bytes,
              .formula = "configured (--" + flag + ")",
              .values = FormatCount(bytes) + " B",
              .source = std::move(source)};
}

}  // namespace

std::vector<Term> DeviceOverheadTerms(const DeviceOverheads& overheads) {
  return {
      ConfiguredTerm(
          "cuda_context", "CUDA context", "cuda-context-mib", overheads.cuda_context_bytes,
          overheads.cuda_context_bytes == kDefaultCudaContextBytes
              ? "default: measured on H100/H200 with torch 2.11 + CUDA 13 (estimator/overheads.h)"
              : "user-provided"),
      ConfiguredTerm("workspace", "library workspace (cuBLAS/cuDNN/NCCL)", "workspace-mib",
                     overheads.workspace_bytes,
                     overheads.workspace_bytes == 0
                         ? "default 0: no defensible public default; set it for your stack"
                         : "user-provided")};
}

}  // namespace fragscope::estimator
