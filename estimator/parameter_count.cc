#include "estimator/parameter_count.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "estimator/status_macros.h"

namespace fragscope::estimator {

namespace {

// The attention of one layer: weights, biases and norms, and the largest and the factored size
// of its matrices (for ZeRO-3's largest module and Adafactor).
struct AttentionParts {
  int64_t weights = 0;
  int64_t column_biases = 0;
  int64_t row_biases = 0;
  int64_t norms = 0;
  int64_t largest_matrix = 0;  // with its bias
  int64_t factored = 0;        // sum over matrices of rows + cols
};

AttentionParts Attention(const ModelSpec& spec) {
  AttentionParts parts;
  const int64_t h = spec.hidden_size;
  const int64_t a = spec.num_heads;
  const int64_t q = spec.query_width();
  const int64_t o_in = a * spec.value_head_dim();
  // One matrix rows x cols, with `bias` entries of bias (column-parallel).
  auto matrix = [&](int64_t rows, int64_t cols, int64_t bias) {
    parts.weights += rows * cols;
    parts.column_biases += bias;
    parts.largest_matrix = std::max(parts.largest_matrix, rows * cols + bias);
    parts.factored += rows + cols;
  };
  if (spec.is_mla()) {
    const int64_t r_kv = spec.kv_lora_rank;
    const int64_t rope = spec.qk_rope_head_dim;
    if (spec.q_lora_rank > 0) {
      matrix(h, spec.q_lora_rank, spec.qkv_bias ? spec.q_lora_rank : 0);
      matrix(spec.q_lora_rank, q, 0);
      parts.norms += spec.q_lora_rank;
    } else {
      matrix(h, q, 0);
    }
    matrix(h, r_kv + rope, spec.qkv_bias ? r_kv + rope : 0);
    parts.norms += r_kv;
    matrix(r_kv, a * (spec.head_dimension() - rope + spec.value_head_dim()), 0);
  } else {
    const int64_t kv = spec.kv_width();
    const int64_t v = spec.value_width();
    if (spec.fused_qkv) {
      matrix(h, q + kv + v, spec.qkv_bias ? q + kv + v : 0);
    } else {
      matrix(h, q, spec.qkv_bias ? q : 0);
      matrix(h, kv, spec.qkv_bias ? kv : 0);
      matrix(h, v, spec.qkv_bias ? v : 0);
    }
    const int64_t qk_norm_factor = spec.qk_norm_bias ? 2 : 1;
    if (spec.qk_norm == QkNorm::kPerHead) {
      parts.norms += 2 * spec.head_dimension() * qk_norm_factor;
    } else if (spec.qk_norm == QkNorm::kFullWidth) {
      parts.norms += (q + kv) * qk_norm_factor;
    }
  }
  parts.weights += o_in * h;
  parts.row_biases = spec.attention_out_bias ? h : 0;
  parts.largest_matrix = std::max(parts.largest_matrix, o_in * h + parts.row_biases);
  parts.factored += o_in + h;
  return parts;
}

// One MLP of width f: its matrices, column biases and row bias.
struct MlpParts {
  int64_t weights = 0;
  int64_t column_biases = 0;
  int64_t row_biases = 0;
  int64_t largest_matrix = 0;
  int64_t factored = 0;
  int64_t total() const { return weights + column_biases + row_biases; }
};

MlpParts Mlp(const ModelSpec& spec, int64_t f) {
  MlpParts parts;
  const int64_t h = spec.hidden_size;
  const int64_t matrices = spec.gated_mlp ? 3 : 2;
  parts.weights = matrices * h * f;
  parts.column_biases = spec.mlp_bias ? (matrices - 1) * f : 0;
  parts.row_biases = spec.mlp_bias ? h : 0;
  const int64_t up = (spec.gated_mlp && spec.fused_gate_up ? 2 : 1) * f;
  parts.largest_matrix = h * up + (spec.mlp_bias ? up : 0);
  parts.factored = matrices * (h + f);
  return parts;
}

}  // namespace

LayerMix FirstLayers(const ParameterCount& count, int64_t layers) {
  LayerMix mix;
  mix.dense = std::min(layers, count.dense_layers);
  mix.moe = std::min(layers - mix.dense, count.moe_layers);
  return mix;
}

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
  const int64_t norm_params = spec.NormParameters(h);

