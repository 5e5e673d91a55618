#include "analysis/snapshot_call_sites.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace fragscope {
namespace {

// A hostile snapshot cannot make one site text unbounded (a report prints it per block).
constexpr size_t kMaxSiteBytes = 512;

bool IsPython(const SnapshotFrame& f) { return absl::EndsWith(f.filename, ".py"); }

// torch's own modules (an installed package or a source checkout), and Python's frozen modules.
bool IsLibrary(const SnapshotFrame& f) {
  return absl::StrContains(f.filename, "/torch/") || absl::StartsWith(f.filename, "torch/") ||
         absl::StartsWith(f.filename, "<frozen");
}

}  // namespace

const std::string& SnapshotCallSites::Text(uint32_t site) const {
  static const std::string kNone;
  return site == 0 || site > texts.size() ? kNone : texts[site - 1];
}

std::string CallSiteText(const std::vector<SnapshotFrame>& frames) {
  const SnapshotFrame* chosen = nullptr;
  for (const SnapshotFrame& f : frames) {
    if (IsPython(f) && !IsLibrary(f)) {
      chosen = &f;
      break;
    }
  }
  for (const SnapshotFrame& f : frames) {
    if (chosen == nullptr && IsPython(f)) chosen = &f;
  }
  if (chosen == nullptr && !frames.empty()) chosen = &frames.front();
  if (chosen == nullptr) return "";
  std::string text = absl::StrCat(chosen->filename, ":", chosen->line, " in ", chosen->name);
  if (text.size() > kMaxSiteBytes) text = absl::StrCat(text.substr(0, kMaxSiteBytes), "...");
  return text;
}

SnapshotCallSites CollectSnapshotCallSites(const PyTorchSnapshot& snapshot, size_t device) {
  SnapshotCallSites sites;
  if (device >= snapshot.device_traces.size()) return sites;
  absl::flat_hash_map<std::string, uint32_t> ids;
  absl::flat_hash_map<const std::vector<SnapshotFrame>*, uint32_t> by_stack;  // shared stacks
  auto intern = [&](const FrameStack& frames) -> uint32_t {
    if (frames == nullptr || frames->empty()) return 0;
    if (auto it = by_stack.find(frames.get()); it != by_stack.end()) return it->second;
    std::string text = CallSiteText(*frames);
    auto [it, added] = ids.emplace(text, static_cast<uint32_t>(sites.texts.size() + 1));
    if (added) sites.texts.push_back(std::move(text));
    by_stack.emplace(frames.get(), it->second);
    return it->second;
  };
  const std::vector<SnapshotTraceEntry>& trace = snapshot.device_traces[device];
  absl::flat_hash_map<uint64_t, size_t> last_alloc;  // address -> position
  for (size_t i = 0; i < trace.size(); ++i) {
    if (trace[i].action != TraceAction::kAlloc) continue;
    last_alloc[trace[i].addr] = i;
    if (const uint32_t site = intern(trace[i].frames); site != 0) sites.by_entry[i] = site;
  }
  for (const SnapshotSegment& segment : snapshot.segments) {
    if (segment.device != static_cast<int64_t>(device)) continue;
    for (const SnapshotBlock& block : segment.blocks) {
      if (block.state != BlockState::kActiveAllocated) continue;
      auto it = last_alloc.find(block.address);
      if (it == last_alloc.end() || sites.by_entry.contains(it->second)) continue;
      if (const uint32_t site = intern(block.frames); site != 0) sites.by_entry[it->second] = site;
    }
  }
  return sites;
}

}  // namespace fragscope
