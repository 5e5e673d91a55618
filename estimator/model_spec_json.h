// Model specs from JSON: fragscope's own schema, or a Hugging Face config.json.
//
// Own schema (strict: an unknown key is an error naming it). Every key is optional; "base" starts
// from a preset and the other keys override it. Keys equal the ModelSpec field names:
//   {"name": "my-7b", "base": "llama-2-7b", "num_layers": 32, "hidden_size": 4096,
//    "num_heads": 32, "num_kv_heads": 8, "head_dim": 128, "ffn_size": 11008, "gated_mlp": true,
//    "vocab_size": 32000, "tied_embeddings": false, "norm": "rmsnorm", "linear_biases": false,
//    "position_embedding": "rotary", "max_positions": 0, "embedding_norm": false,
//    "num_experts": 0, "experts_top_k": 0, "moe_ffn_size": 0, "parameter_count": 0,
//    "fused_qkv": false, "python_gelu": false}
//
// Hugging Face config.json (recognised by its "model_type"; other keys are ignored): model_type
// llama, mistral and mixtral (num_hidden_layers, hidden_size, num_attention_heads,
// num_key_value_heads, head_dim, intermediate_size, vocab_size, tie_word_embeddings,
// attention_bias/mlp_bias, num_local_experts, num_experts_per_tok; intermediate_size is
// required: transformers' class default fits one model size only), gpt2 (n_layer, n_embd,
// n_head, n_inner, n_positions, vocab_size, activation_function; fused_qkv is set, python_gelu
// for "gelu_new") and opt (ffn_dim, max_position_embeddings + 2).
// Other model types are an error: write the spec in the own schema instead.
//
// Errors are kInvalidArgument naming the key, e.g. "hidden_size: expected a non-negative
// integer, got -5", and the result is validated (ValidateModelSpec).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "estimator/model_spec.h"

namespace fragscope::estimator {

absl::StatusOr<ModelSpec> ModelSpecFromJson(absl::string_view json_text);

// The most a model spec file may hold: the largest published config.json is a few KiB, and
// a stream without end (/dev/zero, a pipe) must stop somewhere.
inline constexpr size_t kMaxModelSpecFileBytes = size_t{64} << 20;

// Reads `path` ("-": standard input; pipes and devices too, at most kMaxModelSpecFileBytes) and
// parses it; a missing file is kNotFound naming the path, a longer one an error saying the
// bound, and parse errors are prefixed with the path.
absl::StatusOr<ModelSpec> LoadModelSpecFile(const std::string& path);

}  // namespace fragscope::estimator