  const AttentionParts attention = Attention(spec);
  count.attention_weights = attention.weights;
  count.attention_column_biases = attention.column_biases;
  count.attention_row_biases = attention.row_biases;
  count.attention_norms = attention.norms;
  count.layer_norms = spec.norms_per_layer * norm_params;
  const int64_t every_layer = count.attention_weights + count.attention_column_biases +
                              count.attention_row_biases + count.attention_norms +
                              count.layer_norms;

  count.moe_layers = spec.moe_layers();
  count.dense_layers = spec.num_layers - count.moe_layers;
  const MlpParts dense = Mlp(spec, spec.ffn());
  const MlpParts expert = Mlp(spec, spec.expert_ffn());
  const MlpParts shared = Mlp(spec, spec.shared_expert_ffn_size);
  if (count.dense_layers > 0) {
    count.mlp_weights = dense.weights;
    count.mlp_column_biases = dense.column_biases;
    count.mlp_row_biases = dense.row_biases;
  }
  if (count.moe_layers > 0) {
    count.expert_parameters = spec.num_experts * expert.total();
    count.active_expert_parameters = spec.experts_top_k * expert.total();
    count.router = h * spec.num_experts;
    count.shared_expert = spec.shared_expert_ffn_size > 0 ? shared.total() : 0;
    count.shared_expert_gate = spec.shared_expert_gate ? h : 0;
  }
  count.per_dense_layer =
      every_layer + count.mlp_weights + count.mlp_column_biases + count.mlp_row_biases;
  count.per_moe_layer = every_layer + count.expert_parameters + count.router + count.shared_expert +
                        count.shared_expert_gate;
  count.blocks =
      count.dense_layers * count.per_dense_layer + count.moe_layers * count.per_moe_layer;

  const int64_t vh = spec.vocab_size * h;
  count.embedding = vh;
  count.position_embedding =
      spec.position_embedding == PositionKind::kLearned ? spec.max_positions * h : 0;
  count.embedding_norm = spec.embedding_norm ? norm_params : 0;
  count.final_norm = norm_params;
  count.output_layer = spec.tied_embeddings ? 0 : vh + (spec.lm_head_bias ? spec.vocab_size : 0);
  const int64_t model_level = count.embedding + count.position_embedding + count.embedding_norm +
                              count.final_norm + count.output_layer;
  count.architectural_total = count.blocks + model_level;
  count.total = spec.parameter_count > 0 ? spec.parameter_count : count.architectural_total;
  const int64_t active_architectural =
      count.architectural_total -
      count.moe_layers * (count.expert_parameters - count.active_expert_parameters);
  count.active = spec.parameter_count > 0
                     ? static_cast<int64_t>(static_cast<double>(active_architectural) *
                                            count.given_count_scale())
                     : active_architectural;

  int64_t largest_linear = attention.largest_matrix;
  if (count.dense_layers > 0) largest_linear = std::max(largest_linear, dense.largest_matrix);
  if (count.moe_layers > 0) {
    largest_linear = std::max({largest_linear, expert.largest_matrix, shared.largest_matrix});
  }
  count.largest_module = std::max({vh, count.position_embedding, largest_linear});

  const int64_t dense_matmul = count.mlp_weights;
  const int64_t moe_matmul = spec.experts_top_k * expert.weights + count.router +
                             (count.shared_expert > 0 ? shared.weights : 0) +
                             count.shared_expert_gate;
  count.matmul_weights_active = spec.num_layers * count.attention_weights +
                                count.dense_layers * dense_matmul + count.moe_layers * moe_matmul +
                                vh;
  const int64_t moe_linear = spec.num_experts * expert.weights + count.router +
                             (count.shared_expert > 0 ? shared.weights : 0) +
                             count.shared_expert_gate;
  count.block_linear_weights = spec.num_layers * count.attention_weights +
                               count.dense_layers * count.mlp_weights +
                               count.moe_layers * moe_linear;

