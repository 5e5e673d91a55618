#include "estimator/lora_activations.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include "estimator/lora.h"

namespace fragscope::estimator {
namespace {

constexpr char kSource[] =
    "fragscope: peft's LoRA layers on a frozen 16-bit base under torch.autocast, read from "
    "fragscope's predictor (estimator/lora_activations.h)";

// QLoRA: the adapters save the inputs they share with the 4-bit base instead of copies: one
// per distinct input (q, k, v read the first norm's output; gate and up the second's; down the
// product), o's being the attention output already saved; and lora_B's input, r each.
double QloraAdapterWidths(const ModelSpec& spec, const LoraConfig& lora) {
  const double h = static_cast<double>(spec.hidden_size);
  const double f = static_cast<double>(spec.ffn());
  const double r = static_cast<double>(lora.rank);
  double widths = 0;
  if ((lora.targets & (kLoraQ | kLoraK | kLoraV)) != 0) widths += h;
  if ((lora.targets & (kLoraGate | kLoraUp)) != 0) widths += h;
  if ((lora.targets & kLoraDown) != 0) widths += f;
  for (uint32_t target : {kLoraQ, kLoraK, kLoraV, kLoraO, kLoraGate, kLoraUp, kLoraDown}) {
    if ((lora.targets & target) != 0) widths += r;
  }
  return widths;
}

// Sum of d_in + r over the adapted matrices of one layer, each with its input width.
double AdapterWidths(const ModelSpec& spec, const LoraConfig& lora) {
  if (lora.qlora) return QloraAdapterWidths(spec, lora);
  const double h = static_cast<double>(spec.hidden_size);
  const double q = static_cast<double>(spec.query_width());
  const double f = static_cast<double>(spec.ffn());
  const double r = static_cast<double>(lora.rank);
  const std::pair<uint32_t, double> inputs[] = {{kLoraQ, h},   {kLoraK, h},    {kLoraV, h},
                                                {kLoraO, q},   {kLoraGate, h}, {kLoraUp, h},
                                                {kLoraDown, f}};
  double widths = 0;
  for (const auto& [target, d_in] : inputs) {
    if ((lora.targets & target) != 0) widths += d_in + r;
  }
  return widths;
}

Term Make(const char* key, std::string label, double value, std::string formula,
          std::string values) {
  Term term;
  term.key = key;
  term.label = std::move(label);
  term.value = value;
  term.formula = std::move(formula);
  term.values = std::move(values);
  term.source = kSource;
  return term;
}

}  // namespace

bool LoraActivationsApply(const ModelSpec& spec, const TrainingConfig& config) {
  return config.lora.enabled() && spec.has_architecture() && config.precision != Precision::kFp32 &&
         config.recompute == Recompute::kNone && spec.norm == NormKind::kRmsNorm &&
         spec.gated_mlp && !spec.fused_gate_up && !spec.fused_qkv && !spec.is_moe() &&
         !spec.is_mla() && spec.qk_norm == QkNorm::kNone && spec.norms_per_layer == 2 &&
         !spec.logit_softcapping && config.layout.tp == 1 && config.layout.pp == 1;
}

absl::StatusOr<std::vector<Term>> LoraActivationTerms(const ModelSpec& spec,
                                                      const TrainingConfig& config) {
  const double s = static_cast<double>(config.seq_len);
  const double b = static_cast<double>(config.micro_batch);
  const double h = static_cast<double>(spec.hidden_size);
  const double v = static_cast<double>(spec.vocab_size);
  const double a = static_cast<double>(spec.num_heads);
  const double q = static_cast<double>(spec.query_width());
  const double k = static_cast<double>(spec.kv_width());
  const double f = static_cast<double>(spec.ffn());
  const double layers = static_cast<double>(spec.num_layers);
  const double e = WeightBytes(config.precision);
  const double m = config.dropout ? 1.0 : 0.0;
  const double widths = AdapterWidths(spec, config.lora);

  const std::pair<const char*, double> parts[] = {
      {"norms", 2.0 * 4.0 * s * b * h},
      {"attention", e * s * b * (2.0 * q + 2.0 * k)},
      {"scores", config.flash_attention ? 0.0 : a * s * s * b * (4.0 + e + m)},
      {"mlp", 3.0 * e * s * b * f},
      {"adapters", e * s * b * widths},
      {"dropout", 2.0 * m * s * b * h}};
  std::vector<std::string> names;
  std::vector<std::string> values;
  double per_layer = 0;
  for (const auto& [name, bytes] : parts) {
    if (bytes == 0) continue;
    names.push_back(name);
    values.push_back(FormatCount(bytes));
    per_layer += bytes;
  }
  std::vector<Term> terms;
  terms.push_back(Make(
      "activations",
      absl::StrCat("activations (", FormatNumber(layers), " layers, ",
                   config.lora.qlora ? "QLoRA" : "LoRA", " r=", config.lora.rank, " on ",
                   LoraTargetsName(config.lora.targets), ", torch.autocast)"),
      per_layer * layers,
      absl::StrCat(
          "per_layer * L;  per_layer = ", absl::StrJoin(names, " + "),
          config.lora.qlora
              ? ";  adapters = E s b (distinct inputs + sum r) (estimator/lora_activations.h)"
              : ";  adapters = E s b sum(d_in + r) (estimator/lora_activations.h)"),
      absl::StrCat(FormatCount(per_layer), " * ", FormatNumber(layers), ";  per_layer = ",
                   absl::StrJoin(values, " + "), ";  sum(d_in + r) = ", FormatNumber(widths))));
  terms.push_back(
      Make("activations_embedding", "activations (token ids + embedding dropout mask)",
           8.0 * s * b + m * s * b * h, "8 s b + m s b h",
           absl::StrFormat("8 * %s * %s + %s * %s * %s * %s", FormatNumber(s), FormatNumber(b),
                           FormatNumber(m), FormatNumber(s), FormatNumber(b), FormatNumber(h))));
  terms.push_back(
      Make("activations_output", "activations (loss: fp32 log-softmax; the final norm's fp32 copy)",
           4.0 * s * b * v + 4.0 * s * b * h, "4 s b V + 4 s b h",
           absl::StrFormat("4 * %s * %s * %s + 4 * %s * %s * %s", FormatNumber(s), FormatNumber(b),
                           FormatNumber(v), FormatNumber(s), FormatNumber(b), FormatNumber(h))));
  Term backward =
      Make("loss_backward", "loss backward (two fp32 logits gradients at once)", 8.0 * s * b * v,
           "8 s b V",
           absl::StrFormat("8 * %s * %s * %s", FormatNumber(s), FormatNumber(b), FormatNumber(v)));
  absl::StrAppend(&backward.source, "; the step's peak is at the start of the backward");
  terms.push_back(std::move(backward));
  return terms;
}

}  // namespace fragscope::estimator
