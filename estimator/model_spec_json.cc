#include "estimator/model_spec_json.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "estimator/json_value.h"
#include "estimator/model_presets.h"
#include "estimator/status_macros.h"

namespace fragscope::estimator {
namespace {

std::string Describe(const JsonValue& value) {
  switch (value.kind()) {
    case JsonValue::Kind::kNumber:
      return absl::StrCat(value.number());
    case JsonValue::Kind::kString:
      return absl::StrCat("\"", value.string_value(), "\" (a string)");
    case JsonValue::Kind::kBool:
      return value.bool_value() ? "true" : "false";
    default:
      return absl::StrCat("a JSON ", JsonKindName(value.kind()));
  }
}

absl::StatusOr<int64_t> ReadInteger(const JsonValue& value, absl::string_view key) {
  constexpr double kMaxExact = 9007199254740992.0;  // 2^53
  if (value.kind() != JsonValue::Kind::kNumber || value.number() < 0 ||
      value.number() != std::floor(value.number()) || value.number() > kMaxExact) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": expected a non-negative integer, got ", Describe(value)));
  }
  return static_cast<int64_t>(value.number());
}

absl::StatusOr<bool> ReadBool(const JsonValue& value, absl::string_view key) {
  if (value.kind() != JsonValue::Kind::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": expected true or false, got ", Describe(value)));
  }
  return value.bool_value();
}

absl::StatusOr<std::string> ReadString(const JsonValue& value, absl::string_view key) {
  if (value.kind() != JsonValue::Kind::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": expected a string, got ", Describe(value)));
  }
  return value.string_value();
}

// Applies an integer key if present; `offset` is added (OPT's position offset of 2).
absl::Status MaybeInteger(const JsonValue& object, absl::string_view key, int64_t& field,
                          int64_t offset = 0) {
  const JsonValue* value = object.Find(key);
  if (value == nullptr || value->is_null()) return absl::OkStatus();
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const int64_t parsed, ReadInteger(*value, key));
  field = parsed + offset;
  return absl::OkStatus();
}

absl::Status MaybeBool(const JsonValue& object, absl::string_view key, bool& field) {
  const JsonValue* value = object.Find(key);
  if (value == nullptr || value->is_null()) return absl::OkStatus();
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(field, ReadBool(*value, key));
  return absl::OkStatus();
}

absl::StatusOr<ModelSpec> FromOwnSchema(const JsonValue& root) {
  static const char* const kKeys[] = {"name",
                                      "base",
                                      "num_layers",
                                      "hidden_size",
                                      "num_heads",
                                      "num_kv_heads",
                                      "head_dim",
                                      "ffn_size",
                                      "gated_mlp",
                                      "vocab_size",
                                      "tied_embeddings",
                                      "norm",
                                      "linear_biases",
                                      "position_embedding",
                                      "max_positions",
                                      "embedding_norm",
                                      "num_experts",
                                      "experts_top_k",
                                      "moe_ffn_size",
                                      "parameter_count",
                                      "fused_qkv",
                                      "python_gelu"};
  for (const std::string& key : root.keys()) {
    bool known = false;
    for (const char* k : kKeys) known = known || key == k;
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown field \"", key, "\" (known fields: ", absl::StrJoin(kKeys, ", "), ")"));
    }
  }
  ModelSpec spec;
  if (const JsonValue* base = root.Find("base")) {
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const std::string name, ReadString(*base, "base"));
    absl::StatusOr<ModelSpec> preset = FindModelPreset(name);
    if (!preset.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("base: ", preset.status().message()));
    }
    spec = *std::move(preset);
  }
  if (const JsonValue* name = root.Find("name")) {
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(spec.name, ReadString(*name, "name"));
  }
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "num_layers", spec.num_layers));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "hidden_size", spec.hidden_size));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "num_heads", spec.num_heads));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "num_kv_heads", spec.num_kv_heads));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "head_dim", spec.head_dim));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "ffn_size", spec.ffn_size));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeBool(root, "gated_mlp", spec.gated_mlp));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "vocab_size", spec.vocab_size));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeBool(root, "tied_embeddings", spec.tied_embeddings));
  if (const JsonValue* norm = root.Find("norm")) {
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const std::string text, ReadString(*norm, "norm"));
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(spec.norm, ParseNormKind(text, "norm"));
  }
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeBool(root, "linear_biases", spec.linear_biases));
  if (const JsonValue* position = root.Find("position_embedding")) {
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const std::string text,
                                         ReadString(*position, "position_embedding"));
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(spec.position_embedding,
                                         ParsePositionKind(text, "position_embedding"));
  }
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "max_positions", spec.max_positions));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeBool(root, "embedding_norm", spec.embedding_norm));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "num_experts", spec.num_experts));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "experts_top_k", spec.experts_top_k));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "moe_ffn_size", spec.moe_ffn_size));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "parameter_count", spec.parameter_count));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeBool(root, "fused_qkv", spec.fused_qkv));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeBool(root, "python_gelu", spec.python_gelu));
  if (spec.name.empty()) spec.name = "custom";
  return spec;
}

