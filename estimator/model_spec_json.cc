#include "estimator/model_spec_json.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"

#include "estimator/json_value.h"
#include "estimator/model_presets.h"
#include "estimator/status_macros.h"

namespace fragscope::estimator {
namespace {

using Json = nlohmann::json;

// A text from the file for a message: quoted, at most 40 bytes of it, non-printable bytes escaped.
std::string Quoted(absl::string_view text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size() && i < 40; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    }
  }
  absl::StrAppend(&out, text.size() > 40 ? "...\"" : "\"");
  return out;
}

// A value for a message: numbers and booleans as written, a string as a short excerpt.
std::string Describe(const Json& value) {
  if (value.is_number()) return absl::StrCat(value.get<double>());
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_string()) {
    return absl::StrCat(Quoted(value.get_ref<const std::string&>()), " (a string)");
  }
  return absl::StrCat("a JSON ", JsonKindName(value));
}

// Member `key` of `object`, or nullptr.
const Json* Find(const Json& object, absl::string_view key) {
  const auto it = object.find(std::string_view(key.data(), key.size()));
  return it == object.end() ? nullptr : &*it;
}

absl::StatusOr<int64_t> ReadInteger(const Json& value, absl::string_view key) {
  constexpr double kMaxExact = 9007199254740992.0;  // 2^53
  const double number = value.is_number() ? value.get<double>() : -1;
  if (number < 0 || number != std::floor(number) || number > kMaxExact) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": expected a non-negative integer, got ", Describe(value)));
  }
  return static_cast<int64_t>(number);
}

absl::StatusOr<bool> ReadBool(const Json& value, absl::string_view key) {
  if (!value.is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": expected true or false, got ", Describe(value)));
  }
  return value.get<bool>();
}

absl::StatusOr<std::string> ReadString(const Json& value, absl::string_view key) {
  if (!value.is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": expected a string, got ", Describe(value)));
  }
  return value.get<std::string>();
}

// Reads one value into a member of its type. A null integer or boolean counts as absent (Hugging
// Face configs write null for "the class default"); the enumerations are strings.
absl::Status ReadInto(const Json& value, absl::string_view key, int64_t& field) {
  if (value.is_null()) return absl::OkStatus();
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(field, ReadInteger(value, key));
  return absl::OkStatus();
}

absl::Status ReadInto(const Json& value, absl::string_view key, bool& field) {
  if (value.is_null()) return absl::OkStatus();
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(field, ReadBool(value, key));
  return absl::OkStatus();
}

absl::Status ReadInto(const Json& value, absl::string_view key, NormKind& field) {
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const std::string text, ReadString(value, key));
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(field, ParseNormKind(text, key));
  return absl::OkStatus();
}

absl::Status ReadInto(const Json& value, absl::string_view key, PositionKind& field) {
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const std::string text, ReadString(value, key));
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(field, ParsePositionKind(text, key));
  return absl::OkStatus();
}

// Reads `key` of `object` into `field` if the key is there.
template <typename T>
absl::Status MaybeRead(const Json& object, absl::string_view key, T& field) {
  const Json* value = Find(object, key);
  return value == nullptr ? absl::OkStatus() : ReadInto(*value, key, field);
}

// A key of a spec file and the ModelSpec member it sets.
struct SpecKey {
  const char* key;
  std::variant<int64_t ModelSpec::*, bool ModelSpec::*, NormKind ModelSpec::*,
               PositionKind ModelSpec::*>
      member;
};

// Reads the keys `object` has into `spec`, in the order listed (the first bad one is reported).
absl::Status ReadKeys(const Json& object, absl::Span<const SpecKey> keys, ModelSpec& spec) {
  for (const SpecKey& k : keys) {
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
        std::visit([&](auto member) { return MaybeRead(object, k.key, spec.*member); }, k.member));
  }
  return absl::OkStatus();
}

