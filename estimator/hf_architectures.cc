#include "estimator/hf_architectures.h"

#include <string>

#include "absl/strings/str_cat.h"

#include "estimator/json_fields.h"
#include "estimator/status_macros.h"

namespace fragscope::estimator {
namespace {

using Json = nlohmann::json;

// `key` of `config` as a boolean, or `absent` when it is not there (or null).
absl::StatusOr<bool> Flag(const Json& config, absl::string_view key, bool absent) {
  const Json* value = FindNonNull(config, key);
  if (value == nullptr) return absent;
  return ReadJsonBool(*value, key);
}

// Falcon (modeling_falcon.py): the fused QKV has a + 2 heads under multi-query, a + 2g under the
// new decoder architecture, else 3a; parallel attention shares one norm unless the new
// architecture gives it two (num_ln_in_parallel_attn, 2 by default there); the new architecture
// always adds attention and MLP outputs in parallel.
absl::Status AdjustFalcon(const Json& config, ModelSpec& spec) {
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const bool new_architecture,
                                       Flag(config, "new_decoder_architecture", false));
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const bool multi_query, Flag(config, "multi_query", true));
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const bool parallel, Flag(config, "parallel_attn", true));
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const bool alibi, Flag(config, "alibi", false));
  int64_t norms_in_parallel = new_architecture ? 2 : 1;
  if (const Json* value = FindNonNull(config, "num_ln_in_parallel_attn")) {
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(norms_in_parallel,
                                         ReadJsonInteger(*value, "num_ln_in_parallel_attn"));
  }
  if (!new_architecture) spec.num_kv_heads = multi_query ? 1 : spec.num_heads;
  spec.norms_per_layer = !parallel || norms_in_parallel == 2 ? 2 : 1;
  spec.parallel_attention = parallel || new_architecture;
  spec.position_embedding = alibi ? PositionKind::kAlibi : PositionKind::kRotary;
  return absl::OkStatus();
}

// GPTBigCode: multi_query (the default) keeps one K and one V head.
absl::Status AdjustGptBigCode(const Json& config, ModelSpec& spec) {
  if (FindNonNull(config, "multi_query") == nullptr) return absl::OkStatus();
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const bool multi_query, Flag(config, "multi_query", true));
  spec.num_kv_heads = multi_query ? 1 : spec.num_heads;
  return absl::OkStatus();
}

// OPT: projected embeddings (opt-350m) and post-LayerNorm are outside the spec; the norms may be
// non-parametric (layer_norm_elementwise_affine).
absl::Status AdjustOpt(const Json& config, ModelSpec& spec) {
  int64_t projection = spec.hidden_size;
  if (const Json* value = FindNonNull(config, "word_embed_proj_dim")) {
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(projection,
                                         ReadJsonInteger(*value, "word_embed_proj_dim"));
  }
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const bool pre_norm,
                                       Flag(config, "do_layer_norm_before", true));
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const bool no_final_norm,
                                       Flag(config, "_remove_final_layer_norm", false));
  if (projection != spec.hidden_size || !pre_norm || no_final_norm) {
    return absl::InvalidArgumentError(absl::StrCat(
        projection != spec.hidden_size
            ? absl::StrCat("word_embed_proj_dim = ", projection, " differs from hidden_size = ",
                           spec.hidden_size, ": projected embeddings (opt-350m)")
            : (pre_norm ? "_remove_final_layer_norm: a model without its final norm"
                        : "do_layer_norm_before = false: post-LayerNorm (opt-350m)"),
        " is not modelled; write the spec in fragscope's own schema"));
  }
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(spec.norm_parameters,
                                       Flag(config, "layer_norm_elementwise_affine", true));
  return absl::OkStatus();
}

constexpr NormKind kLayerNorm = NormKind::kLayerNorm;

