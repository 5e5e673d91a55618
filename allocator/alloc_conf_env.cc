#include "allocator/alloc_conf_env.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace fragscope {

std::optional<AllocConfEnv> ReadAllocConfEnv(const GetEnvFunction& getenv) {
  std::optional<std::string> cuda = getenv(kPyTorchCudaAllocConfEnv);
  std::optional<std::string> generic = getenv(kPyTorchAllocConfEnv);
  if (cuda.has_value()) {
    return AllocConfEnv{.variable = kPyTorchCudaAllocConfEnv,
                        .value = *std::move(cuda),
                        .shadowed_value = std::move(generic)};
  }
  if (generic.has_value()) {
    return AllocConfEnv{.variable = kPyTorchAllocConfEnv, .value = *std::move(generic)};
  }
  return std::nullopt;
}

std::optional<std::string> ProcessEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::string ShadowedAllocConfNote(const AllocConfEnv& env) {
  return absl::StrCat(kPyTorchAllocConfEnv, "='", env.shadowed_value.value_or(""),
                      "' is not in effect: PyTorch 2.11 reads ", kPyTorchCudaAllocConfEnv, "='",
                      env.value, "' instead whenever that is set (and warns of neither)");
}

}  // namespace fragscope
