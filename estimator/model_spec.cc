#include "estimator/model_spec.h"

#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fragscope::estimator {
namespace {

absl::Status FieldError(absl::string_view field, int64_t value, absl::string_view requirement) {
  return absl::InvalidArgumentError(absl::StrCat(field, " = ", value, " ", requirement));
}

absl::Status RequireNonNegative(absl::string_view field, int64_t value) {
  if (value < 0) return FieldError(field, value, "must not be negative");
  return absl::OkStatus();
}

absl::Status RequirePositive(absl::string_view field, int64_t value) {
  if (value <= 0) return FieldError(field, value, "must be positive");
  return absl::OkStatus();
}

}  // namespace

absl::Status RequireSequenceOrBatch(absl::string_view field, int64_t value, int64_t least) {
  if (value >= least && value <= kMaxSequenceOrBatch) return absl::OkStatus();
  return FieldError(field, value,
                    absl::StrCat("must be in [", least, ", ", kMaxSequenceOrBatch, "]"));
}

namespace {

// An upper bound, in floating point, on every count CountParameters forms from the spec's
// fields (each of its integer products is a summand of this sum or of a part of it).
double ParameterUpperBound(const ModelSpec& s) {
  const double h = static_cast<double>(s.hidden_size);
  const double a = static_cast<double>(s.num_heads);
  const double d = s.head_dim > 0 ? static_cast<double>(s.head_dim) : h / a;
  const double d_v = s.v_head_dim > 0 ? static_cast<double>(s.v_head_dim) : d;
  const double q = a * d;
  const double kv = static_cast<double>(s.kv_heads()) * (d + d_v);
  const double r = static_cast<double>(s.q_lora_rank) + static_cast<double>(s.kv_lora_rank) +
                   static_cast<double>(s.qk_rope_head_dim);
  const double attention =
      h * (2 * q + kv + a * d_v) + r * (h + q + a * (d + d_v)) + 3 * (q + kv + r + h);
  const double f = s.ffn_size > 0 ? static_cast<double>(s.ffn_size) : 4 * h;
  const double experts = static_cast<double>(s.num_experts);
  const double f_expert = s.moe_ffn_size > 0 ? static_cast<double>(s.moe_ffn_size) : f;
  const double f_all = f + experts * f_expert + static_cast<double>(s.shared_expert_ffn_size);
  const double per_layer = attention + 3 * h * f_all + 3 * f_all +
                           h * (experts + 4 + 2 * static_cast<double>(s.norms_per_layer));
  return static_cast<double>(s.num_layers) * per_layer +
         (3 * static_cast<double>(s.vocab_size) + static_cast<double>(s.max_positions) + 8) * h;
}

// The structure fields that only make sense together (MLA, MoE layers, norms).
absl::Status ValidateStructure(const ModelSpec& spec) {
  if (spec.norms_per_layer > 8) {
    return FieldError("norms_per_layer", spec.norms_per_layer, "must be at most 8");
  }
  if (spec.is_mla()) {
    if (spec.head_dim <= 0) {
      return absl::InvalidArgumentError(
          "head_dim: multi-head latent attention (kv_lora_rank > 0) needs the query/key head "
          "width given (qk_nope_head_dim + qk_rope_head_dim)");
    }
    if (spec.qk_rope_head_dim > spec.head_dim) {
      return FieldError("qk_rope_head_dim", spec.qk_rope_head_dim,
                        absl::StrCat("must be at most head_dim = ", spec.head_dim));
    }
    if (spec.qk_norm != QkNorm::kNone) {
      return absl::InvalidArgumentError(
          "qk_norm: q/k norms on multi-head latent attention are not modelled");
    }
  } else if (spec.q_lora_rank > 0 || spec.qk_rope_head_dim > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.q_lora_rank > 0 ? "q_lora_rank" : "qk_rope_head_dim",
                     " needs multi-head latent attention (kv_lora_rank > 0)"));
  }
  if (!spec.is_moe()) {
    const std::pair<absl::string_view, int64_t> moe_only[] = {
        {"dense_layers", spec.dense_layers},
        {"shared_expert_ffn_size", spec.shared_expert_ffn_size}};
    for (const auto& [field, value] : moe_only) {
      if (value != 0) return FieldError(field, value, "needs num_experts > 0");
    }
  }
  if (spec.dense_layers > spec.num_layers) {
    return FieldError("dense_layers", spec.dense_layers,
                      absl::StrCat("exceeds num_layers = ", spec.num_layers));
  }
  if (spec.shared_expert_gate && spec.shared_expert_ffn_size <= 0) {
    return absl::InvalidArgumentError(
        "shared_expert_gate: needs a shared expert (shared_expert_ffn_size > 0)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateModelSpec(const ModelSpec& spec) {
  const std::pair<absl::string_view, int64_t> non_negative[] = {
      {"num_layers", spec.num_layers},
      {"hidden_size", spec.hidden_size},
      {"num_heads", spec.num_heads},
      {"num_kv_heads", spec.num_kv_heads},
      {"head_dim", spec.head_dim},
      {"ffn_size", spec.ffn_size},
      {"vocab_size", spec.vocab_size},
      {"max_positions", spec.max_positions},
      {"num_experts", spec.num_experts},
      {"experts_top_k", spec.experts_top_k},
      {"moe_ffn_size", spec.moe_ffn_size},
      {"parameter_count", spec.parameter_count},
      {"v_head_dim", spec.v_head_dim},
      {"q_lora_rank", spec.q_lora_rank},
      {"kv_lora_rank", spec.kv_lora_rank},
      {"qk_rope_head_dim", spec.qk_rope_head_dim},
      {"dense_layers", spec.dense_layers},
      {"shared_expert_ffn_size", spec.shared_expert_ffn_size},
      {"norms_per_layer", spec.norms_per_layer}};
  for (const auto& [field, value] : non_negative) {
    if (absl::Status status = RequireNonNegative(field, value); !status.ok()) return status;
  }
  if (static_cast<double>(spec.parameter_count) > kMaxParameters) {
    return FieldError("parameter_count", spec.parameter_count, "exceeds the limit of 9e15");
  }
  if (!spec.has_architecture()) {
    if (spec.parameter_count <= 0) {
      return absl::InvalidArgumentError(
          "model spec has neither an architecture (num_layers = 0) nor a parameter_count");
    }
    return absl::OkStatus();
  }
  const std::pair<absl::string_view, int64_t> positive[] = {{"hidden_size", spec.hidden_size},
                                                            {"num_heads", spec.num_heads},
                                                            {"vocab_size", spec.vocab_size}};
  for (const auto& [field, value] : positive) {
    if (absl::Status status = RequirePositive(field, value); !status.ok()) return status;
  }
  if (spec.head_dim == 0 && spec.hidden_size % spec.num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_heads = ", spec.num_heads, " does not divide hidden_size = ", spec.hidden_size,
        " (give head_dim explicitly if the model's is not h / a)"));
  }
  if (spec.kv_heads() > spec.num_heads || spec.num_heads % spec.kv_heads() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_kv_heads = ", spec.kv_heads(),
                                                   " must divide num_heads = ", spec.num_heads,
                                                   " (each query group has the same size)"));
  }
  if (absl::Status status = ValidateStructure(spec); !status.ok()) return status;
  // Integer counts (CountParameters) must not overflow: a spec this large is a typo, not a model.
  if (const double bound = ParameterUpperBound(spec); bound > kMaxParameters) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the architecture (num_layers = %d, hidden_size = %d, num_heads = %d, head_dim = %d, "
        "ffn_size = %d, vocab_size = %d, num_experts = %d) describes about %.3g parameters, "
        "beyond the limit of 9e15",
        spec.num_layers, spec.hidden_size, spec.num_heads, spec.head_dimension(), spec.ffn_size,
        spec.vocab_size, spec.num_experts, bound));
  }
  if (spec.position_embedding == PositionKind::kLearned && spec.max_positions <= 0) {
    return FieldError("max_positions", spec.max_positions,
                      "must be positive for a learned position embedding");
  }
  if (spec.is_moe()) {
    if (spec.experts_top_k <= 0 || spec.experts_top_k > spec.num_experts) {
      return absl::InvalidArgumentError(
          absl::StrCat("experts_top_k = ", spec.experts_top_k,
                       " must be in [1, num_experts = ", spec.num_experts, "]"));
    }
  } else if (spec.experts_top_k != 0) {
    return FieldError("experts_top_k", spec.experts_top_k, "needs num_experts > 0");
  }
  return absl::OkStatus();
}

