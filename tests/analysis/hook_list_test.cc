// HookList: each callback reaches, in the order of Add, exactly the hooks whose callbacks() name
// it; a hook that names none of them is never called; Stop asks only hooks that can stop; its
// callbacks() is the union. Replayer::Run skips the per-event calls a hook does not name.
#include "analysis/replay/hook_list.h"

#include <algorithm>
#include <string>
#include <vector>

#include "analysis/replay/replay.h"
#include "gtest/gtest.h"
#include "tests/analysis/replay_verify_util.h"
#include "tests/analysis/trace_builder.h"
#include "tests/testing/status_matchers.h"

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

TEST(HookListTest, DefaultHooksGetEveryCallbackAndAListWantsTheUnion) {
  ReplayHooks plain;
  EXPECT_EQ(plain.callbacks(), kHookAll);
  std::vector<std::string> log;
  RecordingHook progress("progress", kHookOpDone, log);
  RecordingHook ooms("ooms", kHookOom | kHookFinish, log);
  HookList hooks;
  EXPECT_EQ(hooks.callbacks(), 0u);
  hooks.Add(&progress);
  hooks.Add(&ooms);
  EXPECT_EQ(hooks.callbacks(), kHookOpDone | kHookOom | kHookFinish);
}

TEST(HookListTest, ReplayCallsOnlyTheCallbacksAHookNames) {
  testing::TraceBuilder t(64 * kMiB);
  const DevicePtr a = t.Alloc(3 * kMiB);
  const DevicePtr b = t.Alloc(1000);
  t.Free(a);
  t.Free(b);
  const std::string path = t.Finish();
  for (const uint32_t wanted : {uint32_t{kHookOpDone}, uint32_t{kHookAll}}) {
    SCOPED_TRACE(wanted);
    ASSERT_OK_AND_ASSIGN(testing::LogReplay replay, testing::OpenReplay(path));  // the log's 64 MiB
    Replayer& replayer = *replay.replayer;
    std::vector<std::string> log;
    RecordingHook hook("h", wanted, log);
    ASSERT_OK(replayer.Run(&hook));
    const auto count = [&](const std::string& entry) {
      return std::count(log.begin(), log.end(), entry);
    };
    EXPECT_EQ(count("h.done"), 4);  // two allocations, two frees
    const bool all = wanted == kHookAll;
    EXPECT_EQ(count("h.trace") > 0, all);  // every record: allocs, frees, segment events
    EXPECT_EQ(count("h.stop"), count("h.trace"));
    EXPECT_EQ(count("h.alloc") > 0, all);  // the allocator's events
  }
}

}  // namespace
}  // namespace fragscope
