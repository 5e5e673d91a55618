#include "estimator/autocast_activations.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "estimator/status_macros.h"

namespace fragscope::estimator {
namespace {

constexpr char kSource[] =
    "fragscope: transformers' eager modules under torch.autocast, saved tensors measured on an "
    "H100 (estimator/autocast_activations.h; scripts/gpu/activation_probe.py)";

// The parts of one layer, in bytes.
struct AutocastLayer {
  double norms = 0;
  double casts = 0;
  double attention = 0;
  double scores = 0;
  double mlp = 0;
  double dropout = 0;

  double total() const { return norms + casts + attention + scores + mlp + dropout; }
};

// N: bytes per element of s b h that one norm saves.
double NormBytes(const ModelSpec& spec) { return spec.norm == NormKind::kLayerNorm ? 4.0 : 8.0; }

AutocastLayer Layer(const ModelSpec& spec, const TrainingConfig& config) {
  const double s = static_cast<double>(config.seq_len);
  const double b = static_cast<double>(config.micro_batch);
  const double h = static_cast<double>(spec.hidden_size);
  const double a = static_cast<double>(spec.num_heads);
  const double q = static_cast<double>(spec.query_width());
  const double k = static_cast<double>(spec.kv_width());
  const double f = static_cast<double>(spec.ffn());
  const double e = WeightBytes(config.precision);
  const double m = config.dropout ? 1.0 : 0.0;
  AutocastLayer layer;
  layer.norms = 2.0 * NormBytes(spec) * s * b * h;
  layer.casts = e * s * b * h * ((spec.fused_qkv ? 1.0 : 3.0) + (spec.gated_mlp ? 2.0 : 1.0));
  layer.attention = e * s * b * (spec.fused_qkv ? 2.0 * q + 4.0 * k : 2.0 * q + 2.0 * k);
  if (!config.flash_attention) layer.scores = a * s * s * b * (4.0 + e + m);
  if (spec.gated_mlp) {
    layer.mlp = 4.0 * e * s * b * f;
  } else if (spec.python_gelu) {
    layer.mlp = s * b * f * (2.0 * e + 12.0);
  } else {
    layer.mlp = 2.0 * e * s * b * f;
  }
  layer.dropout = 2.0 * m * s * b * h;
  return layer;
}

absl::Status Unsupported(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("activation-model torch-autocast describes one GPU's eager PyTorch job: ", what,
                   " is not modelled (use activation-model korthikanti)"));
}

absl::Status CheckSupported(const ModelSpec& spec, const TrainingConfig& config) {
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
      RequireArchitecture(spec, "activations (or pass --no-activations)"));
  const ParallelLayout& l = config.layout;
  if (config.precision == Precision::kFp32) return Unsupported("precision fp32 (no autocast)");
  if (l.tp > 1) return Unsupported(absl::StrCat("tp = ", l.tp));
  if (l.pp > 1) return Unsupported(absl::StrCat("pp = ", l.pp));
  if (l.sequence_parallel) return Unsupported("sequence parallelism");
  if (config.recompute == Recompute::kSelective) {
    return absl::InvalidArgumentError(
        "activation-model torch-autocast with recompute selective: selective recompute is "
        "Megatron's (the attention core only); transformers checkpoints whole layers (recompute "
        "full), and that is not modelled either (use activation-model korthikanti)");
  }
  if (config.recompute == Recompute::kFull) {
    // What a checkpointed step keeps was never measured, and its peak moves: not one formula.
    return absl::InvalidArgumentError(
        "activation-model torch-autocast with recompute full is not modelled: its tensors were "
        "measured in steps without activation checkpointing, and under checkpointing the peak "
        "moves (every layer's saved input, one layer's recomputed tensors, and the gradients "
        "that the backward now accumulates while it frees less), which no measurement has "
        "placed; use activation-model korthikanti, whose recompute terms are Korthikanti's");
  }
  if (spec.is_moe()) return Unsupported("a mixture-of-experts model");
  return absl::OkStatus();
}

}  // namespace

double AutocastBytesPerLayer(const ModelSpec& spec, const TrainingConfig& config) {
  return Layer(spec, config).total();
}

absl::StatusOr<std::vector<Term>> AutocastActivationTerms(const ModelSpec& spec,
                                                          const TrainingConfig& config) {
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(CheckSupported(spec, config));
  const double s = static_cast<double>(config.seq_len);
  const double b = static_cast<double>(config.micro_batch);
  const double h = static_cast<double>(spec.hidden_size);
  const double v = static_cast<double>(spec.vocab_size);
  const double e = WeightBytes(config.precision);
  const double m = config.dropout ? 1.0 : 0.0;
  const double layers = static_cast<double>(spec.num_layers);
  const AutocastLayer layer = Layer(spec, config);
  std::vector<Term> terms;

  Term stored;
  stored.key = "activations";
  stored.label = absl::StrCat("activations (", spec.num_layers, " layers, torch.autocast)");
  stored.value = layer.total() * layers;
  stored.formula = absl::StrCat("per_layer * L;  per_layer = norms + casts + attention",
                                layer.scores > 0 ? " + scores" : "",
                                " + mlp + dropout (estimator/autocast_activations.h)");
  stored.values = absl::StrFormat(
      "%s * %s;  per_layer = %s + %s + %s%s + %s + %s = %s", FormatCount(layer.total()),
      FormatNumber(layers), FormatCount(layer.norms), FormatCount(layer.casts),
      FormatCount(layer.attention),
      layer.scores > 0 ? absl::StrCat(" + ", FormatCount(layer.scores)) : "",
      FormatCount(layer.mlp), FormatCount(layer.dropout), FormatCount(layer.total()));
  stored.source = kSource;
  terms.push_back(stored);

  Term embedding;
  embedding.key = "activations_embedding";
  embedding.label = "activations (token ids + embedding dropout mask)";
  embedding.value = 8.0 * s * b + m * s * b * h;
  embedding.formula = "8 s b + m s b h";
  embedding.values =
      absl::StrFormat("8 * %s * %s + %s * %s * %s * %s", FormatNumber(s), FormatNumber(b),
                      FormatNumber(m), FormatNumber(s), FormatNumber(b), FormatNumber(h));
  embedding.source = kSource;
  terms.push_back(embedding);

  const double norm = NormBytes(spec);
  Term output;
  output.key = "activations_output";
  output.label = "activations (output layer + loss: fp32 log-softmax)";
  output.value = 4.0 * s * b * v + (norm + e) * s * b * h;
  output.formula = "4 s b V + (N + E) s b h";
  output.values =
      absl::StrFormat("4 * %s * %s * %s + (%s + %s) * %s * %s * %s", FormatNumber(s),
                      FormatNumber(b), FormatNumber(v), FormatNumber(norm), FormatNumber(e),
                      FormatNumber(s), FormatNumber(b), FormatNumber(h));
  output.source = kSource;
  terms.push_back(output);

  Term backward;
  backward.key = "loss_backward";
  backward.label = "loss backward (two fp32 logits gradients at once)";
  backward.value = 8.0 * s * b * v;
  backward.formula = "8 s b V";
  backward.values =
      absl::StrFormat("8 * %s * %s * %s", FormatNumber(s), FormatNumber(b), FormatNumber(v));
  backward.source = absl::StrCat(kSource, "; the step's peak is at the start of the backward");
  terms.push_back(backward);
  return terms;
}

}  // namespace fragscope::estimator