// fragscope's own schema: "name", "base", then these, each named as its ModelSpec member.
const SpecKey kOwnSchemaKeys[] = {{"num_layers", &ModelSpec::num_layers},
                                  {"hidden_size", &ModelSpec::hidden_size},
                                  {"num_heads", &ModelSpec::num_heads},
                                  {"num_kv_heads", &ModelSpec::num_kv_heads},
                                  {"head_dim", &ModelSpec::head_dim},
                                  {"ffn_size", &ModelSpec::ffn_size},
                                  {"gated_mlp", &ModelSpec::gated_mlp},
                                  {"vocab_size", &ModelSpec::vocab_size},
                                  {"tied_embeddings", &ModelSpec::tied_embeddings},
                                  {"norm", &ModelSpec::norm},
                                  {"linear_biases", &ModelSpec::linear_biases},
                                  {"position_embedding", &ModelSpec::position_embedding},
                                  {"max_positions", &ModelSpec::max_positions},
                                  {"embedding_norm", &ModelSpec::embedding_norm},
                                  {"num_experts", &ModelSpec::num_experts},
                                  {"experts_top_k", &ModelSpec::experts_top_k},
                                  {"moe_ffn_size", &ModelSpec::moe_ffn_size},
                                  {"parameter_count", &ModelSpec::parameter_count},
                                  {"fused_qkv", &ModelSpec::fused_qkv},
                                  {"python_gelu", &ModelSpec::python_gelu}};

absl::StatusOr<ModelSpec> FromOwnSchema(const Json& root) {
  for (const auto& [key, value] : root.items()) {
    bool known = key == "name" || key == "base";
    for (const SpecKey& k : kOwnSchemaKeys) known = known || key == k.key;
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown field ", Quoted(key), " (known fields: name, base, ",
          absl::StrJoin(kOwnSchemaKeys, ", ",
                        [](std::string* out, const SpecKey& k) { absl::StrAppend(out, k.key); }),
          ")"));
    }
  }
  ModelSpec spec;
  if (const Json* base = Find(root, "base")) {
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const std::string name, ReadString(*base, "base"));
    absl::StatusOr<ModelSpec> preset = FindModelPreset(name);
    if (!preset.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("base: ", preset.status().message()));
    }
    spec = *std::move(preset);
  }
  if (const Json* name = Find(root, "name")) {
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(spec.name, ReadString(*name, "name"));
  }
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(ReadKeys(root, kOwnSchemaKeys, spec));
  if (spec.name.empty()) spec.name = "custom";
  return spec;
}

absl::StatusOr<ModelSpec> FromHuggingFace(const Json& root, const std::string& model_type) {
  ModelSpec spec;
  spec.name = model_type;
  if (const Json* name = Find(root, "_name_or_path");
      name != nullptr && name->is_string() && !name->get_ref<const std::string&>().empty()) {
    spec.name = name->get<std::string>();
  }
  if (model_type == "llama" || model_type == "mistral" || model_type == "mixtral") {
    spec.gated_mlp = true;
    spec.norm = NormKind::kRmsNorm;
    spec.position_embedding = PositionKind::kRotary;
    spec.tied_embeddings = false;
    spec.linear_biases = false;
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(ReadKeys(root,
                                                 {{"num_hidden_layers", &ModelSpec::num_layers},
                                                  {"hidden_size", &ModelSpec::hidden_size},
                                                  {"num_attention_heads", &ModelSpec::num_heads},
                                                  {"num_key_value_heads", &ModelSpec::num_kv_heads},
                                                  {"head_dim", &ModelSpec::head_dim}},
                                                 spec));
    // Without it, transformers uses the config class's default (11008 for llama, 14336 for
    // mistral and mixtral), right only for the model it was taken from: ask rather than guess.
    if (const Json* ffn = Find(root, "intermediate_size"); ffn == nullptr || ffn->is_null()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "intermediate_size: missing from this ", model_type,
          " config (transformers would use its class default, which fits one model size "
          "only); add the model's own value"));
    }
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
        ReadKeys(root,
                 {{"intermediate_size", &ModelSpec::ffn_size},
                  {"vocab_size", &ModelSpec::vocab_size},
                  {"tie_word_embeddings", &ModelSpec::tied_embeddings}},
                 spec));
    bool attention_bias = false;
    bool mlp_bias = false;
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeRead(root, "attention_bias", attention_bias));
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeRead(root, "mlp_bias", mlp_bias));
    if (attention_bias != mlp_bias) {
      return absl::InvalidArgumentError(
          "attention_bias/mlp_bias: biases on only some linear layers are not modelled; write "
          "the spec in fragscope's own schema");
    }
    spec.linear_biases = attention_bias;
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
        ReadKeys(root,
                 {{"num_local_experts", &ModelSpec::num_experts},
                  {"num_experts_per_tok", &ModelSpec::experts_top_k}},
                 spec));
    if (spec.num_experts == 0) spec.experts_top_k = 0;
  } else if (model_type == "gpt2") {
    spec.vocab_size = 50257;
    spec.max_positions = 1024;
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(ReadKeys(root,
                                                 {{"n_layer", &ModelSpec::num_layers},
                                                  {"n_embd", &ModelSpec::hidden_size},
                                                  {"n_head", &ModelSpec::num_heads},
                                                  {"n_inner", &ModelSpec::ffn_size},
                                                  {"n_positions", &ModelSpec::max_positions},
                                                  {"vocab_size", &ModelSpec::vocab_size}},
                                                 spec));
    // transformers' GPT2Attention projects q, k, v with one c_attn; its default activation
    // "gelu_new" is a Python tanh GeLU.
    spec.fused_qkv = true;
    std::string activation = "gelu_new";
    if (const Json* act = Find(root, "activation_function")) {
      FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(activation, ReadString(*act, "activation_function"));
    }
    spec.python_gelu = activation == "gelu_new";
  } else if (model_type == "opt") {
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(ReadKeys(root,
                                                 {{"num_hidden_layers", &ModelSpec::num_layers},
                                                  {"hidden_size", &ModelSpec::hidden_size},
                                                  {"num_attention_heads", &ModelSpec::num_heads},
                                                  {"ffn_dim", &ModelSpec::ffn_size},
                                                  {"vocab_size", &ModelSpec::vocab_size}},
                                                 spec));
    // OPT's learned position table has 2 rows more than max_position_embeddings.
    if (const Json* positions = Find(root, "max_position_embeddings");
        positions != nullptr && !positions->is_null()) {
      FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const int64_t rows,
                                           ReadInteger(*positions, "max_position_embeddings"));
      spec.max_positions = rows + 2;
    }
    int64_t projection = spec.hidden_size;
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeRead(root, "word_embed_proj_dim", projection));
    bool pre_norm = true;
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(MaybeRead(root, "do_layer_norm_before", pre_norm));
    if (projection != spec.hidden_size || !pre_norm) {
      return absl::InvalidArgumentError(
          "word_embed_proj_dim/do_layer_norm_before: OPT variants with projected embeddings or "
          "post-LayerNorm (opt-350m) are not modelled");
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("model_type: ", Quoted(model_type),
                     " is not supported (llama, mistral, mixtral, gpt2, opt); write the spec in "
                     "fragscope's own schema"));
  }
  return spec;
}

}  // namespace

