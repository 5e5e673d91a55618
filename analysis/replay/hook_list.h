// HookList: fans one replay's callbacks out to several ReplayHooks (metrics, OOM explanations,
// fidelity, progress), in the order they were added, each only to the hooks whose callbacks()
// name it: a replay calls OnTraceEvent, OnOpDone, Stop and OnAllocatorEvent for every event, and
// most hooks act on one or two of them.
#pragma once

#include <vector>

#include "analysis/replay/replay.h"

namespace fragscope {

class HookList final : public ReplayHooks {
 public:
  // The union of the hooks' callbacks: a replay skips the per-event calls nobody wants.
  uint32_t callbacks() const override { return wanted_; }
  void Add(ReplayHooks* hooks) {
    const uint32_t wanted = hooks->callbacks();
    wanted_ |= wanted;
    if ((wanted & kHookTraceEvent) != 0) trace_event_.push_back(hooks);
    if ((wanted & kHookAllocatorEvent) != 0) allocator_event_.push_back(hooks);
    if ((wanted & kHookOpDone) != 0) op_done_.push_back(hooks);
    if ((wanted & kHookOom) != 0) oom_.push_back(hooks);
    if ((wanted & kHookFinish) != 0) finish_.push_back(hooks);
    if ((wanted & kHookStop) != 0) stop_.push_back(hooks);
  }
  void OnTraceEvent(const TraceEvent& e) override {
    for (ReplayHooks* h : trace_event_) h->OnTraceEvent(e);
  }
  void OnAllocatorEvent(const AllocatorEvent& e) override {
    for (ReplayHooks* h : allocator_event_) h->OnAllocatorEvent(e);
  }
  void OnOpDone(const TraceEvent& e) override {
    for (ReplayHooks* h : op_done_) h->OnOpDone(e);
  }
  void OnOom(const ReplayOom& oom) override {
    for (ReplayHooks* h : oom_) h->OnOom(oom);
  }
  void OnFinish() override {
    for (ReplayHooks* h : finish_) h->OnFinish();
  }
  bool Stop() const override {
    for (const ReplayHooks* h : stop_) {
      if (h->Stop()) return true;
    }
    return false;
  }

 private:
  uint32_t wanted_ = 0;
  // One list per callback, each in the order of Add.
  std::vector<ReplayHooks*> trace_event_, allocator_event_, op_done_, oom_, finish_, stop_;
};

}  // namespace fragscope
