// Which environment variable PyTorch 2.11 takes its allocator settings from.
//
// PyTorch 2.11 reads PYTORCH_CUDA_ALLOC_CONF when it is set (an empty value included), and only
// otherwise PYTORCH_ALLOC_CONF: both its CUDA parser (CUDAAllocatorConfig::instance() in
// c10/cuda/CUDAAllocatorConfig.h) and its generic one (AcceleratorAllocatorConfig::instance() in
// c10/core/AllocatorConfig.cpp) do, although the generic header's comment calls PYTORCH_ALLOC_CONF
// the primary name. 2.11 prints no deprecation warning for PYTORCH_CUDA_ALLOC_CONF, and none when
// both are set: the new name is then ignored without a word. (ROCm builds also read
// PYTORCH_HIP_ALLOC_CONF between the two; fragscope models the CUDA build.)
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace fragscope {

inline constexpr char kPyTorchCudaAllocConfEnv[] = "PYTORCH_CUDA_ALLOC_CONF";
inline constexpr char kPyTorchAllocConfEnv[] = "PYTORCH_ALLOC_CONF";

struct AllocConfEnv {
  std::string variable;  // the variable PyTorch 2.11 reads (kPyTorchCudaAllocConfEnv or ...)
  std::string value;
  // PYTORCH_ALLOC_CONF's value when it is set too but PYTORCH_CUDA_ALLOC_CONF wins.
  std::optional<std::string> shadowed_value;
};

// A variable's value, or nullopt when it is unset.
using GetEnvFunction = std::function<std::optional<std::string>(const char* name)>;

// The settings string PyTorch 2.11 would read from this environment; nullopt when neither
// variable is set.
std::optional<AllocConfEnv> ReadAllocConfEnv(const GetEnvFunction& getenv);

// The process's own environment (std::getenv).
std::optional<std::string> ProcessEnv(const char* name);

// The line fragscope prints when the new name is shadowed by the old one (2.11 says nothing).
std::string ShadowedAllocConfNote(const AllocConfEnv& env);

}  // namespace fragscope