// One entry per model type; fields not named are Llama's. Sources: transformers 5.17
// models/<type>/modeling_<type>.py.
const Architecture kArchitectures[] = {
    {.model_type = "llama"},
    {.model_type = "mistral", .attention_bias_key = AttentionBiasKey::kIgnored},
    {.model_type = "mixtral", .attention_bias_key = AttentionBiasKey::kIgnored},
    {.model_type = "granite"},
    {.model_type = "granitemoe"},
    {.model_type = "helium", .attention_bias_key = AttentionBiasKey::kQkvOnly},
    {.model_type = "smollm3", .tied_embeddings = true},
    {.model_type = "qwen2", .qkv_bias = true, .attention_bias_key = AttentionBiasKey::kIgnored},
    {.model_type = "qwen3", .qk_norm = QkNorm::kPerHead},
    {.model_type = "qwen2_moe",
     .qkv_bias = true,
     .attention_bias_key = AttentionBiasKey::kIgnored,
     .shared_expert_gate = true},
    {.model_type = "qwen3_moe", .qk_norm = QkNorm::kPerHead},
    {.model_type = "olmo", .norm = kLayerNorm, .norm_parameters = false},
    {.model_type = "olmo2", .qk_norm = QkNorm::kFullWidth},
    {.model_type = "olmoe", .qk_norm = QkNorm::kFullWidth},
    {.model_type = "gemma", .tied_embeddings = true, .default_activation = "gelu_pytorch_tanh"},
    {.model_type = "gemma2",
     .norms_per_layer = 4,
     .tied_embeddings = true,
     .default_activation = "gelu_pytorch_tanh"},
    {.model_type = "gemma3_text",
     .norms_per_layer = 4,
     .tied_embeddings = true,
     .qk_norm = QkNorm::kPerHead,
     .default_activation = "gelu_pytorch_tanh"},
    {.model_type = "phi3", .fused_qkv = true, .fused_gate_up = true},
    {.model_type = "deepseek_v3"},
    {.model_type = "cohere",
     .norm = kLayerNorm,
     .norm_bias = false,
     .norms_per_layer = 1,
     .tied_embeddings = true,
     .qk_norm_switch = "use_qk_norm",
     .parallel_attention = true},
    {.model_type = "stablelm",
     .norm = kLayerNorm,
     .qk_norm_switch = "qk_layernorm",
     .parallel_switch = "use_parallel_residual",
     .parallel_shares_norm = true},
    {.model_type = "gpt2",
     .gated_mlp = false,
     .norm = kLayerNorm,
     .tied_embeddings = true,
     .qkv_bias = true,
     .attention_out_bias = true,
     .mlp_bias = true,
     .positions = PositionKind::kLearned,
     .fused_qkv = true,
     .default_vocab_size = 50257,
     .default_positions = 1024,
     .default_activation = "gelu_new"},
    {.model_type = "gpt_bigcode",
     .gated_mlp = false,
     .norm = kLayerNorm,
     .tied_embeddings = true,
     .qkv_bias = true,
     .attention_out_bias = true,
     .mlp_bias = true,
     .positions = PositionKind::kLearned,
     .fused_qkv = true,
     .default_activation = "gelu_pytorch_tanh",
     .adjust = AdjustGptBigCode},
    {.model_type = "gpt_neo",
     .gated_mlp = false,
     .norm = kLayerNorm,
     .tied_embeddings = true,
     .attention_out_bias = true,
     .mlp_bias = true,
     .positions = PositionKind::kLearned,
     .default_activation = "gelu_new"},
    {.model_type = "gptj",
     .gated_mlp = false,
     .norm = kLayerNorm,
     .norms_per_layer = 1,
     .mlp_bias = true,
     .lm_head_bias = true,
     .parallel_attention = true,
     .default_activation = "gelu_new"},
    {.model_type = "opt",
     .gated_mlp = false,
     .norm = kLayerNorm,
     .tied_embeddings = true,
     .qkv_bias = true,
     .attention_out_bias = true,
     .mlp_bias = true,
     .positions = PositionKind::kLearned,
     .extra_position_rows = 2,
     .default_activation = "relu",
     .adjust = AdjustOpt},
    {.model_type = "falcon",
     .gated_mlp = false,
     .norm = kLayerNorm,
     .tied_embeddings = true,
     .fused_qkv = true,
     .default_activation = "gelu",
     .adjust = AdjustFalcon},
    {.model_type = "starcoder2",
     .gated_mlp = false,
     .norm = kLayerNorm,
     .tied_embeddings = true,
     .qkv_bias = true,
     .attention_out_bias = true,
     .mlp_bias = true,
     .default_activation = "gelu_pytorch_tanh"},
    {.model_type = "gpt_neox",
     .gated_mlp = false,
     .norm = kLayerNorm,
     .qkv_bias = true,
     .attention_out_bias = true,
     .mlp_bias = true,
     .parallel_switch = "use_parallel_residual",
     .fused_qkv = true,
     .default_activation = "gelu"},
    {.model_type = "phi",
     .gated_mlp = false,
     .norm = kLayerNorm,
     .norms_per_layer = 1,
     .qkv_bias = true,
     .attention_out_bias = true,
     .mlp_bias = true,
     .lm_head_bias = true,
     .qk_norm_switch = "qk_layernorm",
     .qk_norm_when_switched = QkNorm::kPerHead,
     .qk_norm_bias = true,
     .parallel_attention = true,
     .default_activation = "gelu_new"},
};

}  // namespace

const Architecture* FindArchitecture(absl::string_view model_type) {
  for (const Architecture& architecture : kArchitectures) {
    if (architecture.model_type == model_type) return &architecture;
  }
  return nullptr;
}

const Architecture& LlamaStyleArchitecture() {
  static const Architecture llama_style;
  return llama_style;
}

}  // namespace fragscope::estimator
