// ModelSpec from a Hugging Face config.json (an object with "model_type").
//
// One reader for every model type: the sizes are read through the key aliases transformers'
// configs use (num_hidden_layers | n_layer | num_layers, hidden_size | n_embd | d_model, ...),
// and the structure that the config does not state — which norms, which biases, a gated MLP,
// fused projections — comes from the model type's entry in hf_architectures.h, then the
// config's own switches (attention_bias, qkv_bias, use_bias, mlp_bias, qk_layernorm,
// use_parallel_residual, multi_query, ...) adjust it. MoE (routed experts, shared experts and
// their gate, dense first layers, mlp_only_layers, decoder_sparse_step) and multi-head latent
// attention (kv_lora_rank, q_lora_rank, qk_nope/rope head dims, v_head_dim) are read for any
// type that has their keys.
//
// An unknown model_type with the common keys is read as a Llama-style decoder and the spec's
// `assumptions` say so; a missing key the count needs is an error naming the key and the model
// type, e.g. `intermediate_size: missing from this "foo" config`. Structures the spec cannot
// describe are refused naming the key (OPT's word_embed_proj_dim, encoder-decoder models).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

#include "estimator/model_spec.h"

namespace fragscope::estimator {

// `root` is the config object, `model_type` its "model_type" string.
absl::StatusOr<ModelSpec> ModelSpecFromHuggingFaceConfig(const nlohmann::json& root,
                                                         const std::string& model_type);

}  // namespace fragscope::estimator