absl::StatusOr<ModelSpec> FromHuggingFace(const JsonValue& root, const std::string& model_type) {
  ModelSpec spec;
  spec.name = model_type;
  if (const JsonValue* name = root.Find("_name_or_path");
      name != nullptr && name->kind() == JsonValue::Kind::kString &&
      !name->string_value().empty()) {
    spec.name = name->string_value();
  }
  if (model_type == "llama" || model_type == "mistral" || model_type == "mixtral") {
    spec.gated_mlp = true;
    spec.norm = NormKind::kRmsNorm;
    spec.position_embedding = PositionKind::kRotary;
    spec.tied_embeddings = false;
    spec.linear_biases = false;
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "num_hidden_layers", spec.num_layers));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "hidden_size", spec.hidden_size));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "num_attention_heads", spec.num_heads));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
        MaybeInteger(root, "num_key_value_heads", spec.num_kv_heads));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "head_dim", spec.head_dim));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "intermediate_size", spec.ffn_size));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "vocab_size", spec.vocab_size));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
        MaybeBool(root, "tie_word_embeddings", spec.tied_embeddings));
    bool attention_bias = false;
    bool mlp_bias = false;
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeBool(root, "attention_bias", attention_bias));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeBool(root, "mlp_bias", mlp_bias));
    if (attention_bias != mlp_bias) {
      return absl::InvalidArgumentError(
          "attention_bias/mlp_bias: biases on only some linear layers are not modelled; write "
          "the spec in fragscope's own schema");
    }
    spec.linear_biases = attention_bias;
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "num_local_experts", spec.num_experts));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
        MaybeInteger(root, "num_experts_per_tok", spec.experts_top_k));
    if (spec.num_experts == 0) spec.experts_top_k = 0;
  } else if (model_type == "gpt2") {
    spec.vocab_size = 50257;
    spec.max_positions = 1024;
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "n_layer", spec.num_layers));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "n_embd", spec.hidden_size));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "n_head", spec.num_heads));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "n_inner", spec.ffn_size));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "n_positions", spec.max_positions));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "vocab_size", spec.vocab_size));
    // transformers' GPT2Attention projects q, k, v with one c_attn; its default activation
    // "gelu_new" is a Python tanh GeLU.
    spec.fused_qkv = true;
    std::string activation = "gelu_new";
    if (const JsonValue* act = root.Find("activation_function")) {
      FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(activation, ReadString(*act, "activation_function"));
    }
    spec.python_gelu = activation == "gelu_new";
  } else if (model_type == "opt") {
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "num_hidden_layers", spec.num_layers));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "hidden_size", spec.hidden_size));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "num_attention_heads", spec.num_heads));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "ffn_dim", spec.ffn_size));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "vocab_size", spec.vocab_size));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
        MaybeInteger(root, "max_position_embeddings", spec.max_positions, /*offset=*/2));
    int64_t projection = spec.hidden_size;
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeInteger(root, "word_embed_proj_dim", projection));
    bool pre_norm = true;
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeBool(root, "do_layer_norm_before", pre_norm));
    if (projection != spec.hidden_size || !pre_norm) {
      return absl::InvalidArgumentError(
          "word_embed_proj_dim/do_layer_norm_before: OPT variants with projected embeddings or "
          "post-LayerNorm (opt-350m) are not modelled");
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("model_type: \"", model_type,
                     "\" is not supported (llama, mistral, mixtral, gpt2, opt); write the spec in "
                     "fragscope's own schema"));
  }
  return spec;
}

}  // namespace

absl::StatusOr<ModelSpec> ModelSpecFromJson(absl::string_view json_text) {
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const JsonValue root, ParseJson(json_text));
  if (root.kind() != JsonValue::Kind::kObject) {
    return absl::InvalidArgumentError(
        absl::StrCat("a model spec must be a JSON object, got a JSON ", JsonKindName(root.kind())));
  }
  ModelSpec spec;
  if (const JsonValue* model_type = root.Find("model_type")) {
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const std::string type,
                                         ReadString(*model_type, "model_type"));
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(spec, FromHuggingFace(root, type));
  } else {
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(spec, FromOwnSchema(root));
  }
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(ValidateModelSpec(spec));
  return spec;
}

absl::StatusOr<ModelSpec> LoadModelSpecFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model spec file '", path, "' is a directory (expected a JSON file)"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    return absl::NotFoundError(
        absl::StrCat("cannot open model spec file '", path, "': ", std::strerror(error)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  absl::StatusOr<ModelSpec> spec = ModelSpecFromJson(text.str());
  if (!spec.ok()) {
    return absl::Status(spec.status().code(), absl::StrCat(path, ": ", spec.status().message()));
  }
  return spec;
}

}  // namespace fragscope::estimator