absl::Status RequireArchitecture(const ModelSpec& spec, absl::string_view purpose) {
  if (spec.has_architecture()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      purpose, " need the architecture (num_layers, hidden_size, num_heads, ...), but the model '",
      spec.name, "' is a bare parameter_count; use a preset or a JSON spec"));
}

std::optional<std::string> PastPositionsNote(const ModelSpec& spec, absl::string_view what,
                                             int64_t tokens) {
  if (spec.max_positions <= 0 || tokens <= spec.max_positions) return std::nullopt;
  return absl::StrCat(what, " ", tokens, " is past the model's ", spec.max_positions,
                      " learned positions: it cannot run at that length");
}

absl::string_view NormKindName(NormKind kind) {
  return kind == NormKind::kRmsNorm ? "rmsnorm" : "layernorm";
}

absl::string_view PositionKindName(PositionKind kind) {
  switch (kind) {
    case PositionKind::kRotary:
      return "rotary";
    case PositionKind::kLearned:
      return "learned";
    case PositionKind::kAlibi:
      return "alibi";
  }
  return "?";
}

absl::string_view QkNormName(QkNorm kind) {
  switch (kind) {
    case QkNorm::kNone:
      return "none";
    case QkNorm::kPerHead:
      return "per_head";
    case QkNorm::kFullWidth:
      return "full_width";
  }
  return "?";
}

absl::StatusOr<QkNorm> ParseQkNorm(absl::string_view text, absl::string_view field) {
  const std::string name = absl::AsciiStrToLower(text);
  if (name == "none") return QkNorm::kNone;
  if (name == "per_head") return QkNorm::kPerHead;
  if (name == "full_width") return QkNorm::kFullWidth;
  return absl::InvalidArgumentError(absl::StrCat(field, ": unknown q/k norm '", text,
                                                 "' (expected none, per_head or full_width)"));
}

absl::StatusOr<NormKind> ParseNormKind(absl::string_view text, absl::string_view field) {
  const std::string name = absl::AsciiStrToLower(text);
  if (name == "layernorm" || name == "layer_norm") return NormKind::kLayerNorm;
  if (name == "rmsnorm" || name == "rms_norm") return NormKind::kRmsNorm;
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": unknown norm '", text, "' (expected layernorm or rmsnorm)"));
}

absl::StatusOr<PositionKind> ParsePositionKind(absl::string_view text, absl::string_view field) {
  const std::string name = absl::AsciiStrToLower(text);
  if (name == "rotary" || name == "rope" || name == "none") return PositionKind::kRotary;
  if (name == "learned" || name == "absolute") return PositionKind::kLearned;
  if (name == "alibi") return PositionKind::kAlibi;
  return absl::InvalidArgumentError(absl::StrCat(field, ": unknown position embedding '", text,
                                                 "' (expected rotary, learned or alibi)"));
}

}  // namespace fragscope::estimator
