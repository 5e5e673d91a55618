// Replayer: rebuilding the segments and blocks that existed before the trace's first event.
// See Note [State before the trace] in replay.h.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "allocator/format_size.h"
#include "allocator/size_policy.h"
#include "analysis/replay/replay.h"

namespace fragscope {
namespace {

// Why `seg`'s blocks cannot be rebuilt as recorded (a damaged snapshot: a block larger than its
// segment, blocks that overlap), or "" when they lie in it in address order.
std::string BadLayout(const InitialSegment& seg) {
  if (seg.address + seg.size < seg.address) return "it ends past the last address (2^64)";
  DevicePtr at = seg.address;
  for (const InitialBlock& b : seg.allocated) {
    if (b.size == 0 || b.address < at || b.address + b.size < b.address ||
        b.address + b.size > seg.address + seg.size) {
      return absl::StrFormat(
          "its allocated block at 0x%x of %d bytes does not lie in it after the blocks before "
          "it (the segment ends at 0x%x)",
          b.address, b.size, seg.address + seg.size);
    }
    at = b.address + b.size;
  }
  return "";
}

}  // namespace

void Replayer::BuildInitialState() {
  const std::vector<InitialSegment>& segments = source_.info().initial_segments;
  if (segments.empty()) return;
  if (source_.info().expandable_segments) {
    uint64_t bytes = 0;
    size_t blocks = 0;
    for (const InitialSegment& seg : segments) {
      bytes += seg.size;
      blocks += seg.allocated.size();
    }
    Warn(absl::StrFormat(
        "%d segments or mapped ranges (%s, %d allocated blocks) existed before the trace began; "
        "rebuilding that state is not supported for a trace that uses expandable segments, so "
        "the replay starts without it: its reserved memory and layouts leave those bytes out",
        segments.size(), FormatSize(bytes), blocks));
    return;
  }
  std::vector<DevicePtr> gaps;
  // Segments that do not fit the device's free memory: refused without asking the allocator,
  // whose out-of-memory path walks every segment (once per refusal, it would make the rebuild
  // quadratic); said once, with their count.
  uint64_t unfit_segments = 0;
  uint64_t unfit_bytes = 0;
  for (const InitialSegment& seg : segments) {
    if (const std::string bad = BadLayout(seg); !bad.empty()) {
      Warn(absl::StrFormat(
          "the segment at 0x%x (%d bytes) that existed before the trace is not rebuilt: %s; the "
          "replay's reserved memory and layouts leave it out",
          seg.address, seg.size, bad));
      continue;
    }
    const bool small = seg.pool == PoolKind::kSmall;
    const uint64_t request = small ? kSmallSizeBytes : seg.size;
    if (SegmentSizeFor(RoundSize(request, AllocatorOptions()), AllocatorOptions()) >
        backend_->MemInfo().free_bytes) {
      ++unfit_segments;
      unfit_bytes += seg.size;
      continue;
    }
    if (config_.script_addresses) backend_->ScriptAddresses({seg.address});
    if (!seg.pool_id.is_default()) EnsurePool(seg.pool_id);
    absl::StatusOr<DevicePtr> whole = allocator_->Allocate(request, seg.stream, seg.pool_id);
    ++initial_state_allocations_;
    backend_->ScriptAddresses({});
    if (!whole.ok()) {
      Warn(
          absl::StrFormat("could not rebuild the segment at 0x%x (%s) that existed before the "
                          "trace: %s",
                          seg.address, FormatSize(seg.size), whole.status().message()));
      continue;
    }
    (void)allocator_->Free(*whole);
    const DevicePtr base = *whole;
    // Pieces in address order: allocated blocks and the free gaps between them.
    DevicePtr at = seg.address;
    auto carve = [&](uint64_t size, bool gap, const InitialBlock* block) {
      absl::StatusOr<DevicePtr> p = allocator_->Allocate(size, seg.stream, seg.pool_id);
      ++initial_state_allocations_;
      if (!p.ok()) {
        Warn(absl::StrFormat("could not rebuild a block of %s in the segment at 0x%x: %s",
                             FormatSize(size), seg.address, p.status().message()));
        return;
      }
      if (*p != base + (at - seg.address)) {
        Warn(
            absl::StrFormat("the pre-trace layout of the segment at 0x%x could not be rebuilt "
                            "exactly (a block of %s landed elsewhere)",
                            seg.address, FormatSize(size)));
      }
      if (gap) {
        gaps.push_back(*p);
      } else {
        LiveBlock live;
        live.ours = *p;
        live.origin.phase = PhaseTable::kBefore;
        live.origin.before_trace = true;
        *live_.TryEmplace(block->address, live).first = live;
      }
    };
    // A free gap is carved in pieces its pool serves: small-pool requests are <= 1 MiB, while a
    // small segment's gap can be larger. The pieces merge again when the gaps are freed.
    auto carve_gap = [&](DevicePtr end) {
      while (at < end) {
        const uint64_t piece = small ? std::min<uint64_t>(end - at, kSmallSizeBytes) : end - at;
        carve(piece, /*gap=*/true, nullptr);
        at += piece;
      }
    };
    for (const InitialBlock& b : seg.allocated) {
      carve_gap(b.address);
      // The caller's request where it rounds to the block (the same block, and requested_bytes
      // right); else the block's size (an unsplit remainder: requested is overstated by it).
      const bool request_fits = b.requested_bytes > 0 && b.requested_bytes <= b.size &&
                                RoundSize(b.requested_bytes, AllocatorOptions()) == b.size;
      carve(request_fits ? b.requested_bytes : b.size, /*gap=*/false, &b);
      at = b.address + b.size;
    }
    carve_gap(seg.address + seg.size);
  }
  for (DevicePtr gap : gaps) (void)allocator_->Free(gap);
  if (unfit_segments > 0) {
    Warn(absl::StrFormat(
        "%d segments (%s) that existed before the trace were not rebuilt: they do not fit the "
        "%s device%s; the replay's reserved memory and layouts leave them out",
        unfit_segments, FormatSize(unfit_bytes), FormatSize(config_.capacity_bytes),
        source_.info().capacity_bytes == 0 ? " assumed (give the device's own with --capacity)"
                                           : ""));
  }
}

}  // namespace fragscope
