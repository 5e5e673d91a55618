#include "analysis/cli/estimate_flags.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace fragscope::cli::estimate {
namespace {

// Flags that take no value (names without the dashes; --help lists them all).
constexpr const char* kSwitches[] = {"train",
                                     "infer",
                                     "sp",
                                     "distributed-optimizer",
                                     "offload-optimizer",
                                     "offload-params",
                                     "flash-attention",
                                     "no-dropout",
                                     "no-activations",
                                     "persistent-grads",
                                     "qlora",
                                     "no-double-quant",
                                     "explain",
                                     "help",
                                     "list-presets",
                                     "list-gpus"};
// Flags that take one value.
constexpr const char* kValued[] = {"preset",
                                   "model-json",
                                   "params",
                                   "tp",
                                   "pp",
                                   "dp",
                                   "ep",
                                   "vpp",
                                   "microbatches",
                                   "precision",
                                   "grads",
                                   "optimizer",
                                   "zero",
                                   "seq",
                                   "micro-batch",
                                   "recompute",
                                   "activation-model",
                                   "lora-rank",
                                   "lora-targets",
                                   "dtype",
                                   "kv-dtype",
                                   "batch",
                                   "context",
                                   "prompt",
                                   "overhead-factor",
                                   "mfu",
                                   "bw-efficiency",
                                   "gpu",
                                   "gpu-mem-gib",
                                   "cuda-context-mib",
                                   "workspace-mib",
                                   "solve",
                                   "scale",
                                   "json"};

}  // namespace

absl::StatusOr<Flags> ParseFlags(const std::vector<std::string>& args) {
  Flags flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 3 || arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "' (flags start with --)"));
    }
    std::string name = arg.substr(2);
    std::optional<std::string> inline_value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    bool is_switch = false;
    bool is_valued = false;
    for (const char* s : kSwitches) is_switch = is_switch || name == s;
    for (const char* v : kValued) is_valued = is_valued || name == v;
    if (!is_switch && !is_valued) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '--", name, "'"));
    }
    if (flags.Has(name)) {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " given twice"));
    }
    if (is_switch) {
      if (inline_value) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", name, " takes no value (got '", *inline_value, "')"));
      }
      flags.switches[name] = true;
      continue;
    }
    if (!inline_value) {
      // A flag after it is not its value (`--json --explain` must not write a file "--explain").
      if (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "flag --", name, " needs a value", name == "json" ? " (a path, or - for stdout)" : "",
            i + 1 < args.size() ? absl::StrCat(", not the flag ", args[i + 1]) : ""));
      }
      inline_value = args[++i];
    }
    flags.values[name] = *inline_value;
  }
  return flags;
}

absl::Status BadValue(absl::string_view flag, absl::string_view value, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid value '", value, "' for --", flag, ": expected ", want));
}

absl::Status ReadInt(const Flags& flags, const std::string& name, int64_t minimum, int64_t& field) {
  const std::optional<std::string> value = flags.Value(name);
  if (!value) return absl::OkStatus();
  int64_t parsed = 0;
  if (!absl::SimpleAtoi(*value, &parsed) || parsed < minimum) {
    return BadValue(name, *value,
                    minimum > 0 ? "a positive integer" : absl::StrCat("an integer >= ", minimum));
  }
  field = parsed;
  return absl::OkStatus();
}

absl::Status ReadDouble(const Flags& flags, const std::string& name, double minimum, double maximum,
                        double& field) {
  const std::optional<std::string> value = flags.Value(name);
  if (!value) return absl::OkStatus();
  double parsed = 0;
  if (!absl::SimpleAtod(*value, &parsed) || !std::isfinite(parsed) || parsed < minimum ||
      parsed > maximum) {
    return BadValue(name, *value, absl::StrFormat("a number in [%g, %g]", minimum, maximum));
  }
  field = parsed;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ParseCount(absl::string_view text) {
  std::string body(text);
  double multiplier = 1;
  if (!body.empty()) {
    switch (absl::ascii_tolower(static_cast<unsigned char>(body.back()))) {
      case 'k':
        multiplier = 1e3;
        break;
      case 'm':
        multiplier = 1e6;
        break;
      case 'b':
      case 'g':
        multiplier = 1e9;
        break;
      case 't':
        multiplier = 1e12;
        break;
      default:
        break;
    }
    if (multiplier != 1) body.pop_back();
  }
  double value = 0;
  if (!absl::SimpleAtod(body, &value) || !std::isfinite(value) || value * multiplier < 1 ||
      value * multiplier > 9e15) {
    return BadValue("params", text, "a positive count such as 7e9, 6.7B or 125M");
  }
  return static_cast<int64_t>(std::llround(value * multiplier));
}

absl::Status ForFlag(absl::string_view flag, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", status.message()));
}

std::string ShowFieldsAsFlags(absl::string_view message) {
  for (const char* name : kValued) {
    if (absl::StartsWith(message, absl::StrCat(name, " = "))) return absl::StrCat("--", message);
  }
  return std::string(message);
}

}  // namespace fragscope::cli::estimate
