// ModelSpec: the architecture of a decoder-only transformer, as far as memory is concerned.
//
// A spec is either an architecture (num_layers > 0 and the fields below) or a bare parameter
// count (parameter_count > 0, num_layers == 0), or both: then the given count replaces the
// architectural total and every per-GPU parameter share is scaled by given / architectural.
// Terms that need the architecture (activations, KV cache, FLOPs) fail with an error naming the
// missing field when only a count is known.
//
// Zero-valued optional fields take the usual defaults, resolved by the accessors below:
//   num_kv_heads 0 -> num_heads (MHA); head_dim 0 -> hidden_size / num_heads;
//   ffn_size 0 -> 4 * hidden_size; moe_ffn_size 0 -> ffn_size; v_head_dim 0 -> head dim.
// Field names equal the JSON keys of model_spec_json.h, so an error naming a field names the key.
//
// The structure fields describe what transformers' modules hold, so that a Hugging Face config
// reads into an exact parameter count (tests/estimator/hf_parameter_counts.json):
//   attention  Q, K, V, O projections (one fused QKV matrix or three), their biases, norms on
//              queries and keys, or multi-head latent attention (MLA, kv_lora_rank > 0: DeepSeek's
//              low-rank Q and KV projections with a shared rotary key part);
//   MLP        gated (gate, up, down) or plain (fc1, fc2), width, biases;
//   MoE        routed experts (a router h x E without bias, E expert MLPs of moe_ffn_size),
//              top-k, a shared-expert MLP and its sigmoid gate, and which layers are dense;
//   norms      kind (LayerNorm or RMSNorm), bias, non-parametric, how many per layer;
//   embedding  tied or not, learned positions, an output-layer bias.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fragscope::estimator {

enum class NormKind : uint8_t { kLayerNorm, kRmsNorm };
enum class PositionKind : uint8_t { kRotary, kLearned, kAlibi };
// Norms on queries and keys before attention: none, one vector of head_dim shared by all heads
// (Qwen3, Gemma 3, Phi), or one over the whole projection width, a d_h and g d_h (OLMo 2, OLMoE,
// Cohere, StableLM).
enum class QkNorm : uint8_t { kNone, kPerHead, kFullWidth };

struct ModelSpec {
  std::string name;
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // query groups g; 0 -> num_heads
  int64_t head_dim = 0;      // 0 -> hidden_size / num_heads
  int64_t ffn_size = 0;      // 0 -> 4 * hidden_size
  bool gated_mlp = false;    // SwiGLU/GeGLU: three f x h matrices instead of two
  int64_t vocab_size = 0;
  bool tied_embeddings = true;           // output layer shares the input embedding
  NormKind norm = NormKind::kLayerNorm;  // LayerNorm has weight+bias, RMSNorm weight only
  PositionKind position_embedding = PositionKind::kLearned;
  int64_t max_positions = 0;    // rows of the learned position table (kLearned only)
  bool embedding_norm = false;  // a norm right after the embedding (BLOOM)
  int64_t num_experts = 0;      // routed experts per MoE layer; 0 = dense MLP
  int64_t experts_top_k = 0;    // experts active per token
  int64_t moe_ffn_size = 0;     // expert FFN size; 0 -> ffn_size
  int64_t parameter_count = 0;  // > 0: a given count (see above)
  // Implementation details that only the torch-autocast activation model reads
  // (autocast_activations.h): how transformers' eager modules store activations.
  bool fused_qkv = false;    // one QKV projection (GPT-2's c_attn); false: q, k, v separately
  bool python_gelu = false;  // transformers' Python tanh GeLU ("gelu_new"): fp32 intermediates
  bool logit_softcapping = false;  // cap * tanh(logits / cap) (Gemma 2): the tanh's output is saved

  // Biases of the linear layers (the JSON key "linear_biases" sets the first three at once).
  bool qkv_bias = true;            // Q, K, V projections (MLA: the down-projections q_a, kv_a)
  bool attention_out_bias = true;  // output projection O
  bool mlp_bias = true;            // MLP matrices (fc1/gate/up and fc2/down), also in experts
  bool lm_head_bias = false;       // the untied output layer (Phi, GPT-J)

  // Attention.
  QkNorm qk_norm = QkNorm::kNone;
  bool qk_norm_bias = false;        // the q/k norms are LayerNorms with a bias (Phi)
  int64_t v_head_dim = 0;           // value head width; 0 -> head_dimension()
  int64_t q_lora_rank = 0;          // MLA: rank of the query down-projection; 0 = direct q_proj
  int64_t kv_lora_rank = 0;         // MLA when > 0: rank of the joint KV down-projection
  int64_t qk_rope_head_dim = 0;     // MLA: rotary part of head_dim, one shared key of this width
  bool parallel_attention = false;  // attention and MLP both read the block input (one residual)

