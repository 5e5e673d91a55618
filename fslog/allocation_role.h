// AllocationRole: what a block of device memory is for — the categories users ask "who holds the
// memory" in (PyTorch's profiler memory timeline splits memory the same way). A producer that
// knows a block's role says so in a `tag` record (fslog/FORMAT.md, "Tag records"): the predictor
// tags every allocation it makes, and re-tags a block whose role becomes known only later (a
// gradient autograd's AccumulateGrad keeps, an optimizer state made inside the step, an
// activation saved for backward). The values are the format's: stable, never renumbered.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace fragscope {

enum class AllocationRole : uint8_t {
  kUnknown = 0,  // no tag (every real job's block today)
  kWeights = 1,
  kGradients = 2,
  kOptimizerStates = 3,
  kOptimizerTemporaries = 4,  // allocated by the optimizer step and freed within it
  kSavedActivations = 5,      // saved by autograd for the backward
  kTemporaries = 6,           // everything else an op allocates (outputs, scratch)
  kWorkspaces = 7,            // libraries' scratch (cuBLAS workspaces)
  kCommunication = 8,         // collectives' buffers (FSDP2 all-gather / reduce-scatter, DDP)
  kKvCache = 9,               // a model's cache of attention keys and values (since 2.7)
};
inline constexpr int kAllocationRoleCount = 10;

// "unknown", "weights", "gradients", "optimizer_states", "optimizer_temporaries",
// "saved_activations", "temporaries", "workspaces", "communication", "kv_cache".
inline std::string_view AllocationRoleName(AllocationRole role) {
  switch (role) {
    case AllocationRole::kUnknown:
      return "unknown";
    case AllocationRole::kWeights:
      return "weights";
    case AllocationRole::kGradients:
      return "gradients";
    case AllocationRole::kOptimizerStates:
      return "optimizer_states";
    case AllocationRole::kOptimizerTemporaries:
      return "optimizer_temporaries";
    case AllocationRole::kSavedActivations:
      return "saved_activations";
    case AllocationRole::kTemporaries:
      return "temporaries";
    case AllocationRole::kWorkspaces:
      return "workspaces";
    case AllocationRole::kCommunication:
      return "communication";
    case AllocationRole::kKvCache:
      return "kv_cache";
  }
  return "unknown";
}

// The role of a tag record's value; nullopt for a value no role has (a damaged or newer log).
inline std::optional<AllocationRole> AllocationRoleOf(uint64_t value) {
  if (value >= static_cast<uint64_t>(kAllocationRoleCount)) return std::nullopt;
  return static_cast<AllocationRole>(value);
}

}  // namespace fragscope