absl::StatusOr<ModelSpec> ModelSpecFromJson(absl::string_view json_text) {
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const Json root, ParseJson(json_text));
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a model spec must be a JSON object, got a JSON ", JsonKindName(root)));
  }
  ModelSpec spec;
  if (const Json* model_type = Find(root, "model_type")) {
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
  const bool standard_input = path == "-";
  const int fd = standard_input ? STDIN_FILENO : open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    return absl::NotFoundError(
        absl::StrCat("cannot open model spec file '", path, "': ", std::strerror(error)));
  }
  // Read in pieces up to one byte past the bound, so a stream without end (a device, a pipe)
  // stops there with an error instead of growing without limit.
  std::string text;
  int error = 0;
  while (text.size() <= kMaxModelSpecFileBytes) {
    const size_t old_size = text.size();
    text.resize(std::min(old_size + (size_t{1} << 16), kMaxModelSpecFileBytes + 1));
    const ssize_t n = read(fd, text.data() + old_size, text.size() - old_size);
    if (n < 0 && errno == EINTR) {
      text.resize(old_size);
      continue;
    }
    text.resize(old_size + static_cast<size_t>(std::max<ssize_t>(n, 0)));
    if (n < 0) error = errno;
    if (n <= 0) break;
  }
  if (!standard_input) close(fd);
  if (error == EISDIR) {
    return absl::InvalidArgumentError(
        absl::StrCat("model spec file '", path, "' is a directory (expected a JSON file)"));
  }
  if (error != 0) {
    return absl::DataLossError(
        absl::StrCat("cannot read model spec file '", path, "': ", std::strerror(error)));
  }
  if (text.size() > kMaxModelSpecFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": larger than the ", kMaxModelSpecFileBytes >> 20,
        " MiB a model spec file may have (reading stopped there); is it a JSON file?"));
  }
  absl::StatusOr<ModelSpec> spec = ModelSpecFromJson(text);
  if (!spec.ok()) {
    return absl::Status(spec.status().code(), absl::StrCat(path, ": ", spec.status().message()));
  }
  return spec;
}

}  // namespace fragscope::estimator
