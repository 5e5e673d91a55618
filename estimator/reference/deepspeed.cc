#include "estimator/reference/deepspeed.h"

#include <algorithm>

namespace fragscope::estimator::reference {

std::vector<DeepSpeedRow> DeepSpeedZero2Estimates(double total_params, int64_t gpus_per_node,
                                                  int64_t nodes, double buffer_factor) {
  const double p = total_params;
  const double n = static_cast<double>(gpus_per_node);
  const double total_gpus = n * static_cast<double>(nodes);
  std::vector<DeepSpeedRow> rows(2);
  rows[0].offload_optimizer = true;
  rows[0].gpu_bytes = 2.0 * p;
  rows[0].cpu_bytes = p * std::max(4.0 * total_gpus, 16.0) * buffer_factor;
  rows[1].offload_optimizer = false;
  rows[1].gpu_bytes = 2.0 * p + 18.0 * p / total_gpus;
  rows[1].cpu_bytes = p * 4.0 * n * buffer_factor;
  return rows;
}

std::vector<DeepSpeedRow> DeepSpeedZero3Estimates(double total_params, double largest_layer_params,
                                                  int64_t gpus_per_node, int64_t nodes,
                                                  double buffer_factor) {
  const double p = total_params;
  const double n = static_cast<double>(gpus_per_node);
  const double total_gpus = n * static_cast<double>(nodes);
  const double q = 1.0 / static_cast<double>(nodes);
  const double ll = 4.0 * largest_layer_params;
  std::vector<DeepSpeedRow> rows;
  for (const bool zero_init : {true, false}) {
    DeepSpeedRow row{
        true, true, zero_init, ll,
        zero_init ? p * 18.0 * q * buffer_factor : p * std::max(4.0 * n, 18.0 * q) * buffer_factor};
    rows.push_back(row);
  }
  for (const bool zero_init : {true, false}) {
    DeepSpeedRow row{
        false, true, zero_init, ll + 2.0 * p / total_gpus,
        zero_init ? p * 16.0 * q * buffer_factor : p * std::max(4.0 * n, 16.0 * q) * buffer_factor};
    rows.push_back(row);
  }
  for (const bool zero_init : {true, false}) {
    DeepSpeedRow row{
        false, false, zero_init, ll + 18.0 * p / total_gpus,
        zero_init ? largest_layer_params * 4.0 * n * buffer_factor : p * 4.0 * n * buffer_factor};
    rows.push_back(row);
  }
  return rows;
}

}  // namespace fragscope::estimator::reference
