// GPU presets: memory visible to CUDA, dense 16-bit tensor throughput and memory bandwidth.
//
// memory_bytes is what cudaMemGetInfo / torch.cuda.get_device_properties().total_memory reports
// (nvidia-smi's total minus the driver's reservation), the capacity an OOM is measured against:
//   h100-80gb  85,017,493,504 B  measured for this project (H100 80GB HBM3, driver 580.159.04)
//   h200      150,109,880,320 B  measured for this project (H200, driver 580.159.04)
//   a100-40gb  42,405,855,232 B  deviceQuery output quoted on the Paderborn PC2 wiki
//   a100-80gb  79.25 GiB         PyTorch OOM messages (e.g. wbfwonderful/Vad-R1#11); +/-0.1 GiB
//                                across drivers and SXM/PCIe
//   rtx-4090   23.64 GiB         PyTorch OOM messages (e.g. ali-vilab/VGen#104)
// peak_flops: dense bf16/fp16 tensor FLOP/s from NVIDIA's datasheets (A100 312 T; H100/H200 SXM
// 989 T; RTX 4090 165.2 T with fp32 accumulation, Ada whitepaper). bandwidth: datasheet HBM/GDDR
// bytes/s (A100-40GB 1,555 GB/s; A100-80GB SXM 2,039 GB/s; H100 SXM 3.35 TB/s; H200 4.8 TB/s;
// RTX 4090 1,008 GB/s).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fragscope::estimator {

struct GpuSpec {
  std::string name;         // preset key, e.g. "h100-80gb"
  std::string description;  // e.g. "NVIDIA H100 80GB HBM3 (SXM)"
  double memory_bytes = 0;  // capacity visible to CUDA
  double peak_flops = 0;    // dense 16-bit tensor FLOP/s
  double bandwidth = 0;     // memory bytes/s
  std::string source;       // where the three numbers come from
};

const std::vector<GpuSpec>& GpuPresets();

// Case-insensitive; accepts aliases "a100" (= a100-80gb), "h100", "h100-sxm", "h200-141gb",
// "4090". Unknown names are kNotFound listing the presets.
absl::StatusOr<GpuSpec> FindGpuPreset(absl::string_view name);

}  // namespace fragscope::estimator
