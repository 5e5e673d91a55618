// Term: one traceable line of an estimate. See Note [Every number traceable] below.
//
// Note [Every number traceable]
// Each term carries the symbolic formula, the same formula with the values substituted, and the
// source it comes from (paper, file, or "fragscope" where the estimator makes its own modelling
// choice). Reports print the value; `--explain` prints the three strings. A term is never a
// hidden factor on another term: the CUDA context, library workspace and the 1.2x inference rule
// are terms of their own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace fragscope::estimator {

// Where a memory term lives. Host terms (CPU offload) are reported but never counted against
// the GPU.
enum class Placement : uint8_t { kDevice, kHost };

enum class Unit : uint8_t { kBytes, kSeconds, kFlops, kCount };

struct Term {
  std::string key;    // stable machine name, e.g. "optimizer_states"
  std::string label;  // human label, e.g. "optimizer states (AdamW m, v; fp32)"
  double value = 0;   // in `unit`
  Unit unit = Unit::kBytes;
  Placement placement = Placement::kDevice;
  std::string formula;  // symbolic, e.g. "P_local x 8 / d"
  std::string values;   // `formula` with numbers substituted
  std::string source;   // where the formula comes from
  // False for a device term that is not alive at the peak the total describes (the gradients of
  // a torch-autocast job, freed before the forward): reported, but not summed.
  bool at_peak = true;
  // Training: whether the term is alive at each of the step's candidate peaks (StepPeaks);
  // EstimateTraining sets at_peak from the one that is largest.
  bool at_backward_start = true;
  bool at_backward_end = true;
  bool at_optimizer_step = true;
  bool at_attention_backward = false;  // only when the step has that moment (StepPeaks)
};

// The moments of a training step whose live memory can be its peak, in the steady state
// (optimizer states alive from the first step on):
//   kBackwardStart  activations, the 16-bit weight copies, the loss's two fp32 gradients
//   kBackwardEnd    every gradient, and with tied embeddings the embedding lookup's dense
//                   gradient before it is added to the output layer's
//   kOptimizerStep  gradients, states and the update's temporaries
//   kAttentionBackward  with s^2 attention scores stored (eager attention, SDPA's math kernel):
//                   the softmax backward of the last layer, whose two fp32 score-sized
//                   temporaries come after the output layer's gradient
enum class StepMoment : uint8_t {
  kBackwardStart,
  kBackwardEnd,
  kOptimizerStep,
  kAttentionBackward
};

struct StepPeaks {
  double backward_start = 0;  // device bytes alive at each moment
  double backward_end = 0;
  double optimizer_step = 0;
  double attention_backward = 0;                 // 0 when the step has no such moment
  StepMoment peak = StepMoment::kBackwardStart;  // the largest (the earliest on a tie)
};

// "backward start" / "backward end" / "optimizer step"; the JSON keys use underscores.
absl::string_view StepMomentName(StepMoment moment);
absl::string_view StepMomentKey(StepMoment moment);

// What a training estimate's activation terms assume, stated in the report's header line and
// JSON: flash attention drops the s^2 attention tensors and dropout adds masks, so the same flags
// left at their defaults can move the total by gigabytes.
struct ActivationAssumptions {
  bool counted = false;          // false: model states only (--no-activations, a bare count)
  std::string model;             // "korthikanti" or "torch-autocast"
  std::string recompute;         // "none", "selective" or "full"
  bool flash_attention = false;  // no s^2 attention tensors are stored
  bool dropout = true;           // dropout masks are stored
};

// The result of one estimate: memory terms per GPU (most-loaded rank) plus derived quantities
// (parameter counts, times) that are not memory.
struct MemoryEstimate {
  std::string model_name;
  std::string workload;            // one-line description of the configuration
  int64_t total_parameters = 0;    // whole model
  double parameters_on_gpu = 0;    // on the most-loaded rank (pipeline stage 0)
  std::vector<Term> terms;         // unit kBytes only
  std::vector<Term> quantities;    // everything else (counts, FLOPs, seconds)
  std::vector<std::string> notes;  // caveats that apply to this configuration
  // Training only (inference stores no activations).
  std::optional<ActivationAssumptions> activations;
  // Training with activations counted: the two moments and which one is the peak.
  std::optional<StepPeaks> step_peaks;

  // Sum of the device terms alive at the peak, in bytes.
  double DeviceBytes() const;
  // Sum of the host terms, in bytes.
  double HostBytes() const;
  // The term with `key`, or nullptr.
  const Term* Find(absl::string_view key) const;
};

// Number formatting shared by formulas and reports.
// FormatCount(13015864320) == "13,015,864,320"; non-integers are rounded to the nearest integer.
std::string FormatCount(double value);
// Integers print as FormatCount does; other values with up to 6 significant digits (0.5, 1.4375,
// 6.75). Used inside `values` strings.
std::string FormatNumber(double value);

}  // namespace fragscope::estimator
