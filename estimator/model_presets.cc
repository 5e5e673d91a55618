#include "estimator/model_presets.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fragscope::estimator {
namespace {

// GPT-2/GPT-3/OPT/BLOOM family: LayerNorm, biases everywhere, tied embeddings, f = 4h.
ModelSpec GptLike(std::string name, int64_t layers, int64_t hidden, int64_t heads, int64_t vocab,
                  int64_t positions) {
  ModelSpec spec;
  spec.name = std::move(name);
  spec.num_layers = layers;
  spec.hidden_size = hidden;
  spec.num_heads = heads;
  spec.ffn_size = 4 * hidden;
  spec.vocab_size = vocab;
  spec.tied_embeddings = true;
  spec.norm = NormKind::kLayerNorm;
  spec.SetLinearBiases(true);
  spec.position_embedding = PositionKind::kLearned;
  spec.max_positions = positions;
  return spec;
}

// Llama family: RMSNorm, no biases, rotary positions, SwiGLU, untied output layer.
ModelSpec LlamaLike(std::string name, int64_t layers, int64_t hidden, int64_t heads,
                    int64_t kv_heads, int64_t ffn, int64_t vocab) {
  ModelSpec spec;
  spec.name = std::move(name);
  spec.num_layers = layers;
  spec.hidden_size = hidden;
  spec.num_heads = heads;
  spec.num_kv_heads = kv_heads;
  spec.ffn_size = ffn;
  spec.gated_mlp = true;
  spec.vocab_size = vocab;
  spec.tied_embeddings = false;
  spec.norm = NormKind::kRmsNorm;
  spec.SetLinearBiases(false);
  spec.position_embedding = PositionKind::kRotary;
  return spec;
}

// GPT-2 as transformers implements it: one c_attn projection, the Python "gelu_new".
ModelSpec Gpt2(std::string name, int64_t layers, int64_t hidden, int64_t heads) {
  ModelSpec spec = GptLike(std::move(name), layers, hidden, heads, 50257, 1024);
  spec.fused_qkv = true;
  spec.python_gelu = true;
  return spec;
}

std::vector<ModelSpec> MakePresets() {
  std::vector<ModelSpec> presets;
  presets.push_back(Gpt2("gpt2-small", 12, 768, 12));
  presets.push_back(Gpt2("gpt2-medium", 24, 1024, 16));
  presets.push_back(Gpt2("gpt2-large", 36, 1280, 20));
  presets.push_back(Gpt2("gpt2-xl", 48, 1600, 25));
  presets.push_back(LlamaLike("llama-2-7b", 32, 4096, 32, 32, 11008, 32000));
  presets.push_back(LlamaLike("llama-2-13b", 40, 5120, 40, 40, 13824, 32000));
  presets.push_back(LlamaLike("llama-2-70b", 80, 8192, 64, 8, 28672, 32000));
  presets.push_back(LlamaLike("llama-3-8b", 32, 4096, 32, 8, 14336, 128256));
  presets.push_back(LlamaLike("llama-3-70b", 80, 8192, 64, 8, 28672, 128256));
  presets.push_back(GptLike("gpt-3-175b", 96, 12288, 96, 50257, 2048));
  ModelSpec bloom = GptLike("bloom-176b", 70, 14336, 112, 250880, 0);
  bloom.position_embedding = PositionKind::kAlibi;
  bloom.embedding_norm = true;
  presets.push_back(bloom);
  presets.push_back(GptLike("opt-125m", 12, 768, 12, 50272, 2050));
  presets.push_back(GptLike("opt-1.3b", 24, 2048, 32, 50272, 2050));
  presets.push_back(GptLike("opt-2.7b", 32, 2560, 32, 50272, 2050));
  presets.push_back(GptLike("opt-6.7b", 32, 4096, 32, 50272, 2050));
  presets.push_back(GptLike("opt-13b", 40, 5120, 40, 50272, 2050));
  presets.push_back(GptLike("opt-30b", 48, 7168, 56, 50272, 2050));
  presets.push_back(GptLike("opt-66b", 64, 9216, 72, 50272, 2050));
  presets.push_back(GptLike("opt-175b", 96, 12288, 96, 50272, 2050));
  ModelSpec mixtral = LlamaLike("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000);
  mixtral.num_experts = 8;
  mixtral.experts_top_k = 2;
  presets.push_back(mixtral);
  return presets;
}

}  // namespace

const std::vector<ModelSpec>& ModelPresets() {
  static const std::vector<ModelSpec>* const presets = new std::vector<ModelSpec>(MakePresets());
  return *presets;
}

absl::StatusOr<ModelSpec> FindModelPreset(absl::string_view name) {
  std::string key = absl::AsciiStrToLower(name);
  if (key == "gpt2") key = "gpt2-small";
  if (key == "gpt3-175b" || key == "gpt-3" || key == "gpt3") key = "gpt-3-175b";
  std::vector<std::string> known;
  for (const ModelSpec& spec : ModelPresets()) {
    if (spec.name == key) return spec;
    known.push_back(spec.name);
  }
  return absl::NotFoundError(
      absl::StrCat("unknown preset '", name, "'; known presets: ", absl::StrJoin(known, ", ")));
}

}  // namespace fragscope::estimator
