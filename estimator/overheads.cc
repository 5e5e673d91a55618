#include "estimator/overheads.h"

namespace fragscope::estimator {

std::vector<Term> DeviceOverheadTerms(const DeviceOverheads& overheads) {
  std::vector<Term> terms;
  Term context;
  context.key = "cuda_context";
  context.label = "CUDA context";
  context.value = overheads.cuda_context_bytes;
  context.formula = "configured (--cuda-context-mib)";
  context.values = FormatCount(overheads.cuda_context_bytes) + " B";
  context.source =
      overheads.cuda_context_bytes == kDefaultCudaContextBytes
          ? "default: measured on H100/H200 with torch 2.11 + CUDA 13 (estimator/overheads.h)"
          : "user-provided";
  terms.push_back(context);
  Term workspace;
  workspace.key = "workspace";
  workspace.label = "library workspace (cuBLAS/cuDNN/NCCL)";
  workspace.value = overheads.workspace_bytes;
  workspace.formula = "configured (--workspace-mib)";
  workspace.values = FormatCount(overheads.workspace_bytes) + " B";
  workspace.source = overheads.workspace_bytes == 0
                         ? "default 0: no defensible public default; set it for your stack"
                         : "user-provided";
  terms.push_back(workspace);
  return terms;
}

}  // namespace fragscope::estimator
