#include "estimator/dtype.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace fragscope::estimator {

double BytesPerElement(DType dtype) {
  switch (dtype) {
    case DType::kFp32:
      return 4.0;
    case DType::kFp16:
    case DType::kBf16:
      return 2.0;
    case DType::kFp8:
    case DType::kInt8:
      return 1.0;
    case DType::kInt4:
      return 0.5;
  }
  return 0.0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFp32:
      return "fp32";
    case DType::kFp16:
      return "fp16";
    case DType::kBf16:
      return "bf16";
    case DType::kFp8:
      return "fp8";
    case DType::kInt8:
      return "int8";
    case DType::kInt4:
      return "int4";
  }
  return "?";
}

absl::StatusOr<DType> ParseDType(absl::string_view text, absl::string_view field) {
  const std::string name = absl::AsciiStrToLower(text);
  if (name == "fp32" || name == "float32" || name == "float") return DType::kFp32;
  if (name == "fp16" || name == "float16" || name == "half") return DType::kFp16;
  if (name == "bf16" || name == "bfloat16") return DType::kBf16;
  if (name == "fp8" || name == "float8" || name == "fp8_e4m3" || name == "fp8_e5m2") {
    return DType::kFp8;
  }
  if (name == "int8") return DType::kInt8;
  if (name == "int4") return DType::kInt4;
  return absl::InvalidArgumentError(absl::StrCat(field, ": unknown dtype '", text,
                                                 "' (expected fp32, fp16, bf16, fp8, int8, int4)"));
}

}  // namespace fragscope::estimator
