// HookList: fans one replay's callbacks out to several ReplayHooks (metrics, OOM explanations,
// fidelity, progress), in the order they were added.
#pragma once

#include <vector>

#include "analysis/replay.h"

namespace fragscope {

class HookList final : public ReplayHooks {
 public:
  void Add(ReplayHooks* hooks) { hooks_.push_back(hooks); }
  void OnTraceEvent(const TraceEvent& e) override {
    for (ReplayHooks* h : hooks_) h->OnTraceEvent(e);
  }
  void OnAllocatorEvent(const AllocatorEvent& e) override {
    for (ReplayHooks* h : hooks_) h->OnAllocatorEvent(e);
  }
  void OnOpDone(const TraceEvent& e) override {
    for (ReplayHooks* h : hooks_) h->OnOpDone(e);
  }
  void OnOom(const ReplayOom& oom) override {
    for (ReplayHooks* h : hooks_) h->OnOom(oom);
  }
  void OnFinish() override {
    for (ReplayHooks* h : hooks_) h->OnFinish();
  }
  bool Stop() const override {
    for (const ReplayHooks* h : hooks_) {
      if (h->Stop()) return true;
    }
    return false;
  }

 private:
  std::vector<ReplayHooks*> hooks_;
};

}  // namespace fragscope
