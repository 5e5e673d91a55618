// What torch.optim allocates while it updates the parameters, beyond the optimizer states: the
// optimizer step's temporaries, read from PyTorch 2.11's torch/optim/adam.py and sgd.py (AdamW
// is adam.py's code with decoupled weight decay, applied in place: param.mul_(1 - lr wd)).
//
//   Adam / AdamW, foreach (PyTorch's default for CUDA parameters, _multi_tensor_adam)
//       4 P    exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs): one fp32 tensor per
//              parameter, for the whole device-and-dtype group at once (every fp32 parameter is
//              in one group); every other _foreach_ call is in place, and the bias corrections
//              are Python floats (capturable=False)
//   Adam / AdamW, fused (_fused_adam_ / _fused_adamw_)
//       0      one kernel updates in place; its step counters are 4-byte tensors on the device
//              (one per parameter tensor, 512 B each in the caching allocator: kilobytes), not
//              counted
//   Adam / AdamW, for-loop (_single_tensor_adam)
//       8 n    denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps): the square root and
//              the quotient of one parameter of n elements are alive together; n is the largest
//              parameter tensor. The previous parameter's denom is still referenced while the
//              next is computed, but the largest tensor is the embedding (first) or the output
//              layer (after the final norm's vector) or an experts tensor between norms'
//              and router's smaller ones, so that is not counted
//   SGD (with or without momentum), every implementation
//       0      updates in place (weight_decay = 0, the default); the momentum buffers are the
//              gradients' clones made at the first step: optimizer states
// Adam without weight decay (the default, weight_decay = 0) allocates the same; Adam with
// weight decay adds a gradient-sized copy (grad.add(param, alpha=wd)), not modelled.
//
// The optimizer states themselves are made lazily at the first step (zeros_like per parameter
// in _init_group, before the update); from the second step on they are alive throughout, so
// the estimate counts them at every moment (the steady state).
#pragma once

#include <optional>

#include "estimator/model_spec.h"
#include "estimator/term.h"
#include "estimator/training_config.h"

namespace fragscope::estimator {

// Elements of the largest parameter tensor of a transformers model with this spec: the
// embedding (V h), a fused QKV or gate-up matrix, or a layer's experts stored as one 3-D tensor
// (transformers 5: experts.gate_up_proj is E x 2 f_e x h).
//   REQUIRES: spec.has_architecture().
double LargestParameterTensor(const ModelSpec& spec);

// The term "optimizer_step" (key), alive only during the optimizer step, for `params` trainable
// parameters updated by this rank (already divided by the sharding degree) in fp32. Empty for
// an optimizer that is not torch.optim's (adam8bit, adafactor): their temporaries are their
// libraries' and are not modelled.
std::optional<Term> OptimizerStepTerm(const ModelSpec& spec, const TrainingConfig& config,
                                      double params);

}  // namespace fragscope::estimator
