// Per-GPU memory of a training step, term by term, on the most-loaded rank (pipeline stage 0).
//
// Model states per trainable parameter (B_w = 4 for fp32, 2 for fp16/bf16 mixed precision):
//   weights          B_w                       sharded over d at ZeRO-3
//   gradients        4 (fp32), 2 (16bit), 4 (fp32 main grads), 2 (16bit+fp32: the 16-bit part)
//                                               sharded over d at ZeRO >= 2
//   main gradients   4, only for 16bit+fp32     sharded over d at ZeRO >= 1 (optimizer-side copy)
//   master weights   4 under mixed precision    sharded over d at ZeRO >= 1
//   optimizer states optimizer_states.h         sharded over d at ZeRO >= 1
// ZeRO (Rajbhandari et al. arXiv:1910.02054) and Megatron's distributed optimizer (= ZeRO-1 over
// the data-parallel group) fall out of the sharding column. DeepSpeed's two estimators count
// gradients differently (stage_1_and_2.py: 18 = 2 fp16 grads + 4 fp32 grads + 4 + 8; stage3.py:
// 18 = 2 fp16 params + 4 fp32 grads + 4 + 8, no fp16 grads); both are reproduced exactly:
//   ZeRO-2 2 + 18/N with --grads 16bit+fp32; ZeRO-3 18/N + 4 x largest layer (the "gathered
//   parameters" term below) with --grads fp32.
// CPU offload (ZeRO-Offload) moves gradients, master weights and optimizer states to host
// terms; offloading parameters (ZeRO-3) moves the weight shard too. Expert parameters shard over
// the expert data-parallel group d / ep.
// LoRA: the base weights are frozen (no gradients, master or states); adapters are fp32 (PEFT's
// default) with fp32 gradients and the optimizer's states: 2 P + 16 P_lora with bf16 + AdamW.
// QLoRA stores the block linear weights in NF4 (lora.h). With tensor parallelism the adapters
// are assumed split like their base matrices (P_lora / tp), an approximation.
// Then activations (activation_memory.h) and the explicit device overheads (overheads.h).
#pragma once

#include "absl/status/statusor.h"

#include "estimator/model_spec.h"
#include "estimator/term.h"
#include "estimator/training_config.h"

namespace fragscope::estimator {

// Validates spec, config and layout; errors name the offending field.
absl::StatusOr<MemoryEstimate> EstimateTraining(const ModelSpec& spec,
                                                const TrainingConfig& config);

}  // namespace fragscope::estimator
