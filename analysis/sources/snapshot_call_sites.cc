#include "analysis/sources/snapshot_call_sites.h"

#include <utility>

#include "absl/container/flat_hash_map.h"

namespace fragscope {

const std::string& SnapshotCallSites::Text(uint32_t site) const {
  static const std::string kNone;
  return site == 0 || site > texts.size() ? kNone : texts[site - 1];
}

SnapshotCallSites CollectSnapshotCallSites(const PyTorchSnapshot& snapshot, size_t device) {
  SnapshotCallSites sites;
  if (device >= snapshot.device_traces.size()) return sites;
  absl::flat_hash_map<std::string, uint32_t> ids;
  auto intern_text = [&](std::string text) -> uint32_t {
    if (text.empty()) return 0;
    auto [it, added] = ids.emplace(text, static_cast<uint32_t>(sites.texts.size() + 1));
    if (added) sites.texts.push_back(std::move(text));
    return it->second;
  };
  absl::flat_hash_map<const std::vector<SnapshotFrame>*, uint32_t> by_stack;  // shared stacks
  auto intern = [&](const FrameStack& frames) -> uint32_t {
    if (frames == nullptr || frames->empty()) return 0;
    if (auto it = by_stack.find(frames.get()); it != by_stack.end()) return it->second;
    const uint32_t site = intern_text(CallSiteText(*frames));
    by_stack.emplace(frames.get(), site);
    return site;
  };
  // The streamed read's ids (PyTorchSnapshot::call_sites) -> ours, as they are met.
  std::vector<uint32_t> streamed(snapshot.call_sites.size(), 0);
  auto from_stream = [&](uint32_t call_site) -> uint32_t {
    if (call_site == 0 || call_site > streamed.size()) return 0;
    uint32_t& site = streamed[call_site - 1];
    if (site == 0) site = intern_text(snapshot.call_sites[call_site - 1]);
    return site;
  };
  const std::vector<SnapshotTraceEntry>& trace = snapshot.device_traces[device];
  auto set = [&](size_t position, uint32_t site) {
    if (site == 0) return;
    if (sites.by_entry.empty()) sites.by_entry.resize(trace.size(), 0);
    sites.by_entry[position] = site;
  };
  absl::flat_hash_map<uint64_t, size_t> last_alloc;  // address -> position
  for (size_t i = 0; i < trace.size(); ++i) {
    if (trace[i].action != TraceAction::kAlloc) continue;
    last_alloc[trace[i].addr] = i;
    set(i, trace[i].frames != nullptr ? intern(trace[i].frames) : from_stream(trace[i].call_site));
  }
  for (const SnapshotSegment& segment : snapshot.segments) {
    if (segment.device != static_cast<int64_t>(device)) continue;
    for (const SnapshotBlock& block : segment.blocks) {
      if (block.state != BlockState::kActiveAllocated) continue;
      auto it = last_alloc.find(block.address);
      if (it == last_alloc.end() || sites.Site(it->second) != 0) continue;
      set(it->second, intern(block.frames));
    }
  }
  return sites;
}

}  // namespace fragscope
