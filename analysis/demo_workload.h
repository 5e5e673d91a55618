// DemoWorkload: a built-in generator of a realistic transformer training allocation trace.
//
// It emits the tensor lifetimes of mixed-precision (bf16) training with AdamW of a GPT-style
// model, step by step: persistent weights, gradients and optimizer states (fp32 master weights,
// exp_avg, exp_avg_sq) created at the first step; per layer, forward activations kept until that
// layer's backward; backward temporaries; the optimizer's per-parameter temporaries; and the
// logits and loss. Sequence lengths vary from step to step, which is what fragments PyTorch's
// cache in NLP training (pytorch#31252): each step's activations have other sizes, and the holes
// they leave do not fit the next step's.
//
// The trace is deterministic for a given config (seeded), and it carries markers
// ("step 3 / forward") so analyses can say in which phase a block was allocated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fslog/allocation_role.h"

namespace fragscope {

struct DemoWorkloadConfig {
  int layers = 24;
  int hidden = 1024;
  int heads = 16;
  int vocab = 50257;
  int micro_batch = 8;
  // Sequence lengths drawn uniformly per step.
  std::vector<int> seq_lens = {256, 384, 512, 640, 768, 896, 1024};
  int steps = 12;
  uint64_t seed = 1;
  // Without flash attention the b*heads*s*s score and probability tensors are materialized.
  bool flash_attention = false;
};

// The part of a training step a mark opens.
enum class WorkloadPhase : uint8_t { kInit, kForward, kBackward, kOptimizer };

// Who holds a tensor of the workload, as a prediction would name it (its context in the log,
// fslog/FORMAT.md "Context records"): the GPT-2 module path of Hugging Face's model
// ("transformer.h.3.mlp.c_fc"), the ATen op that makes it, its role.
struct WorkloadHolder {
  AllocationRole role = AllocationRole::kUnknown;
  std::string module;
  std::string op;
  bool backward = false;
};

struct WorkloadOp {
  enum class Kind : uint8_t { kAlloc, kFree, kMark };
  Kind kind = Kind::kAlloc;
  uint64_t id = 0;                             // tensor id (kAlloc, kFree)
  uint64_t bytes = 0;                          // kAlloc
  std::string text;                            // kMark: the marker's text, as logged
  WorkloadPhase phase = WorkloadPhase::kInit;  // kMark
  WorkloadHolder holder;                       // kAlloc
};

std::vector<WorkloadOp> GenerateDemoWorkload(const DemoWorkloadConfig& config);

// Parameters of the config's model (for reports).
uint64_t DemoModelParameters(const DemoWorkloadConfig& config);

// The config's model as an .fslog model record (analysis/explain/model_job.h): a GPT-2-style config
// and the job's shape at its longest sequence. The workload keeps Megatron-style tensors (a 16-bit
// residual stream, no dropout masks), which Korthikanti's activation model describes, so the
// record names that model rather than the torch-autocast default of a Hugging Face config.
std::string DemoModelRecord(const DemoWorkloadConfig& config);

}  // namespace fragscope
