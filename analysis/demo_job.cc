#include "analysis/demo_job.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"

namespace fragscope {

absl::StatusOr<DemoJobResult> RunDemoJob(const DemoWorkloadConfig& workload,
                                         const AllocatorOptions& options, uint64_t capacity_bytes,
                                         FslogFileWriter* log) {
  SimulatedBackend device(capacity_bytes);
  CachingAllocator allocator(device, options);
  if (log != nullptr) allocator.AddObserver(log);
  DemoJobResult result;
  absl::flat_hash_map<uint64_t, DevicePtr> live;
  std::string phase = "start";
  WorkloadPhase phase_kind = WorkloadPhase::kInit;
  uint64_t now_ns = 0;
  // Who holds each tensor, named in the log (Note [Context records]): ids interned here.
  absl::flat_hash_map<std::string, uint32_t> strings;
  absl::flat_hash_map<std::string, uint32_t> contexts;
  auto string_id = [&](const std::string& text) -> uint32_t {
    if (text.empty()) return 0;
    auto [it, inserted] = strings.try_emplace(text, static_cast<uint32_t>(strings.size() + 1));
    if (inserted) log->DefineString(it->second, text, now_ns);
    return it->second;
  };
  auto context_id = [&](const WorkloadHolder& h) {
    const std::string key =
        absl::StrCat(static_cast<int>(h.role), "\x1f", h.module, "\x1f", h.op, "\x1f", h.backward);
    auto [it, inserted] = contexts.try_emplace(key, static_cast<uint32_t>(contexts.size() + 1));
    if (inserted) {
      log->DefineContext({.id = it->second,
                          .role = static_cast<uint8_t>(h.role),
                          .backward = h.backward,
                          .module = string_id(h.module),
                          .op = string_id(h.op)},
                         now_ns);
    }
    return it->second;
  };
  for (const WorkloadOp& op : GenerateDemoWorkload(workload)) {
    now_ns += kDemoOpNs;
    ++result.ops;
    if (log != nullptr) log->set_time_ns(now_ns);
    if (op.kind == WorkloadOp::Kind::kMark) {
      // A forward after an optimizer step: one more step completed.
      if (op.phase == WorkloadPhase::kForward && phase_kind == WorkloadPhase::kOptimizer) {
        ++result.steps_completed;
      }
      phase = op.text;
      phase_kind = op.phase;
      if (log != nullptr) log->Mark(op.text, now_ns);
      continue;
    }
    if (op.kind == WorkloadOp::Kind::kFree) {
      auto it = live.find(op.id);
      if (it == live.end()) return absl::InternalError("demo workload frees an unknown tensor");
      if (absl::Status s = allocator.Free(it->second); !s.ok()) return s;
      live.erase(it);
      continue;
    }
    if (log != nullptr) log->set_alloc_context(context_id(op.holder));
    absl::StatusOr<DevicePtr> ptr = allocator.Allocate(op.bytes, 0);
    if (!ptr.ok()) {
      if (!absl::IsResourceExhausted(ptr.status())) return ptr.status();
      result.oom_phase = phase;
      result.oom_message = std::string(ptr.status().message());
      break;
    }
    live.emplace(op.id, *ptr);
  }
  if (result.oom_message.empty()) {
    result.completed = true;
    ++result.steps_completed;  // the last step has no following forward marker
  }
  const DeviceStats stats = allocator.GetStats();
  result.peak_reserved_bytes = static_cast<uint64_t>(stats.reserved_bytes[0].peak);
  result.peak_allocated_bytes = static_cast<uint64_t>(stats.allocated_bytes[0].peak);
  if (log != nullptr) {
    log->set_alloc_context(0);
    allocator.RemoveObserver(log);
  }
  return result;
}

}  // namespace fragscope
