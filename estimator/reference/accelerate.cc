#include "estimator/reference/accelerate.h"

namespace fragscope::estimator::reference {

std::vector<AccelerateRow> AccelerateEstimate(double params, AccelerateAdamRule rule) {
  const double fp32 = 4.0 * params;
  struct Dtype {
    const char* name;
    double divisor;
  };
  const Dtype dtypes[] = {{"float32", 1}, {"float16", 2}, {"int8", 4}, {"int4", 8}};
  std::vector<AccelerateRow> rows;
  for (const Dtype& dtype : dtypes) {
    AccelerateRow row;
    row.dtype = dtype.name;
    row.model_bytes = fp32 / dtype.divisor;
    if (rule == AccelerateAdamRule::kBefore8644e23b) {
      row.adam_bytes = 4.0 * row.model_bytes;
    } else if (dtype.divisor == 1) {
      row.adam_bytes = 4.0 * fp32;  // model S, gradients S, optimizer 2S, step 4S
    } else if (dtype.divisor == 2) {
      row.adam_bytes = 2.0 * fp32;  // model S, gradients 1.5S, optimizer 2S, step 2S
    }
    rows.push_back(row);
  }
  return rows;
}

}  // namespace fragscope::estimator::reference
