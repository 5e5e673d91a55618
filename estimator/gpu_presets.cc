#include "estimator/gpu_presets.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "estimator/units.h"

namespace fragscope::estimator {
namespace {

std::vector<GpuSpec> MakePresets() {
  return {
      {"a100-40gb", "NVIDIA A100-SXM4-40GB", 42405855232.0, 312e12, 1555e9,
       "memory: deviceQuery (PC2 wiki); FLOP/s, bandwidth: NVIDIA A100 datasheet"},
      {"a100-80gb", "NVIDIA A100-SXM4-80GB", std::round(79.25 * kGiB), 312e12, 2039e9,
       "memory: PyTorch OOM reports (79.25 GiB); FLOP/s, bandwidth: NVIDIA A100 datasheet"},
      {"h100-80gb", "NVIDIA H100 80GB HBM3 (SXM)", 85017493504.0, 989e12, 3.35e12,
       "memory: measured (torch total_memory); FLOP/s, bandwidth: NVIDIA H100 datasheet"},
      {"h200", "NVIDIA H200 (SXM, 141 GB HBM3e)", 150109880320.0, 989e12, 4.8e12,
       "memory: measured (torch total_memory); FLOP/s, bandwidth: NVIDIA H200 datasheet"},
      {"rtx-4090", "NVIDIA GeForce RTX 4090", std::round(23.64 * kGiB), 165.2e12, 1008e9,
       "memory: PyTorch OOM reports (23.64 GiB); FLOP/s, bandwidth: NVIDIA Ada whitepaper"},
  };
}

}  // namespace

const std::vector<GpuSpec>& GpuPresets() {
  static const std::vector<GpuSpec>* const presets = new std::vector<GpuSpec>(MakePresets());
  return *presets;
}

absl::StatusOr<GpuSpec> FindGpuPreset(absl::string_view name) {
  std::string key = absl::AsciiStrToLower(name);
  if (key == "a100") key = "a100-80gb";
  if (key == "h100" || key == "h100-sxm" || key == "h100-80g") key = "h100-80gb";
  if (key == "h200-141gb") key = "h200";
  if (key == "4090" || key == "rtx4090") key = "rtx-4090";
  std::vector<std::string> known;
  for (const GpuSpec& gpu : GpuPresets()) {
    if (gpu.name == key) return gpu;
    known.push_back(gpu.name);
  }
  return absl::NotFoundError(
      absl::StrCat("unknown GPU '", name, "'; known GPUs: ", absl::StrJoin(known, ", ")));
}

}  // namespace fragscope::estimator
