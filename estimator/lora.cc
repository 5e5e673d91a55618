#include "estimator/lora.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace fragscope::estimator {
namespace {

struct TargetName {
  const char* name;
  LoraTarget bit;
};

constexpr TargetName kTargetNames[] = {{"q", kLoraQ},      {"k", kLoraK},       {"v", kLoraV},
                                       {"o", kLoraO},      {"gate", kLoraGate}, {"up", kLoraUp},
                                       {"down", kLoraDown}};

}  // namespace

absl::StatusOr<uint32_t> ParseLoraTargets(absl::string_view csv) {
  uint32_t targets = 0;
  for (absl::string_view part : absl::StrSplit(csv, ',', absl::SkipWhitespace())) {
    std::string name = absl::AsciiStrToLower(absl::StripAsciiWhitespace(part));
    if (name == "all") {
      targets |= kLoraAll;
      continue;
    }
    absl::string_view short_name = name;
    absl::ConsumeSuffix(&short_name, "_proj");
    bool found = false;
    for (const TargetName& target : kTargetNames) {
      if (short_name == target.name) {
        targets |= target.bit;
        found = true;
      }
    }
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat(
          "lora target '", part, "' is unknown (expected q, k, v, o, gate, up, down or all)"));
    }
  }
  if (targets == 0) return absl::InvalidArgumentError("lora targets: none given");
  return targets;
}

std::string LoraTargetsName(uint32_t targets) {
  std::vector<std::string> names;
  for (const TargetName& target : kTargetNames) {
    if (targets & target.bit) names.push_back(target.name);
  }
  return absl::StrJoin(names, ",");
}

absl::StatusOr<int64_t> LoraParametersPerLayer(const ModelSpec& spec, const LoraConfig& lora) {
  if (lora.rank <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("lora rank = ", lora.rank, " must be positive"));
  }
  if (lora.targets == 0) return absl::InvalidArgumentError("lora targets: none given");
  if ((lora.targets & kLoraGate) && !spec.gated_mlp && lora.targets != kLoraAll) {
    return absl::InvalidArgumentError(
        absl::StrCat("lora target 'gate' needs a gated MLP, and ", spec.name, " has none"));
  }
  const int64_t r = lora.rank;
  const int64_t h = spec.hidden_size;
  const int64_t q = spec.query_width();
  const int64_t kv = spec.kv_width();
  const int64_t f = spec.is_moe() ? spec.expert_ffn() : spec.ffn();
  const int64_t experts = spec.is_moe() ? spec.num_experts : 1;
  // Every adapter of every layer, bounded in floating point first, so that the integer counts
  // here and in LoraFactoredSecondMomentPerLayer cannot overflow.
  auto d = [](int64_t n) { return static_cast<double>(n); };
  const double all_adapters =
      d(spec.num_layers) * d(r) *
      (2 * (d(h) + d(q)) + 2 * (d(h) + d(kv)) + 3 * (d(h) + d(f)) * d(experts));
  if (all_adapters > kMaxParameters) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "lora rank = %d gives %s about %.3g adapter parameters, beyond the limit of 9e15", r,
        spec.name, all_adapters));
  }
  int64_t per_layer = 0;
  if (lora.targets & kLoraQ) per_layer += r * (h + q);
  if (lora.targets & kLoraK) per_layer += r * (h + kv);
  if (lora.targets & kLoraV) per_layer += r * (h + kv);
  if (lora.targets & kLoraO) per_layer += r * (q + h);
  int64_t mlp = 0;
  if ((lora.targets & kLoraGate) && spec.gated_mlp) mlp += r * (h + f);
  if (lora.targets & kLoraUp) mlp += r * (h + f);
  if (lora.targets & kLoraDown) mlp += r * (f + h);
  return per_layer + experts * mlp;
}

int64_t LoraFactoredSecondMomentPerLayer(const ModelSpec& spec, const LoraConfig& lora) {
  const int64_t r = lora.rank;
  const int64_t h = spec.hidden_size;
  const int64_t q = spec.query_width();
  const int64_t kv = spec.kv_width();
  const int64_t f = spec.is_moe() ? spec.expert_ffn() : spec.ffn();
  const int64_t experts = spec.is_moe() ? spec.num_experts : 1;
  // An adapted d_in -> d_out matrix: (r + d_in) + (d_out + r).
  auto adapter = [r](int64_t d_in, int64_t d_out) { return 2 * r + d_in + d_out; };
  int64_t per_layer = 0;
  if (lora.targets & kLoraQ) per_layer += adapter(h, q);
  if (lora.targets & kLoraK) per_layer += adapter(h, kv);
  if (lora.targets & kLoraV) per_layer += adapter(h, kv);
  if (lora.targets & kLoraO) per_layer += adapter(q, h);
  int64_t mlp = 0;
  if ((lora.targets & kLoraGate) && spec.gated_mlp) mlp += adapter(h, f);
  if (lora.targets & kLoraUp) mlp += adapter(h, f);
  if (lora.targets & kLoraDown) mlp += adapter(f, h);
  return per_layer + experts * mlp;
}

double Nf4BytesPerWeight(bool double_quant) {
  const double constant_bits = double_quant ? 8.0 / 64.0 + 32.0 / (64.0 * 256.0) : 32.0 / 64.0;
  return (4.0 + constant_bits) / 8.0;
}

}  // namespace fragscope::estimator
