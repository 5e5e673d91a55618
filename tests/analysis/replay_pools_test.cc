// Replay and verify of traces that use private pools: a CUDA-graph pool and a torch.cuda.MemPool.
//
// The traces are constructed, not recorded from PyTorch: fragscope's allocator runs a job that
// captures into a graph pool and allocates inside a MemPool under PyTorch 2.11's pool rules
// (allocator/README.md, "Private pools"), and its events are written as an .fslog (format 2.4,
// pool ids in word 7) and as a PyTorch snapshot (segment_pool_id on the segments, no pool on
// the trace entries, as 2.11 writes them). The job is built so that a replay that ignored the
// pools would diverge: the capture's first request would reuse a free default-pool block.
#include <memory>
#include <string>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "analysis/report/fslog_file_writer.h"
#include "analysis/sources/open_trace.h"
#include "analysis/sources/trace_event.h"
#include "fslog/fslog_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/analysis/command_run.h"
#include "tests/analysis/replay_verify_util.h"
#include "tests/testing/status_matchers.h"

namespace fragscope {
namespace {

using testing::SnapshotRecorder;
using testing::VerifyResult;

constexpr PoolId kGraph{1, 0};
constexpr PoolId kMemPool{0, 1};
constexpr uint64_t kCapacity = 1 * kGiB;

// Drops the pool ids of the events it forwards: what a log without them would say.
class PoolBlind final : public AllocatorObserver {
 public:
  explicit PoolBlind(AllocatorObserver& next) : next_(next) {}
  void OnEvent(const AllocatorEvent& event) override {
    AllocatorEvent e = event;
    e.pool_id = kDefaultPoolId;
    next_.OnEvent(e);
  }