  // Adafactor: a matrix n x m keeps n + m second-moment values; a vector keeps its size.
  const int64_t layer_vectors = count.attention_column_biases + count.attention_row_biases +
                                count.attention_norms + count.layer_norms;
  const int64_t dense_factored = dense.factored + count.mlp_column_biases + count.mlp_row_biases;
  const int64_t moe_factored =
      spec.num_experts * (expert.factored + expert.column_biases + expert.row_biases) +
      (h + spec.num_experts) +
      (count.shared_expert > 0 ? shared.factored + shared.column_biases + shared.row_biases : 0) +
      (count.shared_expert_gate > 0 ? h + 1 : 0);
  count.factored_second_moment =
      spec.num_layers * (attention.factored + layer_vectors) + count.dense_layers * dense_factored +
      count.moe_layers * moe_factored + (spec.vocab_size + h) +
      (count.position_embedding > 0 ? spec.max_positions + h : 0) + count.embedding_norm +
      count.final_norm +
      (spec.tied_embeddings ? 0 : spec.vocab_size + h + (spec.lm_head_bias ? spec.vocab_size : 0));
  return count;
}

std::vector<Term> ParameterCountTerms(const ModelSpec& spec, const ParameterCount& count) {
  std::vector<Term> terms;
  constexpr char kSource[] =
      "estimator/parameter_count.h (docs/estimator_reference.md §1.1 and §8.1)";
  if (count.architectural) {
    Term layer;
    layer.key = "parameters_per_layer";
    layer.label = "parameters per transformer layer";
    layer.value = static_cast<double>(count.blocks) / static_cast<double>(spec.num_layers);
    layer.unit = Unit::kCount;
    layer.formula =
        "attention h(a d_h) + h(g d_h) + h(g d_v) + (a d_v)h + biases + q/k norms (MLA: "
        "low-rank Q and KV); MLP m h f + biases (m = 3 gated, else 2); experts E (m h f_e + "
        "biases) + router h E + shared expert; norms k n(h); blocks = L_dense * dense layer + "
        "L_moe * MoE layer, shown per layer";
    layer.values = absl::StrFormat(
        "attention %s (Q width %d, K/V width %d/%d); attention biases %s; attention norms %s; "
        "norms %s; dense layer: MLP %s + biases %s = %s (x %d); MoE layer: experts %s, router %s, "
        "shared expert %s + gate %s = %s (x %d); blocks %s / %d layers",
        FormatCount(static_cast<double>(count.attention_weights)), spec.query_width(),
        spec.kv_width(), spec.value_width(),
        FormatCount(
            static_cast<double>(count.attention_column_biases + count.attention_row_biases)),
        FormatCount(static_cast<double>(count.attention_norms)),
        FormatCount(static_cast<double>(count.layer_norms)),
        FormatCount(static_cast<double>(count.mlp_weights)),
        FormatCount(static_cast<double>(count.mlp_column_biases + count.mlp_row_biases)),
        FormatCount(static_cast<double>(count.per_dense_layer)), count.dense_layers,
        FormatCount(static_cast<double>(count.expert_parameters)),
        FormatCount(static_cast<double>(count.router)),
        FormatCount(static_cast<double>(count.shared_expert)),
        FormatCount(static_cast<double>(count.shared_expert_gate)),
        FormatCount(static_cast<double>(count.per_moe_layer)), count.moe_layers,
        FormatCount(static_cast<double>(count.blocks)), spec.num_layers);
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
        "blocks + V h (embedding) + positions + embedding norm + final norm + V h (+ V bias) "
        "(output layer, untied only)";
    total.values = absl::StrFormat("%s + %s + %s + %s + %s + %s = %s",
                                   FormatCount(static_cast<double>(count.blocks)),
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
