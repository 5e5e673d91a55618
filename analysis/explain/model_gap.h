// ModelGap: how far the memory a job actually held is from the theoretical footprint of its
// model (estimator/), and which term the difference most likely sits in.
//
// --model SPEC:  NAME_OR_JSON[:key=value,...]
//   NAME_OR_JSON  an estimator preset (fragscope estimate --list-presets) or a model spec JSON
//                 (fragscope's or a Hugging Face config.json)
//   keys          train (default) | infer; seq, micro_batch, precision (fp32|fp16|bf16),
//                 optimizer, zero, tp, pp, dp, recompute (none|selective|full), flash (0|1),
//                 dropout (0|1), activations (korthikanti|torch-autocast: see
//                 estimator/README.md; torch-autocast for an eager PyTorch job under autocast);
//                 for inference: batch, context, dtype, kv_dtype
//   e.g.  gpt2-medium:seq=1024,micro_batch=8   llama-2-7b:infer,batch=16,context=4096
//         gpt2-small:seq=512,micro_batch=8,flash=1,activations=torch-autocast
//
// Attribution is a heuristic, and says so: live blocks are sorted into the estimator's terms by
// the marker phase they were allocated in (forward -> activations, backward -> gradients,
// optimizer/step -> optimizer state, init/weights/before the trace -> weights, prefill/decode ->
// KV cache). For a torch-autocast estimate the fp32 master weights are the model's parameters
// (allocated at init: "weights") and the 16-bit weight copies are made in the forward
// ("activations"). The term whose measured bytes exceed its estimate the most is named. Device
// terms that the allocator never sees (CUDA context, library workspace) and terms not alive at the
// estimate's peak (Term::at_peak) are left out of the comparison.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/explain/segment_map.h"
#include "estimator/term.h"

namespace fragscope {

struct TermGap {
  std::string category;  // "weights", "gradients", "optimizer", "activations", "kv_cache"
  double estimated_bytes = 0;
  double measured_bytes = 0;  // live blocks attributed by phase
};

struct ModelGap {
  std::string model;             // the estimate's model name and workload
  double theoretical_bytes = 0;  // the allocator-visible device terms
  double allocated_bytes = 0;    // what the job held
  std::vector<TermGap> terms;
  double unattributed_bytes = 0;  // live blocks whose phase (or role) maps to no term
  bool by_role = false;     // blocks attributed by their roles (tag records), not their phases
  std::string likely_term;  // "" when no term exceeds its estimate
  std::vector<std::string> lines;  // the human explanation
};

// The estimate's device terms that the caching allocator holds at the peak (weights, gradients,
// optimizer states, activations, KV cache): the theoretical peak a memory-fraction cap limits.
double AllocatorVisibleBytes(const estimator::MemoryEstimate& estimate);

// Compares `layout` (live blocks with phases) against `estimate`. Whether the footprint fits the
// job's cap is the verdict's (job_verdict.h).
ModelGap CompareWithModel(const estimator::MemoryEstimate& estimate, const LayoutSummary& layout);

}  // namespace fragscope
