// HookList: each callback reaches, in the order of Add, exactly the hooks whose callbacks() name
// it; a hook that names none of them is never called; Stop asks only hooks that can stop.
#include "analysis/hook_list.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace fragscope {
namespace {

// Records "<name>.<callback>" for every call, into a log shared by all hooks of a test.
class RecordingHook final : public ReplayHooks {
 public:
  RecordingHook(std::string name, uint32_t wanted, std::vector<std::string>& log, bool stop = false)
      : name_(std::move(name)), wanted_(wanted), log_(log), stop_(stop) {}
  uint32_t callbacks() const override { return wanted_; }
  void OnTraceEvent(const TraceEvent&) override { log_.push_back(name_ + ".trace"); }
  void OnAllocatorEvent(const AllocatorEvent&) override { log_.push_back(name_ + ".alloc"); }
  void OnOpDone(const TraceEvent&) override { log_.push_back(name_ + ".done"); }
  void OnOom(const ReplayOom&) override { log_.push_back(name_ + ".oom"); }
  void OnFinish() override { log_.push_back(name_ + ".finish"); }
  bool Stop() const override {
    log_.push_back(name_ + ".stop");
    return stop_;
  }

 private:
  std::string name_;
  uint32_t wanted_;
  std::vector<std::string>& log_;
  bool stop_;
};

void CallEach(HookList& hooks) {
  const TraceEvent event;
  const AllocatorEvent allocator_event{};
  const ReplayOom oom;
  hooks.OnTraceEvent(event);
  hooks.OnAllocatorEvent(allocator_event);
  hooks.OnOpDone(event);
  hooks.OnOom(oom);
  hooks.OnFinish();
  (void)hooks.Stop();
}

TEST(HookListTest, EachCallbackReachesOnlyTheHooksThatNameIt) {
  std::vector<std::string> log;
  RecordingHook all("all", kHookAll, log);
  RecordingHook metrics("metrics", kHookAll & ~kHookStop, log);
  RecordingHook progress("progress", kHookOpDone, log);
  RecordingHook ooms("ooms", kHookOom | kHookFinish, log);
  RecordingHook silent("silent", 0, log);
  HookList hooks;
  for (ReplayHooks* h : std::vector<ReplayHooks*>{&all, &metrics, &progress, &ooms, &silent}) {
    hooks.Add(h);
  }
  CallEach(hooks);
  EXPECT_EQ(log,
            (std::vector<std::string>{"all.trace", "metrics.trace",  // OnTraceEvent
                                      "all.alloc", "metrics.alloc",  // OnAllocatorEvent
                                      "all.done", "metrics.done", "progress.done",    // OnOpDone
                                      "all.oom", "metrics.oom", "ooms.oom",           // OnOom
                                      "all.finish", "metrics.finish", "ooms.finish",  // OnFinish
                                      "all.stop"}));                                  // Stop
}

TEST(HookListTest, StopIsTrueWhenAnyStoppingHookSaysSo) {
  std::vector<std::string> log;
  RecordingHook first("first", kHookStop, log);
  RecordingHook second("second", kHookStop, log, /*stop=*/true);
  RecordingHook third("third", kHookStop, log, /*stop=*/true);
  HookList hooks;
  EXPECT_FALSE(hooks.Stop());  // no hooks: never stops
  hooks.Add(&first);
  EXPECT_FALSE(hooks.Stop());
  hooks.Add(&second);
  hooks.Add(&third);
  log.clear();
  EXPECT_TRUE(hooks.Stop());
  EXPECT_EQ(log, (std::vector<std::string>{"first.stop", "second.stop"}));  // stops at the first
}

TEST(HookListTest, DefaultHooksGetEveryCallback) {
  ReplayHooks plain;
  EXPECT_EQ(plain.callbacks(), kHookAll);
}

}  // namespace
}  // namespace fragscope