  // MLP.
  bool fused_gate_up = false;  // gate and up in one matrix (Phi-3); counts are the same
  std::string activation;      // the config's activation name ("silu", "gelu_new"); "" unknown

  // Mixture of experts (num_experts > 0).
  int64_t dense_layers = 0;            // layers with the dense MLP (ffn_size) instead of experts;
                                       // they are taken to be the first ones (DeepSeek-V3)
  int64_t shared_expert_ffn_size = 0;  // an always-active MLP beside the experts; 0 = none
  bool shared_expert_gate = false;     // a sigmoid gate h -> 1 on it (Qwen2-MoE)

  // Norms.
  bool norm_bias = true;        // LayerNorm's bias (Cohere's LayerNorm has none); not RMSNorm's
  bool norm_parameters = true;  // false: non-parametric norms (OLMo)
  int64_t norms_per_layer = 2;  // 1 with one shared pre-norm (parallel attention), 4 in Gemma 2

  // Where the spec came from: the Hugging Face model_type ("" for fragscope's schema), and what
  // the reader assumed where the config did not say (shown with every estimate).
  std::string model_type;
  std::vector<std::string> assumptions;

  void SetLinearBiases(bool on) { qkv_bias = attention_out_bias = mlp_bias = on; }
  bool has_architecture() const { return num_layers > 0; }
  bool is_moe() const { return num_experts > 0; }
  int64_t kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  int64_t head_dimension() const {
    return head_dim > 0 ? head_dim : (num_heads > 0 ? hidden_size / num_heads : 0);
  }
  int64_t ffn() const { return ffn_size > 0 ? ffn_size : 4 * hidden_size; }
  int64_t expert_ffn() const { return moe_ffn_size > 0 ? moe_ffn_size : ffn(); }
  bool is_mla() const { return kv_lora_rank > 0; }
  int64_t value_head_dim() const { return v_head_dim > 0 ? v_head_dim : head_dimension(); }
  // Layers with routed experts (all but dense_layers in an MoE model, none otherwise).
  int64_t moe_layers() const { return is_moe() ? num_layers - dense_layers : 0; }
  // a * d_h: width of the query projection (== hidden_size unless head_dim is explicit).
  int64_t query_width() const { return num_heads * head_dimension(); }
  // g * d_h: width of each of the K and V projections (of the keys and values MLA expands).
  int64_t kv_width() const { return kv_heads() * head_dimension(); }
  // g * d_v: width of the values (== kv_width() unless v_head_dim is given).
  int64_t value_width() const { return kv_heads() * value_head_dim(); }
  // Parameters of one norm of width w: weight (and bias for LayerNorm with bias).
  int64_t NormParameters(int64_t w) const {
    if (!norm_parameters) return 0;
    return norm == NormKind::kLayerNorm && norm_bias ? 2 * w : w;
  }
};

// The most parameters a spec may describe (given or counted from its architecture): 9e15, over
// a thousand times the largest published model, and below 2^53, so that every count the estimator
// forms is exact in int64 and in double.
inline constexpr double kMaxParameters = 9e15;

// The largest sequence length, micro-batch, inference batch and context a configuration may
// name: 2^30, a hundred times the longest context of a published model. Two of them multiplied
// stay below 2^60, so token counts are exact, and an estimate built from them stays finite.
inline constexpr int64_t kMaxSequenceOrBatch = int64_t{1} << 30;

// OK when least <= value <= kMaxSequenceOrBatch; else "FIELD = VALUE must be in [least, 2^30]".
absl::Status RequireSequenceOrBatch(absl::string_view field, int64_t value, int64_t least);

// Checks ranges and divisibility; the error names the offending field and its value, e.g.
// "num_kv_heads = 6 must divide num_heads = 32". A spec that passes has at most kMaxParameters
// parameters.
//   REQUIRES nothing; safe on any spec.
absl::Status ValidateModelSpec(const ModelSpec& spec);

// Returns an error naming num_layers when the spec has no architecture; `purpose` says what needed
// it ("activations", "the KV cache").
absl::Status RequireArchitecture(const ModelSpec& spec, absl::string_view purpose);

// The estimate's note when `tokens` (the `what`, "seq" or "context") is past the model's learned
// positions, or nullopt when the model has no such limit or is within it.
std::optional<std::string> PastPositionsNote(const ModelSpec& spec, absl::string_view what,
                                             int64_t tokens);

absl::string_view NormKindName(NormKind kind);
absl::string_view PositionKindName(PositionKind kind);
absl::StatusOr<NormKind> ParseNormKind(absl::string_view text, absl::string_view field);
absl::StatusOr<PositionKind> ParsePositionKind(absl::string_view text, absl::string_view field);
absl::string_view QkNormName(QkNorm kind);
absl::StatusOr<QkNorm> ParseQkNorm(absl::string_view text, absl::string_view field);

}  // namespace fragscope::estimator