 private:
  AllocatorObserver& next_;
};

// The job. `release_graph`: the graph is destroyed and the cache emptied before the end.
void RunJob(CachingAllocator& a, bool release_graph) {
  auto alloc = [&](uint64_t size, StreamId stream = 0) {
    absl::StatusOr<DevicePtr> p = a.Allocate(size, stream);
    EXPECT_OK(p.status());
    return p.ok() ? *p : 0;
  };
  const DevicePtr warm = alloc(4 * kMiB);  // a default-pool 20 MiB segment
  const DevicePtr keep = alloc(600 * kKiB);
  EXPECT_OK(a.Free(warm));
  // The capture, on the job's stream: a new segment in the graph pool, not the free block.
  EXPECT_OK(a.BeginAllocateToPool(kGraph, [](StreamId s) { return s == 0; }));
  const DevicePtr g1 = alloc(4 * kMiB);
  const DevicePtr g2 = alloc(2 * kMiB);
  const DevicePtr g3 = alloc(100 * kKiB);
  EXPECT_OK(a.Free(g1));
  const DevicePtr g4 = alloc(3 * kMiB);  // reuses g1's place inside the pool
  EXPECT_OK(a.Free(g3));
  EXPECT_OK(a.EndAllocateToPool(kGraph));
  // A MemPool region (use_mem_pool): its own 40 MiB segment.
  EXPECT_OK(a.CreateOrIncrefPool(kMemPool));
  EXPECT_OK(a.BeginAllocateToPool(kMemPool, [](StreamId) { return true; }));
  const DevicePtr m1 = alloc(30 * kMiB);
  const DevicePtr m2 = alloc(5 * kMiB);
  EXPECT_OK(a.Free(m1));
  EXPECT_OK(a.EndAllocateToPool(kMemPool));
  EXPECT_OK(a.ReleasePool(kMemPool));  // the context's use; the MemPool object keeps one
  // Back in the default pool: the warm block serves again.
  const DevicePtr d1 = alloc(4 * kMiB);
  EXPECT_OK(a.Free(d1));
  if (release_graph) {
    EXPECT_OK(a.Free(g2));
    EXPECT_OK(a.Free(g4));
    EXPECT_OK(a.ReleasePool(kGraph));
    a.EmptyCache();  // frees the graph pool's segment and the default pool's free one
    alloc(6 * kMiB);
  }
  EXPECT_OK(a.Free(m2));
  EXPECT_OK(a.Free(keep));
  alloc(1 * kMiB);
}

struct RecordedJob {
  std::string fslog;
  std::shared_ptr<const PyTorchSnapshot> snapshot;
  DeviceStats stats;
};

RecordedJob Record(const std::string& name, bool release_graph, bool pool_blind = false) {
  SimulatedBackend backend(kCapacity);
  CachingAllocator allocator(backend, AllocatorOptions());
  RecordedJob job;
  job.fslog = ::testing::TempDir() + "/" + name + ".fslog";
  FslogHeader header;
  header.device_total_bytes = kCapacity;
  header.device_name = "constructed";
  absl::StatusOr<std::unique_ptr<FslogFileWriter>> writer =
      FslogFileWriter::Open(job.fslog, header);
  EXPECT_OK(writer.status());
  if (!writer.ok()) return job;
  PoolBlind blind(**writer);
  SnapshotRecorder recorder;
  allocator.AddObserver(pool_blind ? static_cast<AllocatorObserver*>(&blind) : writer->get());
  allocator.AddObserver(&recorder);
  RunJob(allocator, release_graph);
  allocator.RemoveObserver(&recorder);
  allocator.RemoveObserver(pool_blind ? static_cast<AllocatorObserver*>(&blind) : writer->get());
  EXPECT_OK((*writer)->Close());
  EXPECT_OK(allocator.CheckInvariants());
  job.snapshot = testing::MakeSnapshot(allocator, recorder, "");
  job.stats = allocator.GetStats();
  return job;
}

TEST(ReplayPoolsTest, FslogWithAGraphPoolAndAMemPoolVerifiesFaithfully) {
  const RecordedJob job = Record("pools", /*release_graph=*/true);
  VerifyResult r = testing::VerifyFile(job.fslog, kCapacity);
  EXPECT_FALSE(r.divergence.has_value()) << testing::Describe(r);
  // Default 20 MiB and 2 MiB, the graph's 20 MiB and 2 MiB, the MemPool's 30 MiB and 20 MiB, the
  // last 6 MiB; freed by empty_cache: the graph pool's two and the free default 20 MiB.
  EXPECT_EQ(r.counts.segment_allocs, 7u);
  EXPECT_EQ(r.counts.segment_frees, 3u);
  testing::ExpectSameStats(r.stats, job.stats);
}

TEST(ReplayPoolsTest, TheSameLogWithoutPoolIdsDiverges) {
  const RecordedJob job = Record("blind", /*release_graph=*/true, /*pool_blind=*/true);
  VerifyResult r = testing::VerifyFile(job.fslog, kCapacity);
  ASSERT_TRUE(r.divergence.has_value());
  // The capture's first request reuses the free default block instead of a new segment.
  EXPECT_THAT(r.divergence->expected, ::testing::HasSubstr("segment_alloc"));
}

TEST(ReplayPoolsTest, SnapshotSegmentPoolIdsRouteTheTraceIntoItsPools) {
  // The graph is alive when the snapshot is taken: its two segments carry segment_pool_id (1, 0),
  // and the MemPool's two (0, 1); the entries themselves carry no pool.
  const RecordedJob job = Record("pools_snapshot", /*release_graph=*/false);
  int private_segments = 0;
  for (const SnapshotSegment& s : job.snapshot->segments) {
    private_segments += s.pool_id != std::make_pair(int64_t{0}, int64_t{0});
  }
  EXPECT_EQ(private_segments, 4);
  VerifyResult r = testing::VerifySnapshot(job.snapshot, kCapacity);
  EXPECT_FALSE(r.divergence.has_value()) << testing::Describe(r);
  EXPECT_EQ(r.counts.segment_allocs, 6u);
}

// Snapshots recorded from PyTorch 2.11 on an H100 (tests/data/oracle/pools/README.md).
constexpr uint64_t kH100Bytes = 85017493504;

std::shared_ptr<const PyTorchSnapshot> LoadOracle(const std::string& name, bool drop_pools) {
  absl::StatusOr<PyTorchSnapshot> snapshot =
      ReadPyTorchSnapshotFile(std::string(FRAGSCOPE_TEST_DATA_DIR) + "/oracle/pools/" + name);
  EXPECT_OK(snapshot.status());
  if (!snapshot.ok()) return nullptr;
  if (drop_pools) {
    for (SnapshotSegment& s : snapshot->segments) s.pool_id = {0, 0};
  }
  return std::make_shared<const PyTorchSnapshot>(std::move(*snapshot));
}

// A CUDA-graph pool shared by two graphs, torch.compile's graph trees, and a MemPool dumped while
// it lives (its segments name the pool; tests/data/oracle/pools/README.md).
TEST(ReplayPoolsTest, RecordedPrivatePoolSnapshotsVerifyFaithfully) {
  const struct {
    const char* name;
    uint64_t allocations;
  } traces[] = {{"graph_pool.pickle", 55}, {"compile_ro.pickle", 182}, {"mempool_live.pickle", 8}};
  for (const auto& [name, allocations] : traces) {
    SCOPED_TRACE(name);
    std::shared_ptr<const PyTorchSnapshot> snapshot = LoadOracle(name, false);
    ASSERT_NE(snapshot, nullptr);
    int private_segments = 0;
    for (const SnapshotSegment& s : snapshot->segments) {
      private_segments += s.pool_id != std::make_pair(int64_t{0}, int64_t{0});
    }
    EXPECT_GT(private_segments, 0);
    VerifyResult r = testing::VerifySnapshot(snapshot, kH100Bytes);
    EXPECT_FALSE(r.divergence.has_value()) << testing::Describe(r);
    EXPECT_EQ(r.counts.allocations, allocations);
    // Without the segments' pools the same trace diverges: the pools decide it.
    VerifyResult blind = testing::VerifySnapshot(LoadOracle(name, true), kH100Bytes);
    EXPECT_TRUE(blind.divergence.has_value());
  }
}

// The graph-pool and MemPool jobs observed (fragscope.observe on an H100): each event carries its
// pool, and the header says empty_cache calls are not recorded (torch.cuda.graph empties the
// cache on entry; the MemPool job empties it after dropping the pool): the replay infers them.
TEST(ReplayPoolsTest, RecordedObservedPoolLogsVerifyFaithfully) {
  for (const char* name : {"observed_graph_pool.fslog", "observed_mempool.fslog"}) {
    SCOPED_TRACE(name);
    const std::string path = std::string(FRAGSCOPE_TEST_DATA_DIR) + "/oracle/pools/" + name;
    absl::StatusOr<TraceOpener> opener = TraceOpener::Create(path);
    ASSERT_OK(opener.status());
    absl::StatusOr<std::unique_ptr<TraceSource>> source = opener->Open();
    ASSERT_OK(source.status());
    EXPECT_FALSE((*source)->info().records_empty_cache);
    int private_events = 0;
    TraceEvent event;
    for (;;) {
      absl::StatusOr<bool> more = (*source)->Next(&event);
      ASSERT_OK(more.status());
      if (!*more) break;
      private_events += event.pool_id != kDefaultPoolId;
    }
    EXPECT_GT(private_events, 10);
    VerifyResult r = testing::VerifyFile(path, kH100Bytes);
    EXPECT_FALSE(r.divergence.has_value()) << testing::Describe(r);
    EXPECT_GE(r.counts.allocations, 8u);
  }
}

// The sweep shows what the private pools held in each row; a setting fragscope does not model
// inside them (expandable segments) is that row's error, not the sweep's.
TEST(ReplayPoolsTest, SweepShowsThePrivatePools) {
  const std::string pickle =
      std::string(FRAGSCOPE_TEST_DATA_DIR) + "/oracle/pools/graph_pool.pickle";
  const testing::CommandRun text =
      testing::Fragscope({"sweep", pickle, "--capacity", std::to_string(kH100Bytes)});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, ::testing::HasSubstr("in pools"));
  EXPECT_THAT(text.out, ::testing::HasSubstr("expandable segments in CUDA-graph pools and MemPools "
                                             "are not modelled"));
  const testing::CommandRun json = testing::Fragscope(
      {"sweep", pickle, "--capacity", std::to_string(kH100Bytes), "--json", "-"});
  ASSERT_EQ(json.code, 0) << json.err;
  const nlohmann::json baseline = nlohmann::json::parse(json.out)["sweep"]["configs"][0];
  EXPECT_TRUE(baseline["is_trace_config"].get<bool>());
  EXPECT_GT(baseline["peak_private_pool_reserved_bytes"].get<uint64_t>(), 0u);
  EXPECT_LT(baseline["peak_private_pool_reserved_bytes"].get<uint64_t>(),
            baseline["peak_reserved_bytes"].get<uint64_t>());
  // A trace without private pools has no such column.
  const testing::CommandRun plain = testing::Fragscope(
      {"sweep", std::string(FRAGSCOPE_TEST_DATA_DIR) + "/oracle/micro_default.pickle", "--capacity",
       "150109880320"});
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_THAT(plain.out, ::testing::Not(::testing::HasSubstr("in pools")));
}

TEST(ReplayPoolsTest, DumpShowsThePoolIds) {
  const RecordedJob job = Record("pools_dump", /*release_graph=*/true);
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(job.fslog);
  ASSERT_OK(opener.status());
  std::unique_ptr<TraceSource> source = *opener->Open();
  int graph = 0, mempool = 0;
  TraceEvent e;
  while (*source->Next(&e)) {
    graph += e.pool_id == kGraph;
    mempool += e.pool_id == kMemPool;
  }
  // Graph: 2 segment allocs, 4 allocs, 4 frees requested and completed, 2 segment frees.
  EXPECT_EQ(graph, 2 + 4 + 2 * 4 + 2);
  // MemPool: 2 segment allocs, 2 allocs, 2 frees requested and completed.
  EXPECT_EQ(mempool, 2 + 2 + 2 * 2);
}

}  // namespace
}  // namespace fragscope
