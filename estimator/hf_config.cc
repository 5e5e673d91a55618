#include "estimator/hf_config.h"

#include <algorithm>
#include <initializer_list>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "estimator/hf_architectures.h"
#include "estimator/json_fields.h"
#include "estimator/status_macros.h"

namespace fragscope::estimator {
namespace {

using Json = nlohmann::json;

// The reading of one config: the object, its model type (for messages) and the spec built.
struct Reader {
  const Json& config;
  const std::string& model_type;
  ModelSpec& spec;

  // The first of `keys` the config has (not null), or nullptr; `found` names it.
  const Json* First(std::initializer_list<const char*> keys, std::string* found = nullptr) const {
    for (const char* key : keys) {
      if (const Json* value = FindNonNull(config, key)) {
        if (found != nullptr) *found = key;
        return value;
      }
    }
    return nullptr;
  }

  absl::Status Missing(std::initializer_list<const char*> keys, absl::string_view why) const {
    return absl::InvalidArgumentError(
        absl::StrCat(absl::StrJoin(keys, " | "), ": missing from this ", QuotedExcerpt(model_type),
                     " config", why.empty() ? "" : absl::StrCat(" (", why, ")")));
  }

  // Reads the first of `keys` into `field`; leaves it when none is there.
  absl::Status Integer(std::initializer_list<const char*> keys, int64_t& field) const {
    std::string key;
    if (const Json* value = First(keys, &key)) {
      FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(field, ReadJsonInteger(*value, key));
    }
    return absl::OkStatus();
  }

  // As Integer, but one of `keys` must be there.
  absl::Status Required(std::initializer_list<const char*> keys, int64_t& field,
                        absl::string_view why = "") const {
    if (First(keys) == nullptr) return Missing(keys, why);
    return Integer(keys, field);
  }

  absl::Status Bool(std::initializer_list<const char*> keys, bool& field) const {
    std::string key;
    if (const Json* value = First(keys, &key)) {
      FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(field, ReadJsonBool(*value, key));
    }
    return absl::OkStatus();
  }
};

void ApplyStructure(const Architecture& a, ModelSpec& spec) {
  spec.gated_mlp = a.gated_mlp;
  spec.norm = a.norm;
  spec.norm_bias = a.norm_bias;
  spec.norm_parameters = a.norm_parameters;
  spec.norms_per_layer = a.norms_per_layer;
  spec.tied_embeddings = a.tied_embeddings;
  spec.qkv_bias = a.qkv_bias;
  spec.attention_out_bias = a.attention_out_bias;
  spec.mlp_bias = a.mlp_bias;
  spec.lm_head_bias = a.lm_head_bias;
  spec.qk_norm = a.qk_norm;
  spec.qk_norm_bias = a.qk_norm_bias;
  spec.parallel_attention = a.parallel_attention;
  spec.position_embedding = a.positions;
  spec.fused_qkv = a.fused_qkv;
  spec.fused_gate_up = a.fused_gate_up;
}

// Sizes every decoder has.
absl::Status ReadSizes(const Reader& r, const Architecture& a) {
  ModelSpec& spec = r.spec;
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
      r.Required({"num_hidden_layers", "n_layer", "num_layers"}, spec.num_layers));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
      r.Required({"hidden_size", "n_embd", "d_model"}, spec.hidden_size));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
      r.Required({"num_attention_heads", "n_head", "num_heads"}, spec.num_heads));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
      r.Integer({"num_key_value_heads", "num_kv_heads", "n_head_kv"}, spec.num_kv_heads));
  spec.vocab_size = a.default_vocab_size;
  if (a.default_vocab_size > 0) {
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Integer({"vocab_size"}, spec.vocab_size));
  } else {
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Required({"vocab_size"}, spec.vocab_size));
  }
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Bool({"tie_word_embeddings"}, spec.tied_embeddings));
  // A gated MLP's width has no rule of thumb: transformers' class default fits one model size
  // only, so ask rather than guess. A plain MLP without one is 4h, as every such class does.
  const std::initializer_list<const char*> ffn_keys = {"intermediate_size", "n_inner", "ffn_dim",
                                                       "ffn_hidden_size"};
  if (a.gated_mlp) {
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Required(
        ffn_keys, spec.ffn_size,
        "transformers would use its class default, which fits one model size only; add the "
        "model's own value"));
  } else {
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Integer(ffn_keys, spec.ffn_size));
  }
  if (spec.position_embedding == PositionKind::kLearned) {
    int64_t rows = a.default_positions;
    if (a.default_positions > 0) {
      FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
          r.Integer({"n_positions", "max_position_embeddings"}, rows));
    } else {
      FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
          r.Required({"n_positions", "max_position_embeddings"}, rows,
                     "the learned position table has that many rows"));
    }
    spec.max_positions = rows + a.extra_position_rows;
  }
  spec.activation = a.default_activation;
  std::string key;
  if (const Json* act =
          r.First({"hidden_act", "activation_function", "hidden_activation", "activation"}, &key)) {
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(spec.activation, ReadJsonString(*act, key));
  }
  // transformers' "gelu_new" is a Python tanh GeLU that keeps fp32 intermediates.
  spec.python_gelu = !spec.gated_mlp && spec.activation == "gelu_new";
  // A number (not null) turns the causal LM's logit soft-capping on.
  if (const Json* cap = r.First({"final_logit_softcapping"})) {
    if (!cap->is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "final_logit_softcapping: must be a number or null, got ", QuotedExcerpt(cap->dump())));
    }
    spec.logit_softcapping = cap->get<double>() > 0;
  }
  return absl::OkStatus();
}

