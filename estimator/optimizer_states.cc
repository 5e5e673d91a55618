#include "estimator/optimizer_states.h"

namespace fragscope::estimator {

OptimizerStateCost OptimizerStates(Optimizer optimizer) {
  OptimizerStateCost cost;
  switch (optimizer) {
    case Optimizer::kAdam:
    case Optimizer::kAdamW:
      cost.bytes_per_param = 8;
      cost.what = "m, v fp32";
      cost.source =
          "Kingma & Ba arXiv:1412.6980 / Loshchilov & Hutter arXiv:1711.05101; ZeRO paper "
          "arXiv:1910.02054 (K = 12 incl. the master copy)";
      break;
    case Optimizer::kAdam8Bit:
      cost.bytes_per_param = 2;
      cost.what = "m, v 8-bit block-wise; block scales not counted";
      cost.source = "Dettmers et al. arXiv:2110.02861; HF model_memory_anatomy.md (2 B)";
      break;
    case Optimizer::kSgd:
      cost.bytes_per_param = 0;
      cost.what = "none";
      cost.source = "plain SGD keeps no state";
      break;
    case Optimizer::kSgdMomentum:
      cost.bytes_per_param = 4;
      cost.what = "momentum fp32";
      cost.source = "Transformer Math 101 (EleutherAI 2023); HF model_memory_anatomy.md (4 B)";
      break;
    case Optimizer::kAdafactor:
      cost.factored = true;
      cost.what = "factored second moment fp32, beta1 = 0";
      cost.source = "Shazeer & Stern arXiv:1804.04235 (row + column statistics per matrix)";
      break;
  }
  return cost;
}

}  // namespace fragscope::estimator
