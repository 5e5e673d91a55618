#include "analysis/explain/recorded_adapter.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fragscope {

absl::StatusOr<bool> ApplyRecordedAdapterKey(const std::string& name, const nlohmann::json& value,
                                             const std::string& where, estimator::LoraConfig* lora,
                                             std::set<std::string>* given) {
  const auto wrong = [&](const char* expected) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: expected %s, got %s", where, expected, value.dump()));
  };
  if (name == "lora_alpha" || name == "lora_dropout") return true;
  if (name == "lora_rank") {
    if (!value.is_number_integer() || value.get<int64_t>() <= 0) {
      return wrong("a positive integer");
    }
    lora->rank = value.get<int64_t>();
  } else if (name == "lora_targets") {
    if (!value.is_string()) return wrong("a comma-separated list of modules");
    const std::string text = value.get<std::string>();
    absl::StatusOr<uint32_t> targets =
        estimator::ParseLoraTargets(text == "all-linear" ? "all" : text);
    if (!targets.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", targets.status().message()));
    }
    lora->targets = *targets;
  } else if (name == "quant") {
    if (value != "nf4") return wrong("\"nf4\"");
    lora->qlora = true;
  } else if (name == "double_quant") {
    if (!value.is_boolean()) return wrong("true or false");
    lora->double_quant = value.get<bool>();
  } else {
    return false;
  }
  given->insert(name);
  return true;
}

}  // namespace fragscope
