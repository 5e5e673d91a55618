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

#include "estimator/hf_config.h"
#include "estimator/json_fields.h"
#include "estimator/json_value.h"
#include "estimator/model_presets.h"
#include "estimator/status_macros.h"

namespace fragscope::estimator {
namespace {

using Json = nlohmann::json;

// fragscope's own schema: "name", "base", "linear_biases" (sets qkv_bias, attention_out_bias and
// mlp_bias, before they are read), then these, each named as its ModelSpec member.
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
                                  {"position_embedding", &ModelSpec::position_embedding},
                                  {"max_positions", &ModelSpec::max_positions},
                                  {"embedding_norm", &ModelSpec::embedding_norm},
                                  {"num_experts", &ModelSpec::num_experts},
                                  {"experts_top_k", &ModelSpec::experts_top_k},
                                  {"moe_ffn_size", &ModelSpec::moe_ffn_size},
                                  {"parameter_count", &ModelSpec::parameter_count},
                                  {"fused_qkv", &ModelSpec::fused_qkv},
                                  {"python_gelu", &ModelSpec::python_gelu},
                                  {"logit_softcapping", &ModelSpec::logit_softcapping},
                                  {"qkv_bias", &ModelSpec::qkv_bias},
                                  {"attention_out_bias", &ModelSpec::attention_out_bias},
                                  {"mlp_bias", &ModelSpec::mlp_bias},
                                  {"lm_head_bias", &ModelSpec::lm_head_bias},
                                  {"qk_norm", &ModelSpec::qk_norm},
                                  {"qk_norm_bias", &ModelSpec::qk_norm_bias},
                                  {"v_head_dim", &ModelSpec::v_head_dim},
                                  {"q_lora_rank", &ModelSpec::q_lora_rank},
                                  {"kv_lora_rank", &ModelSpec::kv_lora_rank},
                                  {"qk_rope_head_dim", &ModelSpec::qk_rope_head_dim},
                                  {"parallel_attention", &ModelSpec::parallel_attention},
                                  {"fused_gate_up", &ModelSpec::fused_gate_up},
                                  {"activation", &ModelSpec::activation},
                                  {"dense_layers", &ModelSpec::dense_layers},
                                  {"shared_expert_ffn_size", &ModelSpec::shared_expert_ffn_size},
                                  {"shared_expert_gate", &ModelSpec::shared_expert_gate},
                                  {"norm_bias", &ModelSpec::norm_bias},
                                  {"norm_parameters", &ModelSpec::norm_parameters},
                                  {"norms_per_layer", &ModelSpec::norms_per_layer}};

absl::StatusOr<ModelSpec> FromOwnSchema(const Json& root) {
  for (const auto& [key, value] : root.items()) {
    bool known = key == "name" || key == "base" || key == "linear_biases";
    for (const SpecKey& k : kOwnSchemaKeys) known = known || key == k.key;
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown field ", QuotedExcerpt(key), " (known fields: name, base, linear_biases, ",
          absl::StrJoin(kOwnSchemaKeys, ", ",
                        [](std::string* out, const SpecKey& k) { absl::StrAppend(out, k.key); }),
          ")"));
    }
  }
  ModelSpec spec;
  if (const Json* base = FindKey(root, "base")) {
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const std::string name, ReadJsonString(*base, "base"));
    absl::StatusOr<ModelSpec> preset = FindModelPreset(name);
    if (!preset.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("base: ", preset.status().message()));
    }
    spec = *std::move(preset);
  }
  if (const Json* name = FindKey(root, "name")) {
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(spec.name, ReadJsonString(*name, "name"));
  }
  if (const Json* biases = FindNonNull(root, "linear_biases")) {
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const bool on, ReadJsonBool(*biases, "linear_biases"));
    spec.SetLinearBiases(on);
  }
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(ReadSpecKeys(root, kOwnSchemaKeys, spec));
  if (spec.name.empty()) spec.name = "custom";
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
  if (const Json* model_type = FindKey(root, "model_type")) {
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const std::string type,
                                         ReadJsonString(*model_type, "model_type"));
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(spec, ModelSpecFromHuggingFaceConfig(root, type));
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
