// Optimizer state bytes per trainable parameter, excluding the fp32 master copy (a separate
// term; see training_memory.h). Reference 7 and the optimizers' papers:
//   Adam / AdamW   8   m and v in fp32 (Kingma & Ba arXiv:1412.6980; Loshchilov & Hutter
//                      arXiv:1711.05101); ZeRO paper's K = 12 is these 8 plus the 4-byte master
//   8-bit Adam     2   m and v in 8 bits, block-wise (Dettmers et al. arXiv:2110.02861); the
//                      per-block fp32 scales (< 1 %) are not counted
//   SGD            0
//   SGD + momentum 4   one fp32 momentum buffer
//   Adafactor      factored: 4 bytes x (rows + cols) per matrix, x size per vector, beta1 = 0
//                  (Shazeer & Stern arXiv:1804.04235; HF's default). HF's docs quote "slightly
//                  more than 4 bytes" per parameter for t5-3b, which this does not reproduce.
#pragma once

#include <string>

#include "estimator/training_config.h"

namespace fragscope::estimator {

struct OptimizerStateCost {
  double bytes_per_param = 0;  // for non-factored optimizers
  bool factored = false;       // Adafactor: use the factored count instead
  std::string what;            // "m, v fp32"
  std::string source;
};

OptimizerStateCost OptimizerStates(Optimizer optimizer);

}  // namespace fragscope::estimator