// Attention: head width, biases, q/k norms, MLA.
absl::Status ReadAttention(const Reader& r, const Architecture& a) {
  ModelSpec& spec = r.spec;
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Integer({"kv_lora_rank"}, spec.kv_lora_rank));
  if (spec.is_mla()) {
    // DeepSeek's MLA: head_dim in its config is the rotary width; the query/key head is
    // qk_nope_head_dim + qk_rope_head_dim.
    int64_t nope = 0;
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Required({"qk_nope_head_dim"}, nope, "MLA"));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
        r.Required({"qk_rope_head_dim"}, spec.qk_rope_head_dim, "MLA"));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Required({"v_head_dim"}, spec.v_head_dim, "MLA"));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Integer({"q_lora_rank"}, spec.q_lora_rank));
    spec.head_dim = nope + spec.qk_rope_head_dim;
  } else {
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Integer({"head_dim"}, spec.head_dim));
  }
  // Bias switches, each meaning the same in every config that has it.
  bool attention_bias = false;
  if (a.attention_bias_key != AttentionBiasKey::kIgnored &&
      r.First({"attention_bias"}) != nullptr) {
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Bool({"attention_bias"}, attention_bias));
    spec.qkv_bias = attention_bias;
    if (a.attention_bias_key == AttentionBiasKey::kQkvAndOut) {
      spec.attention_out_bias = attention_bias;
    }
  }
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Bool({"qkv_bias", "use_qkv_bias"}, spec.qkv_bias));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Bool({"mlp_bias"}, spec.mlp_bias));
  bool all_biases = false;
  if (r.First({"use_bias", "bias", "enable_bias"}) != nullptr) {
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Bool({"use_bias", "bias", "enable_bias"}, all_biases));
    spec.SetLinearBiases(all_biases);
  }
  if (a.qk_norm_switch != nullptr) {
    bool on = false;
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Bool({a.qk_norm_switch}, on));
    if (on) spec.qk_norm = a.qk_norm_when_switched;
  }
  if (a.parallel_switch != nullptr) {
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Bool({a.parallel_switch}, spec.parallel_attention));
    if (spec.parallel_attention && a.parallel_shares_norm) spec.norms_per_layer = 1;
  }
  return absl::OkStatus();
}

