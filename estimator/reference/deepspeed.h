// Reproduction of DeepSpeed's model-state estimators (docs/estimator_reference.md §2):
// estimate_zero2_model_states_mem_needs (runtime/zero/stage_1_and_2.py, after PR #5099) and
// estimate_zero3_model_states_mem_needs (runtime/zero/stage3.py). Model states only: no
// activations, buffers or CUDA context. DeepSpeed prints bytes / 2^30 labelled "GB".
//
// N = gpus_per_node * nodes, n = gpus_per_node, beta = additional_buffer_factor (1.5),
// LL = 4 * largest_layer_params, q = 1 / nodes.
//   ZeRO-2, offload_optimizer=cpu   GPU 2P             CPU P * max(4N, 16) * beta
//   ZeRO-2, none                    GPU 2P + 18P/N     CPU P * 4n * beta
//   ZeRO-3 offload param+opt        GPU LL             CPU P*18*q*beta | P*max(4n, 18q)*beta
//   ZeRO-3 offload opt              GPU LL + 2P/N      CPU P*16*q*beta | P*max(4n, 16q)*beta
//   ZeRO-3 none                     GPU LL + 18P/N     CPU largest*4n*beta | P*4n*beta
// (CPU columns: zero_init = 1 | 0.) The docs (memory.rst) still show the pre-#5099 ZeRO-2
// formula 4P + 16P/N, and write max(4 * gpus_per_node, 16) where the code uses total GPUs.
#pragma once

#include <cstdint>
#include <vector>

namespace fragscope::estimator::reference {

struct DeepSpeedRow {
  bool offload_params = false;
  bool offload_optimizer = false;
  bool zero_init = true;  // ZeRO-3 only
  double gpu_bytes = 0;   // per GPU
  double cpu_bytes = 0;   // per node
};

// Two rows: offload_optimizer = true, then false.
std::vector<DeepSpeedRow> DeepSpeedZero2Estimates(double total_params, int64_t gpus_per_node,
                                                  int64_t nodes, double buffer_factor = 1.5);

// Six rows in DeepSpeed's print order: (cpu, cpu), (none, cpu), (none, none), each with
// zero_init = true then false.
std::vector<DeepSpeedRow> DeepSpeedZero3Estimates(double total_params, double largest_layer_params,
                                                  int64_t gpus_per_node, int64_t nodes,
                                                  double buffer_factor = 1.5);

}  // namespace fragscope::estimator::reference
