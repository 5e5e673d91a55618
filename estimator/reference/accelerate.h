// Reproduction of Hugging Face accelerate's `accelerate estimate-memory`
// (src/accelerate/commands/estimate.py; docs/estimator_reference.md §3). accelerate builds the
// headless AutoModel (an untied LM head is not counted: Llama-2-7B -> 6,607,343,616 params) and
// sizes it in fp32 (S = 4 bytes x params+buffers); other dtypes divide S. "Training using Adam":
//   current (8644e23b, 2024): max(model, gradients, optimizer, step): fp32 4S; fp16/bf16 2S
//                             (8 B/param, the largest component, not a sum); int8/int4 N/A
//   before 8644e23b:          4 x the dtype's own size (the docs' and the HF Space's tables)
// Sizes are printed as bytes / 1024^k labelled "MB/GB".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fragscope::estimator::reference {

enum class AccelerateAdamRule : uint8_t { kCurrent, kBefore8644e23b };

struct AccelerateRow {
  std::string dtype;  // "float32", "float16", "int8", "int4"
  double model_bytes = 0;
  double adam_bytes = -1;  // -1 = "N/A"
};

// `params` counts parameters and buffers of the headless model.
std::vector<AccelerateRow> AccelerateEstimate(double params, AccelerateAdamRule rule);

}  // namespace fragscope::estimator::reference