// Mixture of experts: routed experts, shared experts, which layers are dense.
absl::Status ReadExperts(const Reader& r, const Architecture& a) {
  ModelSpec& spec = r.spec;
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
      r.Integer({"num_local_experts", "num_experts", "n_routed_experts"}, spec.num_experts));
  if (spec.num_experts == 0) return absl::OkStatus();
  spec.shared_expert_gate = a.shared_expert_gate;
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
      r.Required({"num_experts_per_tok"}, spec.experts_top_k, "experts active per token"));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Integer({"moe_intermediate_size"}, spec.moe_ffn_size));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
      r.Integer({"shared_expert_intermediate_size"}, spec.shared_expert_ffn_size));
  int64_t shared_experts = 0;
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Integer({"n_shared_experts"}, shared_experts));
  if (shared_experts > 0) {
    if (static_cast<double>(shared_experts) * static_cast<double>(spec.expert_ffn()) >
        kMaxParameters) {
      return absl::InvalidArgumentError(absl::StrCat(
          "n_shared_experts = ", shared_experts, " x moe_intermediate_size = ", spec.expert_ffn(),
          " is beyond the limit of 9e15"));
    }
    // DeepSeek's shared experts are one MLP of n_shared_experts x moe_intermediate_size.
    spec.shared_expert_ffn_size = shared_experts * spec.expert_ffn();
  }
  if (spec.shared_expert_ffn_size == 0) spec.shared_expert_gate = false;
  // Dense layers: DeepSeek's first k, or Qwen-MoE's mlp_only_layers and every layer whose
  // (index + 1) is not a multiple of decoder_sparse_step.
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Integer({"first_k_dense_replace"}, spec.dense_layers));
  spec.dense_layers = std::min(spec.dense_layers, spec.num_layers);
  int64_t step = 1;
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(r.Integer({"decoder_sparse_step"}, step));
  if (step == 0) {
    return absl::InvalidArgumentError("decoder_sparse_step: must be positive, got 0");
  }
  const Json* only_mlp = r.First({"mlp_only_layers"});
  if (only_mlp != nullptr && !only_mlp->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mlp_only_layers: expected a list of layer indices, got ", DescribeJson(*only_mlp)));
  }
  if (step > 1 || (only_mlp != nullptr && !only_mlp->empty())) {
    // MoE layers: indices i with (i + 1) a multiple of step, less those listed as MLP-only.
    std::set<int64_t> listed_moe;
    if (only_mlp != nullptr) {
      for (const Json& index : *only_mlp) {
        FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const int64_t i,
                                             ReadJsonInteger(index, "mlp_only_layers"));
        if (i < spec.num_layers && (i + 1) % step == 0) listed_moe.insert(i);
      }
    }
    const int64_t moe = spec.num_layers / step - static_cast<int64_t>(listed_moe.size());
    spec.dense_layers = spec.num_layers - moe;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelSpec> ModelSpecFromHuggingFaceConfig(const Json& root,
                                                         const std::string& model_type) {
  ModelSpec spec;
  spec.model_type = model_type;
  spec.name = model_type;
  if (const Json* name = FindKey(root, "_name_or_path");
      name != nullptr && name->is_string() && !name->get_ref<const std::string&>().empty()) {
    spec.name = name->get<std::string>();
  }
  bool encoder_decoder = false;
  if (const Json* value = FindNonNull(root, "is_encoder_decoder")) {
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(encoder_decoder,
                                         ReadJsonBool(*value, "is_encoder_decoder"));
  }
  if (encoder_decoder) {
    return absl::InvalidArgumentError(
        absl::StrCat("is_encoder_decoder: model_type ", QuotedExcerpt(model_type),
                     " is an encoder-decoder; only decoder-only models are modelled"));
  }
  const Architecture* known = FindArchitecture(model_type);
  const Architecture& architecture = known != nullptr ? *known : LlamaStyleArchitecture();
  ApplyStructure(architecture, spec);
  const Reader reader{root, model_type, spec};
  absl::Status status = ReadSizes(reader, architecture);
  if (status.ok()) status = ReadAttention(reader, architecture);
  if (status.ok()) status = ReadExperts(reader, architecture);
  if (status.ok() && architecture.adjust != nullptr) status = architecture.adjust(root, spec);
  if (known == nullptr) {
    const std::string assumption = absl::StrCat(
        "model_type ", QuotedExcerpt(model_type),
        " is not known: read as a Llama-style decoder (gated MLP, RMSNorm, no biases unless "
        "attention_bias/mlp_bias say so, ",
        spec.tied_embeddings ? "tied" : "untied", " output layer)");
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat(status.message(), "; ", assumption));
    }
    spec.assumptions.push_back(assumption);
  }
  if (!status.ok()) return status;
  return spec;
}

}  // namespace fragscope::estimator
