#include "estimator/activation_memory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "estimator/parallel_layout.h"
#include "estimator/status_macros.h"

namespace fragscope::estimator {
namespace {

constexpr char kKorthikanti[] =
    "Korthikanti et al. 2022 (arXiv:2205.05198) Eq. 1 / Table 2, generalized to GQA, head_dim, "
    "FFN size and gated MLP";

}  // namespace

LayerActivations ActivationsPerLayer(const ModelSpec& spec, const TrainingConfig& config) {
  LayerActivations layer;
  const double s = static_cast<double>(config.seq_len);
  const double b = static_cast<double>(config.micro_batch);
  const double h = static_cast<double>(spec.hidden_size);
  const double a = static_cast<double>(spec.num_heads);
  const double q = static_cast<double>(spec.query_width());
  const double k = static_cast<double>(spec.kv_width());
  // An MoE token passes through top-k experts, each with its own intermediates.
  const double f = spec.is_moe() ? static_cast<double>(spec.expert_ffn() * spec.experts_top_k)
                                 : static_cast<double>(spec.ffn());
  const double t = static_cast<double>(config.layout.tp);
  const double bytes = WeightBytes(config.precision);
  const double mask = config.dropout ? 1.0 : 0.0;
  const double c = spec.gated_mlp ? 3.0 : 2.0;
  const bool sp = config.layout.sequence_parallel;
  const double sp_div = sp ? t : 1.0;

  if (config.recompute == Recompute::kFull) {
    layer.full_recompute = bytes * s * b * h / sp_div;
    layer.formula = sp ? "B s b h / tp   (layer input only, sequence-parallel)"
                       : "B s b h   (layer input only)";
    layer.values =
        sp ? absl::StrFormat("%s * %s * %s * %s / %s", FormatNumber(bytes), FormatNumber(s),
                             FormatNumber(b), FormatNumber(h), FormatNumber(t))
           : absl::StrFormat("%s * %s * %s * %s", FormatNumber(bytes), FormatNumber(s),
                             FormatNumber(b), FormatNumber(h));
    return layer;
  }
  layer.replicated = s * b * h * (4.0 * bytes + 2.0 * mask) / sp_div;
  layer.split = s * b * bytes * (2.0 * q + 2.0 * k + c * f) / t;
  const bool keep_scores = config.recompute == Recompute::kNone && !config.flash_attention;
  if (keep_scores) layer.attention_scores = a * s * s * b * (2.0 * bytes + mask) / t;

  layer.formula = absl::StrCat(sp ? "s b h (4B + 2m) / tp" : "s b h (4B + 2m)",
                               " + s b B (2 a d_h + 2 g d_h + c f) / tp",
                               keep_scores ? " + a s^2 b (2B + m) / tp" : "");
  layer.values =
      absl::StrFormat("%s * %s * %s * (4*%s + 2*%s)%s + %s * %s * %s * (2*%s + 2*%s + %s*%s) / %s",
                      FormatNumber(s), FormatNumber(b), FormatNumber(h), FormatNumber(bytes),
                      FormatNumber(mask), sp ? absl::StrCat(" / ", FormatNumber(t)) : "",
                      FormatNumber(s), FormatNumber(b), FormatNumber(bytes), FormatNumber(q),
                      FormatNumber(k), FormatNumber(c), FormatNumber(f), FormatNumber(t));
  if (keep_scores) {
    absl::StrAppend(
        &layer.values,
        absl::StrFormat(" + %s * %s^2 * %s * (2*%s + %s) / %s", FormatNumber(a), FormatNumber(s),
                        FormatNumber(b), FormatNumber(bytes), FormatNumber(mask), FormatNumber(t)));
  }
  return layer;
}

double MicroBatchesInFlight(const ParallelLayout& layout) {
  const double p = static_cast<double>(layout.pp);
  if (layout.pp == 1) return 1.0;
  if (layout.vpp > 1) {
    return p * (1.0 + (p - 1.0) / (p * static_cast<double>(layout.vpp)));
  }
  const int64_t m = layout.num_microbatches == 0 ? layout.pp : layout.num_microbatches;
  return static_cast<double>(std::min(layout.pp, m));
}

absl::StatusOr<std::vector<Term>> ActivationTerms(const ModelSpec& spec,
                                                  const TrainingConfig& config) {
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
      RequireArchitecture(spec, "activations (or pass --no-activations)"));
  std::vector<Term> terms;
  const LayerActivations layer = ActivationsPerLayer(spec, config);
  const double layers = static_cast<double>(LayersOnFirstStage(spec, config.layout));
  const double in_flight = MicroBatchesInFlight(config.layout);
  const double s = static_cast<double>(config.seq_len);
  const double b = static_cast<double>(config.micro_batch);
  const double h = static_cast<double>(spec.hidden_size);
  const double t = static_cast<double>(config.layout.tp);
  const bool sp = config.layout.sequence_parallel;

