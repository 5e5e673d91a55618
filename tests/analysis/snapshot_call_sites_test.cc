// Call sites from a PyTorch snapshot's stacks (snapshot_call_sites.h): the frame chosen, the
// stacks of alloc entries and of the blocks still allocated, and the reports that show them.
#include "analysis/sources/snapshot_call_sites.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/analysis/command_run.h"
#include "tests/analysis/replay_verify_util.h"
#include "tests/analysis/trace_builder.h"

namespace fragscope {
namespace {

using testing::Fragscope;
using ::testing::HasSubstr;
using testing::MakeSnapshot;
using testing::SnapshotRecorder;
using testing::TempPath;

FrameStack Stack(std::vector<SnapshotFrame> frames) {
  return std::make_shared<const std::vector<SnapshotFrame>>(std::move(frames));
}

TEST(SnapshotCallSitesTest, NamesTheInnermostFrameOfTheUsersCode) {
  const SnapshotFrame cpp{"??", 0, "c10::cuda::CUDACachingAllocator::malloc"};
  const SnapshotFrame torch{"/usr/lib/python3/site-packages/torch/nn/modules/linear.py", 125,
                            "forward"};
  const SnapshotFrame user{"/home/me/model.py", 88, "forward"};
  const SnapshotFrame main{"train.py", 10, "<module>"};
  EXPECT_EQ(CallSiteText({cpp, torch, user, main}), "/home/me/model.py:88 in forward");
  EXPECT_EQ(CallSiteText({cpp, torch}), torch.filename + ":125 in forward");
  EXPECT_EQ(CallSiteText({cpp}), "??:0 in c10::cuda::CUDACachingAllocator::malloc");
  EXPECT_EQ(CallSiteText({}), "");
  const std::string long_name(5000, 'x');
  EXPECT_EQ(CallSiteText({{"a.py", 1, long_name}}).size(), 512u + 3);
}

// A 64 MiB device: eight 5 MiB blocks in two 20 MiB segments, every other one freed, and a
// 25 MiB request fails. The first block's alloc entry has a stack; the surviving blocks' stacks
// are the segments' (an OOM snapshot's), and one of them has none.
std::shared_ptr<PyTorchSnapshot> FragmentedSnapshot() {
  SimulatedBackend backend(64 * kMiB);
  CachingAllocator allocator(backend, AllocatorOptions{});
  SnapshotRecorder recorder;
  allocator.AddObserver(&recorder);
  std::vector<DevicePtr> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(*allocator.Allocate(5 * kMiB, 0));
  for (int i : {0, 2, 4, 6}) EXPECT_TRUE(allocator.Free(blocks[static_cast<size_t>(i)]).ok());
  EXPECT_FALSE(allocator.Allocate(25 * kMiB, 0).ok());
  auto snapshot = std::const_pointer_cast<PyTorchSnapshot>(MakeSnapshot(allocator, recorder, ""));
  for (SnapshotTraceEntry& e : snapshot->device_traces[0]) {
    if (e.action == TraceAction::kAlloc && e.addr == blocks[1]) {
      e.frames = Stack({{"/home/me/model.py", 12, "embed"}});
    }
  }
  for (SnapshotSegment& segment : snapshot->segments) {
    for (SnapshotBlock& block : segment.blocks) {
      if (block.state != BlockState::kActiveAllocated || block.address == blocks[7]) continue;
      block.frames = Stack(
          {{"/site-packages/torch/nn/functional.py", 2000, "linear"},
           {"/home/me/model.py", block.address == blocks[1] ? 13 : 40, "layer\n\x1b[31mred"}});
    }
  }
  return snapshot;
}

TEST(SnapshotCallSitesTest, EntriesTakeTheirOwnStackElseTheLiveBlocks) {
  std::shared_ptr<PyTorchSnapshot> snapshot = FragmentedSnapshot();
  const SnapshotCallSites sites = CollectSnapshotCallSites(*snapshot, 0);
  size_t own = 0, from_blocks = 0, with_site = 0;
  for (size_t entry = 0; entry < snapshot->device_traces[0].size(); ++entry) {
    const uint32_t site = sites.Site(entry);
    if (site == 0) continue;
    ++with_site;
    ASSERT_EQ(snapshot->device_traces[0][entry].action, TraceAction::kAlloc);
    const std::string& text = sites.Text(site);
    own += text == "/home/me/model.py:12 in embed";
    from_blocks += absl::StartsWith(text, "/home/me/model.py:40 in layer");
  }
  EXPECT_EQ(own, 1u);          // blocks[1]: its entry's own stack wins over its block's
  EXPECT_EQ(from_blocks, 2u);  // blocks[3] and [5]; blocks[7] has no stack
  EXPECT_EQ(with_site, 3u);
  EXPECT_EQ(sites.Site(snapshot->device_traces[0].size()), 0u);
  EXPECT_EQ(sites.Text(0), "");
  EXPECT_EQ(sites.Text(99), "");
}

// A streamed read (analyze's) gives every alloc entry the call site the whole read gives it.
TEST(SnapshotCallSitesTest, AStreamedReadGivesTheWholeReadsSites) {
  const std::string path = TempPath("streamed.pickle");
  ASSERT_TRUE(WritePyTorchSnapshotFile(*FragmentedSnapshot(), path).ok());
  absl::StatusOr<PyTorchSnapshot> whole = ReadPyTorchSnapshotFile(path);
  absl::StatusOr<PyTorchSnapshot> streamed = ReadPyTorchSnapshotForReplay(path);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  const SnapshotCallSites a = CollectSnapshotCallSites(*whole, 0);
  const SnapshotCallSites b = CollectSnapshotCallSites(*streamed, 0);
  size_t with_site = 0;
  for (size_t i = 0; i < whole->device_traces[0].size(); ++i) {
    EXPECT_EQ(b.Text(b.Site(i)), a.Text(a.Site(i))) << "entry " << i;
    with_site += a.Site(i) != 0;
  }
  EXPECT_EQ(with_site, 3u);
}

// The OOM explanation names each pinning block's call site: text (control characters escaped),
// JSON, and the viewer's layout.
TEST(SnapshotCallSitesTest, ReportsShowThePinningBlocksCallSites) {
  const std::string path = TempPath("oom.pickle");
  ASSERT_TRUE(WritePyTorchSnapshotFile(*FragmentedSnapshot(), path).ok());
  testing::CommandRun text = Fragscope({"analyze", path, "--capacity", "64MiB", "--no-sweep"});
  ASSERT_EQ(text.code, 0) << text.err;
  // `analyze` streams the entries (bounded memory) and keeps their call sites: blocks[1]'s entry
  // names its own, as the whole read does; the others their live blocks'.
  EXPECT_THAT(text.out, HasSubstr("at /home/me/model.py:12 in embed"));
  EXPECT_THAT(text.out, ::testing::Not(HasSubstr("model.py:13 in layer")));
  EXPECT_THAT(text.out, HasSubstr("at /home/me/model.py:40 in layer\\n\\x1b[31mred"));
  EXPECT_THAT(text.out, ::testing::Not(HasSubstr("\x1b")));
  testing::CommandRun json =
      Fragscope({"analyze", path, "--capacity", "64MiB", "--no-sweep", "--json", "-"});
  ASSERT_EQ(json.code, 0) << json.err;
  const nlohmann::json report = nlohmann::json::parse(json.out);
  const nlohmann::json& pinning = report["ranks"][0]["ooms"]["explained"][0]["pinning"];
  ASSERT_EQ(pinning.size(), 4u);
  size_t with_site = 0;
  for (const nlohmann::json& p : pinning) with_site += !p["site"].get<std::string>().empty();
  EXPECT_EQ(with_site, 3u);
}

}  // namespace
}  // namespace fragscope
