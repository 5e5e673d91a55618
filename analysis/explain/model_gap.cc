#include "analysis/explain/model_gap.h"

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "allocator/format_size.h"
#include "estimator/inference_memory.h"
#include "estimator/model_presets.h"
#include "estimator/model_spec_json.h"
#include "estimator/training_config.h"
#include "estimator/training_memory.h"

namespace fragscope {
namespace {

namespace est = ::fragscope::estimator;

// The estimator term a key belongs to in the comparison, or "" for terms the allocator never
// sees (CUDA context, workspace, host terms, the 1.2x rule). `casts`: a torch-autocast estimate
// of full training, whose fp32 parameters are the master weights and whose 16-bit weights are
// forward casts (with LoRA the 16-bit weights are the frozen base the job holds).
std::string Category(const std::string& key, bool casts) {
  if (casts && key == "master_weights") return "weights";
  if (casts && key == "weights") return "activations";
  if (key == "weights" || key == "lora_weights") return "weights";
  if (key == "gradients" || key == "main_gradients" || key == "lora_gradients") return "gradients";
  if (key == "master_weights" || absl::StrContains(key, "optimizer")) return "optimizer";
  if (absl::StartsWith(key, "activations") || key == "recompute_working_set" ||
      key == "loss_backward") {
    return "activations";
  }
  if (key == "kv_cache") return "kv_cache";
  return "";
}

// The term a live block belongs to, from the marker phase it was allocated in.
std::string CategoryOfPhase(const MapBlock& block) {
  if (block.origin.before_trace) return "weights";
  const std::string p = absl::AsciiStrToLower(block.phase);
  if (absl::StrContains(p, "optim") || absl::StrContains(p, ".step")) return "optimizer";
  if (absl::StrContains(p, "backward")) return "gradients";
  if (absl::StrContains(p, "forward")) return "activations";
  if (absl::StrContains(p, "prefill") || absl::StrContains(p, "decode")) return "kv_cache";
  if (absl::StrContains(p, "init") || absl::StrContains(p, "weight") ||
      absl::StrContains(p, "load")) {
    return "weights";
  }
  return "";
}

// The term a live block belongs to, from its role (the log's tag records); "" for the roles no
// term covers (library workspaces and communication buffers: the estimator's workspace term is
// configured, not derived).
std::string CategoryOfRole(AllocationRole role) {
  switch (role) {
    case AllocationRole::kWeights:
      return "weights";
    case AllocationRole::kGradients:
      return "gradients";
    case AllocationRole::kOptimizerStates:
    case AllocationRole::kOptimizerTemporaries:
      return "optimizer";
    case AllocationRole::kSavedActivations:
    case AllocationRole::kTemporaries:
      return "activations";
    case AllocationRole::kKvCache:
      return "kv_cache";
    default:
      return "";
  }
}

// Whether the estimate's 16-bit weights are autocast's forward copies (see Category): a
// torch-autocast estimate (only it has step moments, or a loss_backward term: a pipeline rank
// before the last has none) without adapters.
bool WeightsAreCasts(const est::MemoryEstimate& estimate) {
  return (estimate.step_peaks.has_value() || estimate.Find("loss_backward") != nullptr) &&
         estimate.Find("lora_weights") == nullptr;
}

}  // namespace

double AllocatorVisibleBytes(const est::MemoryEstimate& estimate) {
  const bool casts = WeightsAreCasts(estimate);
  double bytes = 0;
  for (const est::Term& t : estimate.terms) {
    if (t.placement == est::Placement::kDevice && t.at_peak && !Category(t.key, casts).empty()) {
      bytes += t.value;
    }
  }
  return bytes;
}

ModelGap CompareWithModel(const est::MemoryEstimate& estimate, const LayoutSummary& layout) {
  ModelGap gap;
  const bool casts = WeightsAreCasts(estimate);
  gap.model = absl::StrFormat("%s, %s", estimate.model_name, estimate.workload);
  std::map<std::string, TermGap> terms;
  for (const est::Term& t : estimate.terms) {
    if (t.placement != est::Placement::kDevice || !t.at_peak) continue;
    const std::string category = Category(t.key, casts);
    if (category.empty()) continue;
    terms[category].category = category;
    terms[category].estimated_bytes += t.value;
    gap.theoretical_bytes += t.value;
  }
  // Blocks with roles (a predicted log's) are attributed by role, else by their phase.
  for (const SegmentMap& m : layout.maps) {
    for (const MapBlock& b : m.blocks) {
      gap.by_role |=
          b.state == MapBlockState::kAllocated && b.origin.role != AllocationRole::kUnknown;
    }
  }
  for (const SegmentMap& m : layout.maps) {
    for (const MapBlock& b : m.blocks) {
      if (b.state != MapBlockState::kAllocated) continue;
      gap.allocated_bytes += static_cast<double>(b.size);
      const std::string category = gap.by_role ? CategoryOfRole(b.origin.role) : CategoryOfPhase(b);
      if (category.empty()) {
        gap.unattributed_bytes += static_cast<double>(b.size);
      } else {
        terms[category].category = category;
        terms[category].measured_bytes += static_cast<double>(b.size);
      }
    }
  }
  const double diff = gap.allocated_bytes - gap.theoretical_bytes;
  // Only an excess over the footprint has a place to sit: below it, the job had not reached its
  // peak, and a term a little over its estimate is no gap.
  double worst = 0;
  for (auto& [category, term] : terms) {
    gap.terms.push_back(term);
    const double excess = term.measured_bytes - term.estimated_bytes;
    if (diff > 0 && excess > worst) {
      worst = excess;
      gap.likely_term = category;
    }
  }
  auto size = [](double bytes) { return FormatSize(static_cast<uint64_t>(std::max(0.0, bytes))); };
  gap.lines.push_back(absl::StrFormat(
      "Theoretical footprint (%s): %s; allocated at this point: %s (%s%s, %+.0f%%).", gap.model,
      size(gap.theoretical_bytes), size(gap.allocated_bytes), diff >= 0 ? "+" : "-",
      size(std::abs(diff)),
      gap.theoretical_bytes > 0 ? 100.0 * diff / gap.theoretical_bytes : 0.0));
  if (!gap.likely_term.empty()) {
    const TermGap& t = terms[gap.likely_term];
    // Two literal formats: absl checks each at compile time, which a chosen one defeats.
    gap.lines.push_back(
        gap.by_role
            ? absl::StrFormat("The gap most likely sits in %s: blocks of its roles hold %s against "
                              "%s estimated (the blocks' roles, from the log's tag records).",
                              gap.likely_term, size(t.measured_bytes), size(t.estimated_bytes))
            : absl::StrFormat(
                  "The gap most likely sits in %s: blocks allocated in its phases hold %s against "
                  "%s estimated (heuristic: blocks are attributed by the marker phase they were "
                  "allocated in).",
                  gap.likely_term, size(t.measured_bytes), size(t.estimated_bytes)));
  } else if (diff < 0 && gap.allocated_bytes > 0) {
    gap.lines.push_back(
        "Allocated memory is below the footprint: the job had not reached its theoretical peak "
        "here, so there is no excess for a term to hold.");
  } else if (gap.unattributed_bytes > 0 && gap.allocated_bytes > 0) {
    gap.lines.push_back(
        absl::StrFormat("%s of live blocks carry no phase that maps to a term (add markers such as "
                        "\"step N / forward\" to attribute them).",
                        size(gap.unattributed_bytes)));
  }
  // A KV cache the footprint has no term for is a training forward's: transformers builds one
  // whenever use_cache is on (its default), and the model's output holds it until the loss is
  // computed, at the forward's end, where training peaks. A measured saving, not a modelling gap.
  if (const auto kv = terms.find("kv_cache");
      kv != terms.end() && kv->second.estimated_bytes == 0 && kv->second.measured_bytes > 0) {
    gap.lines.push_back(absl::StrFormat(
        "A KV cache of %s is live here, which a training step does not need: the model's forward "
        "built one (transformers' use_cache defaults to true); call the model with "
        "use_cache=False, or set config.use_cache = False, to free it.",
        size(kv->second.measured_bytes)));
  }
  return gap;
}

}  // namespace fragscope
