// Demand: the bytes a trace's own requests hold, as if every request had been granted.
//
// Note [Demand]
// A job's demand at a moment is the sum of its live requests, each rounded as PyTorch rounds a
// request under its default settings (512-byte multiples: no setting packs blocks tighter), from
// the trace's own allocs and frees — not the replay's, so the figure does not depend on any
// allocator setting or cap. A request the job was refused (an OOM record) counts at its moment:
// the job needed it then. The demand peak is what perfect packing would need; when it exceeds
// what the job may use (the cap, else the device, less the memory held outside PyTorch), no
// allocator setting can save the job, whatever its first OOM looks like: a prediction of a job
// that needs 2.8x the GPU fails at a first OOM that may leave room, and a sweep row that gets
// past it only moves the failure. A trace that ends at its first OOM shows its demand only up to
// there; a prediction (or a job that went on) shows the whole step.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "analysis/replay/replay.h"
#include "analysis/sources/trace_event.h"
#include "fslog/allocation_role.h"

namespace fragscope {

// Live bytes by AllocationRole (index: the role's value).
using RoleBytes = std::array<uint64_t, kAllocationRoleCount>;

// One part of a memory figure: a role's live bytes, or an estimator term.
struct DemandTerm {
  std::string name;
  uint64_t bytes = 0;
};

// `terms` sorted largest first (ties keep their order).
std::vector<DemandTerm> LargestFirst(std::vector<DemandTerm> terms);
// The roles that hold bytes, largest first; roles that hold nothing are left out.
std::vector<DemandTerm> RoleTerms(const RoleBytes& roles);
// The first `most` terms in words: "weights 100.00 MiB, optimizer_states 60.00 MiB".
std::string TermsText(const std::vector<DemandTerm>& terms, size_t most = SIZE_MAX);

struct DemandPeak {
  uint64_t bytes = 0;
  uint64_t event_index = 0;  // the event at which the peak was reached
  uint64_t time_ns = 0;
  std::string phase;             // the marker in effect ("" before the first)
  bool refused_request = false;  // the peak includes a request the job was refused (its OOM)
  // The live requests by role at the peak (a refused request counts as unknown); all unknown
  // for a log without tag records.
  RoleBytes roles{};
  // ... and by the module that allocated them (.fslog 2.6 contexts), as LiveModules lists them;
  // empty when no live block names a module.
  std::vector<DemandTerm> modules;
};

struct DemandSummary {
  DemandPeak peak;
  // The largest memory the trace shows held outside PyTorch (an OOM record's device total -
  // free - reserved, else the log header's at open); 0 when it shows none.
  uint64_t outside_bytes = 0;
  uint64_t refused_requests = 0;  // the trace's OOM records
  bool has_roles = false;         // the trace tags its blocks (.fslog 2.5 tag records)
};

// Note [Peaks by module]
// The demand's peak and each marker phase's are split by module exactly, at O(1) per event: from
// the moment of the latest peak, the first change of each context's live bytes saves the
// context's bytes then (an undo log, ContextsAt, cleared at every new peak); the peak's bytes by
// context are today's with the saved ones put back, O(contexts), once per phase and at the end.
// A tag that moves a block to another context while the live bytes equal the peak (the states an
// optimizer makes, tagged once they are all made) belongs to that peak, as its roles do.

// A replay hook that follows the trace's requests (Note [Demand]). O(live blocks).
class DemandCollector final : public ReplayHooks {
 public:
  // `info`: the trace's, with the state before its first event (initial_segments' blocks are
  // live from the start).
  explicit DemandCollector(const TraceInfo& info);

  uint32_t callbacks() const override { return kHookTraceEvent | kHookFinish; }
  void OnTraceEvent(const TraceEvent& event) override;
  void OnFinish() override;

  const DemandSummary& summary() const { return summary_; }
  uint64_t live_bytes() const { return live_; }
  // The live bytes by role now; they sum to live_bytes().
  const RoleBytes& live_roles() const { return roles_; }
  // The live bytes by the module that allocated them (.fslog 2.6 contexts), largest first: the
  // first `most` modules, then "(N other modules)" and "(no module)" rows; they sum to
  // live_bytes(). Empty when no live block names a module. O(contexts).
  std::vector<DemandTerm> LiveModules(size_t most) const;

  // Modules listed by name at the peak and at each OOM (the rest summed).
  static constexpr size_t kModulesShown = 8;
  // ... and kept for each marker phase's peak (for `diff`'s module changes).
  static constexpr size_t kPhaseModulesKept = 32;

  // The live requests by module at the peak of the marker phase that the last marker ended (after
  // OnFinish: of the last phase), as LiveModules lists them (kPhaseModulesKept). Note [Peaks by
  // module].
  const std::vector<DemandTerm>& ended_phase_modules() const { return ended_phase_modules_; }

 private:
  struct LiveBlock {
    uint64_t bytes = 0;  // the rounded request
    AllocationRole role = AllocationRole::kUnknown;
    const BlockContext* context = nullptr;
  };
  struct Moment {
    uint64_t index = 0;
    uint64_t time_ns = 0;
    DevicePtr ptr = 0;  // the alloc's block
  };
  void Raise(uint64_t bytes, const Moment& at, bool refused, uint64_t refused_bytes = 0);
  void Drop(const LiveBlock& block);
  void ApplyTag(const TraceEvent& tag);
  // The bytes by context at a past moment, as an undo log over by_context_ (Note [Peaks by
  // module]).
  struct ContextsAt {
    absl::flat_hash_map<const BlockContext*, uint64_t> saved;  // the bytes then, of those changed
    void Now() { saved.clear(); }                              // the moment is now
    absl::flat_hash_map<const BlockContext*, uint64_t> Of(
        const absl::flat_hash_map<const BlockContext*, uint64_t>& now) const;
  };
  // The live bytes of `context` change by `delta` (both undo logs first save its bytes).
  void ChangeContext(const BlockContext* context, int64_t delta);
  void EndPhase();

  absl::flat_hash_map<DevicePtr, LiveBlock> live_blocks_;  // address -> its request and role
  uint64_t live_ = 0;
  RoleBytes roles_{};
  std::optional<Moment> pending_;  // an alloc whose peak waits for the tag that may follow it
  // Live bytes by context now (only for blocks that have one), and at the demand's peak and the
  // current phase's (Note [Peaks by module]).
  absl::flat_hash_map<const BlockContext*, uint64_t> by_context_;
  ContextsAt at_peak_;
  ContextsAt at_phase_peak_;
  uint64_t phase_peak_ = 0;
  std::vector<DemandTerm> ended_phase_modules_;
  std::string phase_;
  DemandSummary summary_;
};

// The rounded request an alloc (or OOM) event stands for: RoundSize of the caller's request under
// PyTorch's default settings, the block's size where the request is not recorded.
uint64_t DemandBytes(const TraceEvent& event);

}  // namespace fragscope
