// Rendering of an estimate for people (a table of terms, the total against a GPU), for
// `--explain` (each formula with its values and source) and for machines (JSON).
//
// Text layout:
//   <model>: <P> parameters, <P_local> on this GPU
//   <workload>   (training: ends with what the activations assume: model, recompute, flash
//                 attention, dropout)
//     term                                   bytes        GiB   share
//     weights (bf16)                26,031,728,640      24.24   31.2%
//     ...
//     total on GPU                  83,414,810,624      77.69  100.0%
//   GPU h100-80gb (...): 79.18 GiB visible to CUDA; total is 98.1% of it: fits, 1.49 GiB free
// GiB = 2^30 bytes throughout; shares are of the device total (host terms show "host").
// JSON keys are stable (see README.md): model, workload, activations (training: {counted, model,
// recompute, flash_attention, dropout}; inference: null), parameters, parameters_on_gpu, terms[]
// {key, label, placement, bytes, gib, share, formula, values, source}, device_total_bytes,
// host_total_bytes, quantities[], notes[], gpu {name, description, memory_bytes, fits,
// headroom_bytes, used_fraction}, timing[] {key, label, unit, value, formula, values, source}.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

#include "estimator/gpu_presets.h"
#include "estimator/json_document.h"
#include "estimator/term.h"

namespace fragscope::estimator {

struct Report {
  MemoryEstimate estimate;
  bool has_gpu = false;
  GpuSpec gpu;               // valid when has_gpu
  std::vector<Term> timing;  // roofline terms, possibly empty
};

std::string RenderText(const Report& report);
// RenderText followed by every term's formula, substituted values and source.
std::string RenderExplain(const Report& report);
// The JSON document (keys above), and its text.
OrderedJson ReportJson(const Report& report);
std::string RenderJson(const Report& report);

// "12.34 ms", "1.2 s", "980 us" etc. for a time in seconds.
std::string FormatSeconds(double seconds);

}  // namespace fragscope::estimator