  Term stored;
  stored.key = "activations";
  stored.label =
      absl::StrCat("activations (", layers, " layers x ", FormatNumber(in_flight),
                   in_flight == 1 ? " micro-batch in flight)" : " micro-batches in flight)");
  stored.value = layer.stored() * layers * in_flight;
  stored.formula = absl::StrCat("per_layer * L_s * n_f;  per_layer = ", layer.formula);
  stored.values = absl::StrFormat("%s * %s * %s;  per_layer = %s = %s", FormatCount(layer.stored()),
                                  FormatNumber(layers), FormatNumber(in_flight), layer.values,
                                  FormatCount(layer.stored()));
  stored.source = kKorthikanti;
  if (config.layout.pp > 1) {
    absl::StrAppend(&stored.source,
                    "; pipeline n_f per Megatron theoretical_memory_usage.py (1F1B, interleaving)");
  }
  terms.push_back(stored);

  Term embedding;
  embedding.key = "activations_embedding";
  embedding.label = "activations (token ids + embedding dropout mask, stage 0)";
  const double mask = config.dropout ? 1.0 : 0.0;
  embedding.value = (8.0 * s * b + mask * s * b * h / (sp ? t : 1.0)) * in_flight;
  embedding.formula = sp ? "(8 s b + m s b h / tp) * n_f" : "(8 s b + m s b h) * n_f";
  embedding.values =
      absl::StrFormat("(8 * %s * %s + %s * %s * %s * %s%s) * %s", FormatNumber(s), FormatNumber(b),
                      FormatNumber(mask), FormatNumber(s), FormatNumber(b), FormatNumber(h),
                      sp ? absl::StrCat(" / ", FormatNumber(t)) : "", FormatNumber(in_flight));
  embedding.source =
      "Korthikanti et al. 2022 sec. 4.3 (embedding dropout mask); token ids: Megatron "
      "theoretical_memory_usage.py (8 bytes per token)";
  terms.push_back(embedding);

  if (config.layout.pp == 1) {
    const double v = static_cast<double>(spec.vocab_size);
    Term output;
    output.key = "activations_output";
    output.label = "activations (output layer + loss)";
    output.value = 4.0 * s * b * h * (1.0 + v / h) / t;
    output.formula = "4 s b h (1 + V/h) / tp";
    output.values =
        absl::StrFormat("4 * %s * %s * %s * (1 + %s/%s) / %s", FormatNumber(s), FormatNumber(b),
                        FormatNumber(h), FormatNumber(v), FormatNumber(h), FormatNumber(t));
    output.source = "Korthikanti et al. 2022 sec. 4.3 (output layer and cross-entropy loss)";
    terms.push_back(output);
  }

  if (config.recompute != Recompute::kNone) {
    TrainingConfig no_recompute = config;
    no_recompute.recompute = Recompute::kNone;
    const LayerActivations full = ActivationsPerLayer(spec, no_recompute);
    Term working;
    working.key = "recompute_working_set";
    working.source =
        "fragscope: tensors recomputed for one layer are live during its backward "
        "(not in Korthikanti's totals)";
    if (config.recompute == Recompute::kFull) {
      working.label = "recompute working set (one layer, full)";
      working.value = full.stored();
      working.formula = absl::StrCat("one layer without recompute: ", full.formula);
      working.values = absl::StrCat(full.values, " = ", FormatCount(full.stored()));
    } else {
      working.label = "recompute working set (one layer's attention core)";
      working.value = full.attention_scores;
      working.formula = "a s^2 b (2B + m) / tp  (0 with flash attention)";
      working.values = FormatCount(full.attention_scores);
    }
    terms.push_back(working);
  }
  return terms;
}

}  // namespace fragscope::estimator
