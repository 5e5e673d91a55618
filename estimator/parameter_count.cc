#include "estimator/parameter_count.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "estimator/status_macros.h"

namespace fragscope::estimator {

absl::StatusOr<ParameterCount> CountParameters(const ModelSpec& spec) {
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(ValidateModelSpec(spec));
  ParameterCount count;
  if (!spec.has_architecture()) {
    count.total = spec.parameter_count;
    count.active = spec.parameter_count;
    return count;
  }
  count.architectural = true;
  const int64_t h = spec.hidden_size;
  const int64_t q = spec.query_width();
  const int64_t kv = spec.kv_width();
  const int64_t f = spec.ffn();
  const int64_t f_moe = spec.expert_ffn();
  const int64_t norm_params = spec.norm == NormKind::kLayerNorm ? 2 * h : h;
  const int64_t mlp_matrices = spec.gated_mlp ? 3 : 2;
  const bool bias = spec.linear_biases;

  count.attention_weights = h * q + 2 * h * kv + q * h;
  count.attention_column_biases = bias ? q + 2 * kv : 0;
  count.attention_row_biases = bias ? h : 0;
  const int64_t one_mlp_weights_dense = mlp_matrices * h * f;
  const int64_t one_expert =
      mlp_matrices * h * f_moe + (bias ? (spec.gated_mlp ? 2 * f_moe : f_moe) + h : 0);
  if (spec.is_moe()) {
    count.expert_parameters = spec.num_experts * one_expert;
    count.active_expert_parameters = spec.experts_top_k * one_expert;
    count.router = h * spec.num_experts;
  } else {
    count.mlp_weights = one_mlp_weights_dense;
    count.mlp_column_biases = bias ? (spec.gated_mlp ? 2 * f : f) : 0;
    count.mlp_row_biases = bias ? h : 0;
  }
  count.layer_norms = 2 * norm_params;
  const int64_t block_without_experts = count.attention_weights + count.attention_column_biases +
                                        count.attention_row_biases + count.mlp_weights +
                                        count.mlp_column_biases + count.mlp_row_biases +
                                        count.router + count.layer_norms;
  count.per_layer = block_without_experts + count.expert_parameters;

  const int64_t vh = spec.vocab_size * h;
  count.embedding = vh;
  count.position_embedding =
      spec.position_embedding == PositionKind::kLearned ? spec.max_positions * h : 0;
  count.embedding_norm = spec.embedding_norm ? norm_params : 0;
  count.final_norm = norm_params;
  count.output_layer = spec.tied_embeddings ? 0 : vh;
  const int64_t model_level = count.embedding + count.position_embedding + count.embedding_norm +
                              count.final_norm + count.output_layer;
  const int64_t layers = spec.num_layers;
  count.architectural_total = layers * count.per_layer + model_level;
  count.total = spec.parameter_count > 0 ? spec.parameter_count : count.architectural_total;
  const int64_t active_architectural =
      count.architectural_total -
      layers * (count.expert_parameters - count.active_expert_parameters);
  count.active = spec.parameter_count > 0
                     ? static_cast<int64_t>(static_cast<double>(active_architectural) *
                                            count.given_count_scale())
                     : active_architectural;

  const int64_t ffn_for_linear = spec.is_moe() ? f_moe : f;
  count.largest_module =
      std::max({vh, count.position_embedding, h * q + (bias ? q : 0), h * kv + (bias ? kv : 0),
                h * ffn_for_linear + (bias ? ffn_for_linear : 0)});

  const int64_t active_expert_weights = spec.experts_top_k * mlp_matrices * h * f_moe;
  count.matmul_weights_active = layers * (count.attention_weights + count.mlp_weights +
                                          active_expert_weights + count.router) +
                                vh;
  count.block_linear_weights =
      layers * (count.attention_weights + count.mlp_weights +
                spec.num_experts * mlp_matrices * h * f_moe + count.router);

  // Adafactor: a matrix n x m keeps n + m second-moment values; a vector keeps its size.
  const int64_t attention_factored = (h + q) + 2 * (h + kv) + (q + h);
  const int64_t mlp_factored = mlp_matrices * (h + f);
  const int64_t expert_factored =
      mlp_matrices * (h + f_moe) + (one_expert - mlp_matrices * h * f_moe);
  const int64_t vectors_per_layer = count.attention_column_biases + count.attention_row_biases +
                                    count.mlp_column_biases + count.mlp_row_biases +
                                    count.layer_norms;
  const int64_t layer_factored =
      attention_factored +
      (spec.is_moe() ? spec.num_experts * expert_factored + (h + spec.num_experts) : mlp_factored) +
      vectors_per_layer;
  count.factored_second_moment = layers * layer_factored + (spec.vocab_size + h) +
                                 (count.position_embedding > 0 ? spec.max_positions + h : 0) +
                                 count.embedding_norm + count.final_norm +
                                 (spec.tied_embeddings ? 0 : spec.vocab_size + h);
  return count;
}

std::vector<Term> ParameterCountTerms(const ModelSpec& spec, const ParameterCount& count) {
  std::vector<Term> terms;
  constexpr char kSource[] =
      "estimator/parameter_count.h (docs/estimator_reference.md §1.1 and §8.1)";
  if (count.architectural) {
    const int64_t h = spec.hidden_size;
    Term layer;
    layer.key = "parameters_per_layer";
    layer.label = "parameters per transformer layer";
    layer.value = static_cast<double>(count.per_layer);
    layer.unit = Unit::kCount;
    layer.formula =
        "attention h(a d_h) + 2h(g d_h) + (a d_h)h + biases; MLP m h f + biases (m = 3 gated, "
        "else 2); experts E (m h f_e + biases); router h E; norms 2 n h";
    layer.values = absl::StrFormat(
        "attention %d*%d + 2*%d*%d + %d*%d = %s; attention biases %s; MLP %s + biases %s; "
        "experts %s; router %s; norms %s; sum %s",
        h, spec.query_width(), h, spec.kv_width(), spec.query_width(), h,
        FormatCount(static_cast<double>(count.attention_weights)),
        FormatCount(
            static_cast<double>(count.attention_column_biases + count.attention_row_biases)),
        FormatCount(static_cast<double>(count.mlp_weights)),
        FormatCount(static_cast<double>(count.mlp_column_biases + count.mlp_row_biases)),
        FormatCount(static_cast<double>(count.expert_parameters)),
        FormatCount(static_cast<double>(count.router)),
        FormatCount(static_cast<double>(count.layer_norms)),
        FormatCount(static_cast<double>(count.per_layer)));
    layer.source = kSource;
    terms.push_back(layer);
  }
  Term total;
  total.key = "parameters_total";
  total.label = "parameters (whole model)";
  total.value = static_cast<double>(count.total);
  total.unit = Unit::kCount;
  total.source = kSource;
  if (count.architectural) {
    total.formula =
        "L * per_layer + V h (embedding) + positions + embedding norm + final norm + V h "
        "(output layer, untied only)";
    total.values = absl::StrFormat("%d * %s + %s + %s + %s + %s + %s = %s", spec.num_layers,
                                   FormatCount(static_cast<double>(count.per_layer)),
                                   FormatCount(static_cast<double>(count.embedding)),
                                   FormatCount(static_cast<double>(count.position_embedding)),
                                   FormatCount(static_cast<double>(count.embedding_norm)),
                                   FormatCount(static_cast<double>(count.final_norm)),
                                   FormatCount(static_cast<double>(count.output_layer)),
                                   FormatCount(static_cast<double>(count.architectural_total)));
    if (count.total != count.architectural_total) {
      total.formula = "given parameter_count (replaces the architectural count)";
      total.values = absl::StrCat(FormatCount(static_cast<double>(count.total)),
                                  " (architecture: ", total.values, ")");
    }
  } else {
    total.formula = "given parameter_count";
    total.values = FormatCount(static_cast<double>(count.total));
    total.source = "user-provided";
  }
  terms.push_back(total);
  return terms;
}

}  // namespace fragscope::estimator
