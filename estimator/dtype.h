// Element types of weights, gradients, optimizer states and caches, and their storage cost.
//
// BytesPerElement is the raw element width only. Formats that carry per-block constants (NF4's
// absmax, GPTQ/AWQ group scales) are costed by the code that uses them (see lora.h for NF4), so a
// plain kInt4 is exactly 0.5 B/element as in accelerate's dtype table and Transformer Math 101.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fragscope::estimator {

enum class DType : uint8_t { kFp32, kFp16, kBf16, kFp8, kInt8, kInt4 };

// Storage bytes per element: 4, 2, 2, 1, 1, 0.5.
double BytesPerElement(DType dtype);

// Lower-case name as accepted by ParseDType: "fp32", "fp16", "bf16", "fp8", "int8", "int4".
absl::string_view DTypeName(DType dtype);

// Accepts the names above and the aliases float32, float16, bfloat16, half, float8, fp8_e4m3,
// fp8_e5m2. An unknown name is kInvalidArgument naming `field` and the value.
absl::StatusOr<DType> ParseDType(absl::string_view text, absl::string_view field);

}  // namespace fragscope::estimator
