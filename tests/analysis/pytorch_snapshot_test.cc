// Tests of the PyTorch snapshot model (analysis/sources/pytorch_snapshot.h): import with exact
// values, path-naming errors, legacy shapes, export with the keys memory_viz reads, and round
// trips.
#include "analysis/sources/pytorch_snapshot.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "analysis/sources/pickle/pickle_reader.h"
#include "analysis/sources/pickle/pickle_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/pickle_test_util.h"

namespace fragscope::testing {
namespace {

using pickle::PickleValue;
using ::testing::HasSubstr;

PyTorchSnapshot Load(const std::string& file) {
  absl::StatusOr<PyTorchSnapshot> s = ReadPyTorchSnapshotFile(DataPath("pickle/" + file));
  if (!s.ok()) throw std::runtime_error(std::string(s.status().message()));
  return *std::move(s);
}

constexpr uint64_t kSeg0 = 0x7f3a00000000;
constexpr int64_t kT0 = 1'700'000'000'000'000;

TEST(PyTorchSnapshotTest, ImportsSegmentsAndBlocksExactly) {
  const PyTorchSnapshot s = Load("snapshot.p4.pickle");
  ASSERT_EQ(s.segments.size(), 2u);
  const SnapshotSegment& seg = s.segments[0];
  EXPECT_EQ(seg.device, 0);
  EXPECT_EQ(seg.address, kSeg0);
  EXPECT_EQ(seg.total_size, 20971520u);
  EXPECT_EQ(seg.allocated_size, 8388608u);
  EXPECT_EQ(seg.active_size, 12582912u);
  EXPECT_EQ(seg.requested_size, 12000000u);
  EXPECT_EQ(seg.stream, 0);
  EXPECT_TRUE(seg.is_large);
  EXPECT_EQ(seg.pool_id, std::make_pair(int64_t{0}, int64_t{0}));
  EXPECT_FALSE(seg.is_expandable);
  ASSERT_NE(seg.frames, nullptr);
  ASSERT_EQ(seg.frames->size(), 3u);
  EXPECT_EQ((*seg.frames)[0], (SnapshotFrame{"??", 0, "at::native::empty_cuda"}));
  EXPECT_EQ((*seg.frames)[2], (SnapshotFrame{"/data/train.py", 42, "step"}));
  ASSERT_EQ(seg.blocks.size(), 3u);
  EXPECT_EQ(seg.blocks[0].address, kSeg0);
  EXPECT_EQ(seg.blocks[0].size, 8388608u);
  EXPECT_EQ(seg.blocks[0].requested_size, 8000000u);
  EXPECT_EQ(seg.blocks[0].state, BlockState::kActiveAllocated);
  EXPECT_EQ(seg.blocks[0].frames.get(), seg.frames.get());  // one shared stack
  EXPECT_EQ(seg.blocks[1].state, BlockState::kActivePendingFree);
  EXPECT_EQ(seg.blocks[1].address, kSeg0 + 8388608);
  EXPECT_EQ(seg.blocks[2].state, BlockState::kInactive);
  EXPECT_TRUE(seg.blocks[2].frames->empty());
  const SnapshotSegment& small = s.segments[1];
  EXPECT_EQ(small.device, 1);
  EXPECT_EQ(small.stream, 94'250'000'000'000);
  EXPECT_FALSE(small.is_large);
  EXPECT_EQ(small.pool_id, std::make_pair(int64_t{1}, int64_t{7}));
  EXPECT_TRUE(small.is_expandable);
  EXPECT_TRUE(CheckSnapshotInvariants(s).ok()) << CheckSnapshotInvariants(s);
}

TEST(PyTorchSnapshotTest, ImportsTracesSettingsAndAnnotationsExactly) {
  const PyTorchSnapshot s = Load("snapshot.p4.pickle");
  ASSERT_EQ(s.device_traces.size(), 2u);
  const auto& t0 = s.device_traces[0];
  ASSERT_EQ(t0.size(), 8u);
  const TraceAction actions[] = {TraceAction::kSegmentAlloc, TraceAction::kAlloc,
                                 TraceAction::kAlloc,        TraceAction::kFreeRequested,
                                 TraceAction::kSegmentMap,   TraceAction::kSegmentUnmap,
                                 TraceAction::kOom,          TraceAction::kSnapshot};
  for (size_t i = 0; i < t0.size(); ++i) {
    EXPECT_EQ(t0[i].action, actions[i]) << i;
    EXPECT_EQ(t0[i].time_us, kT0 + static_cast<int64_t>(i));
  }
  EXPECT_EQ(t0[1].addr, kSeg0);
  EXPECT_EQ(t0[1].size, 8000000u);
  EXPECT_EQ(t0[1].compile_context, "N/A");
  EXPECT_EQ(t0[1].user_metadata, "");
  EXPECT_EQ(t0[0].compile_context, std::nullopt);
  EXPECT_EQ(t0[6].device_free, 1048576u);  // oom
  EXPECT_EQ(t0[6].addr, 0u);
  EXPECT_EQ(t0[6].size, 1073741824u);
  EXPECT_EQ(t0[7].frames, nullptr);  // snapshot entry without 'frames'
  const auto& t1 = s.device_traces[1];
  ASSERT_EQ(t1.size(), 4u);
  EXPECT_EQ(t1[0].pool_id, std::make_pair(int64_t{1}, int64_t{7}));
  EXPECT_EQ(t1[0].stream, 94'250'000'000'000);
  EXPECT_EQ(t1[1].action, TraceAction::kFreeCompleted);
  EXPECT_EQ(t1[2].action, TraceAction::kSegmentFree);
  EXPECT_EQ(t1[3].action, TraceAction::kUnknown);
  EXPECT_EQ(t1[3].unknown_action, "future_action");

  ASSERT_TRUE(s.allocator_settings.has_value());
  const SnapshotAllocatorSettings& a = *s.allocator_settings;
  EXPECT_EQ(a.alloc_conf_key, "PYTORCH_CUDA_ALLOC_CONF");
  EXPECT_EQ(a.alloc_conf, "max_split_size_mb:128,roundup_power2_divisions:4");
  EXPECT_EQ(a.max_split_size, 134217728);
  EXPECT_EQ(a.garbage_collection_threshold, 0.8);
  EXPECT_EQ(a.expandable_segments, false);
  EXPECT_EQ(a.pinned_num_register_threads, 1);
  EXPECT_EQ(a.release_lock_on_cudamalloc, false);
  EXPECT_EQ(a.pinned_use_cuda_host_register, false);
  EXPECT_EQ(a.graph_capture_record_stream_reuse, std::nullopt);
  ASSERT_TRUE(a.roundup_power2_divisions.has_value());
  ASSERT_EQ(a.roundup_power2_divisions->size(), 16u);
  EXPECT_EQ((*a.roundup_power2_divisions)[2], std::make_pair(std::string("4"), int64_t{4}));
  EXPECT_EQ((*a.roundup_power2_divisions)[15], std::make_pair(std::string("32768"), int64_t{0}));
  EXPECT_EQ(pickle::DebugString(s.external_annotations),
            "[{'name': 'forward', 'stage': 'START', 'device': 0, 'time_us': 1700000000000000}, "
            "{'name': 'forward', 'stage': 'END', 'device': 0, 'time_us': 1700000000000009}]");
}

TEST(PyTorchSnapshotTest, ImportsTheSameModelFromEveryProtocolAndFromLibTorch) {
  const std::string expected = pickle::DebugString(SnapshotToPickle(Load("snapshot.p4.pickle")));
  for (const std::string file : {"snapshot.p2.pickle", "snapshot.p3.pickle", "snapshot.p5.pickle",
                                 "snapshot_jit.p2.pickle"}) {
    EXPECT_EQ(pickle::DebugString(SnapshotToPickle(Load(file))), expected) << file;
  }
}

TEST(PyTorchSnapshotTest, ErrorsNameThePath) {
  const auto error = [](const PickleValue& v) {
    return std::string(SnapshotFromPickle(v).status().message());
  };
  const auto block = [](PickleValue size, std::string state) {
    return D({{"size", size}, {"state", S(std::move(state))}});
  };
  const auto segment = [](PickleValue blocks) {
    return D({{"device", I(0)},
              {"address", I(4096)},
              {"total_size", I(512)},
              {"stream", I(0)},
              {"blocks", blocks}});
  };
  const PickleValue good = segment(L({block(I(512), "inactive")}));
  EXPECT_EQ(error(D({{"segments", L({good, segment(L({block(S("big"), "inactive")}))})}})),
            "segments[1].blocks[0].size: expected int, got str");
  EXPECT_EQ(error(D({{"segments", L({good, segment(L({block(I(-1), "inactive")}))})}})),
            "segments[1].blocks[0].size: expected an int >= 0, got -1");
  EXPECT_EQ(error(D({{"segments", L({segment(L({block(I(1), "gone")}))})}})),
            "segments[0].blocks[0].state: unknown block state 'gone'");
  EXPECT_EQ(error(D({{"segments", L({D({{"device", I(0)}})})}})),
            "segments[0]: missing key 'address'");
  EXPECT_EQ(error(I(3)), "<root>: expected dict, got int");
  EXPECT_EQ(error(D({})), "<root>: missing key 'segments'");
  EXPECT_EQ(error(D({{"segments", L({})},
                     {"device_traces", L({L({D({{"action", S("alloc")}, {"size", I(1)}})})})}})),
            "device_traces[0][0]: missing key 'addr'");
  EXPECT_EQ(error(D({{"segments", L({})},
                     {"device_traces", L({L({D({{"action", S("oom")}, {"size", I(1)}})})})}})),
            "device_traces[0][0]: missing key 'device_free'");
  EXPECT_EQ(
      error(D({{"segments", L({})}, {"allocator_settings", D({{"max_split_size", S("x")}})}})),
      "allocator_settings.max_split_size: expected int, got str");
  EXPECT_EQ(
      error(D({{"segments", L({segment(L({D({{"size", I(512)},
                                             {"state", S("inactive")},
                                             {"frames", L({D({{"filename", S("f")},
                                                              {"line", S("1")},
                                                              {"name", S("n")}})})}})}))})}})),
      "segments[0].blocks[0].frames[0].line: expected int, got str");
}

TEST(PyTorchSnapshotTest, BoundsTheWorkOfSharedSubtrees) {
  // 1000 references to one segment of 1000 blocks: a few KB of pickle, 10^6 typed blocks.
  PickleValue::Items blocks(1000, D({{"size", I(1)}, {"state", S("inactive")}}));
  const PickleValue seg = D({{"device", I(0)},
                             {"address", I(0)},
                             {"total_size", I(1000)},
                             {"stream", I(0)},
                             {"blocks", L(std::move(blocks))}});
  const PickleValue root = D({{"segments", L(PickleValue::Items(1000, seg))}});
  SnapshotImportOptions options;
  options.max_items = 100000;
  const absl::Status status = SnapshotFromPickle(root, options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(),
            "segments[99].blocks: snapshot has more than 100000 segments, blocks, trace entries "
            "and frames");
  EXPECT_TRUE(SnapshotFromPickle(root).ok());  // 10^6 is within the default
}

TEST(PyTorchSnapshotTest, ImportsLegacyShapes) {
  // PyTorch 2.0: blocks without addresses or frames but with 'history'; segments without the
  // size sums; a list root from torch.cuda.memory_snapshot().
  const PickleValue frames = L({D({{"filename", S("a.py")}, {"line", I(3)}, {"name", S("f")}})});
  const PickleValue blocks =
      L({D({{"size", I(1024)},
            {"state", S("active_allocated")},
            {"history", L({D({{"addr", I(4096)}, {"real_size", I(1000)}, {"frames", frames}})})}}),
         D({{"size", I(3072)}, {"state", S("active_awaiting_free")}})});
  const PickleValue seg = D({{"device", I(0)},
                             {"address", I(4096)},
                             {"total_size", I(4096)},
                             {"stream", I(0)},
                             {"blocks", blocks}});
  absl::StatusOr<PyTorchSnapshot> s = SnapshotFromPickle(L({seg}));
  ASSERT_TRUE(s.ok()) << s.status();
  const SnapshotSegment& out = s->segments[0];
  EXPECT_EQ(out.blocks[0].address, 4096u);
  EXPECT_EQ(out.blocks[0].requested_size, 1000u);
  ASSERT_NE(out.blocks[0].frames, nullptr);
  EXPECT_EQ((*out.blocks[0].frames)[0].filename, "a.py");
  EXPECT_EQ(out.blocks[1].address, 5120u);
  EXPECT_EQ(out.blocks[1].state, BlockState::kActivePendingFree);
  EXPECT_EQ(out.blocks[1].requested_size, 3072u);
  EXPECT_EQ(out.allocated_size, 1024u);
  EXPECT_EQ(out.active_size, 4096u);
  EXPECT_EQ(out.requested_size, 4072u);
  EXPECT_TRUE(s->device_traces.empty());
  EXPECT_FALSE(s->allocator_settings.has_value());
  EXPECT_TRUE(CheckSnapshotInvariants(*s).ok());
}

// Every key memory_viz reads (MemoryViz.js annotate_snapshot/process_alloc_data, _memory_viz.py
// segsum/trace) is in the export, frames included.
TEST(PyTorchSnapshotTest, ExportsTheKeysMemoryVizReads) {
  PyTorchSnapshot s = Load("snapshot.p4.pickle");
  s.device_traces[0][7].frames = nullptr;
  const PickleValue root = SnapshotToPickle(s);
  for (const char* key : {"segments", "device_traces", "allocator_settings"}) {
    EXPECT_NE(root.Find(key), nullptr) << key;
  }
  for (const PickleValue& seg : root.Find("segments")->items()) {
    for (const char* key : {"device", "address", "total_size", "allocated_size", "stream",
                            "segment_type", "frames", "blocks"}) {
      EXPECT_NE(seg.Find(key), nullptr) << key;
    }
    for (const PickleValue& b : seg.Find("blocks")->items()) {
      for (const char* key : {"address", "size", "requested_size", "state", "frames"}) {
        EXPECT_NE(b.Find(key), nullptr) << key;
      }
    }
  }
  for (const PickleValue& trace : root.Find("device_traces")->items()) {
    for (const PickleValue& e : trace.items()) {
      const bool oom = e.Find("action")->string_value() == "oom";
      EXPECT_NE(e.Find(oom ? "device_free" : "addr"), nullptr);
      for (const char* key : {"action", "size", "stream", "frames"}) {
        EXPECT_NE(e.Find(key), nullptr) << key;
      }
    }
  }
  EXPECT_EQ(pickle::DebugString(root.Find("device_traces")->items()[0].items()[7]),
            "{'action': 'snapshot', 'addr': 0, 'size': 12000000, 'stream': 0, 'time_us': "
            "1700000000000007, 'frames': []}");
}

TEST(PyTorchSnapshotTest, RoundTripsThroughAPickleFileKeepingStacksShared) {
  const PyTorchSnapshot s = Load("snapshot.p2.pickle");
  const std::string path = ::testing::TempDir() + "/snapshot_roundtrip.pickle";
  ASSERT_TRUE(WritePyTorchSnapshotFile(s, path).ok());
  const PyTorchSnapshot back = *ReadPyTorchSnapshotFile(path);
  std::remove(path.c_str());
  EXPECT_EQ(pickle::DebugString(SnapshotToPickle(back)), pickle::DebugString(SnapshotToPickle(s)));
  EXPECT_EQ(back.segments[0].frames.get(), back.device_traces[0][1].frames.get());
  // Shared stacks and repeated strings are written once.
  const std::string bytes = *pickle::WritePickle(SnapshotToPickle(s));
  const size_t first = bytes.find("/data/train.py");
  ASSERT_NE(first, std::string::npos);
  EXPECT_EQ(bytes.find("/data/train.py", first + 1), std::string::npos);
}

// With FRAGSCOPE_PICKLE_WRITER_OUT=DIR, writes DIR/snapshot_export.pickle for opening in
// memory_viz (`python -m torch.cuda._memory_viz stats|trace|trace_plot
// DIR/snapshot_export.pickle`).
TEST(PyTorchSnapshotTest, WritesAnExportForMemoryViz) {
  const char* dir = std::getenv("FRAGSCOPE_PICKLE_WRITER_OUT");
  if (dir == nullptr) GTEST_SKIP() << "set FRAGSCOPE_PICKLE_WRITER_OUT to write the file";
  ASSERT_TRUE(WritePyTorchSnapshotFile(Load("snapshot_jit.p2.pickle"),
                                       std::string(dir) + "/snapshot_export.pickle")
                  .ok());
}

TEST(PyTorchSnapshotTest, ChecksInvariantsOfBuiltSnapshots) {
  PyTorchSnapshot s;
  SnapshotSegment seg;
  seg.address = 0x1000;
  seg.total_size = 0x300;
  seg.blocks.push_back({0x1000, 0x100, 0x80, BlockState::kActiveAllocated, nullptr});
  seg.blocks.push_back({0x1100, 0x200, 0, BlockState::kInactive, nullptr});
  seg.allocated_size = 0x100;
  seg.active_size = 0x100;
  seg.requested_size = 0x80;
  s.segments.push_back(seg);
  EXPECT_TRUE(CheckSnapshotInvariants(s).ok());
  s.segments[0].blocks[1].address = 0x1200;
  EXPECT_THAT(CheckSnapshotInvariants(s).message(),
              HasSubstr("segments[0].blocks[1]: address 0x1200, expected 0x1100"));
  s.segments[0].blocks[1].address = 0x1100;
  s.segments[0].total_size = 0x400;
  EXPECT_THAT(CheckSnapshotInvariants(s).message(),
              HasSubstr("segments[0]: total_size is 1024 but its blocks sum to 768"));
  s.segments[0].total_size = 0x300;
  s.segments[0].allocated_size = 0;
  EXPECT_THAT(CheckSnapshotInvariants(s).message(), HasSubstr("allocated_size"));
}

TEST(PyTorchSnapshotTest, ReportsFileErrorsWithThePath) {
  const absl::StatusOr<PyTorchSnapshot> missing = ReadPyTorchSnapshotFile("/nonexistent/x.pickle");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  const absl::StatusOr<PyTorchSnapshot> bad =
      ReadPyTorchSnapshotFile(DataPath("pickle/bad_set.p4.pickle"));
  EXPECT_THAT(bad.status().message(), HasSubstr("bad_set.p4.pickle: pickle: unsupported opcode"));
  EXPECT_EQ(TraceActionName(TraceAction::kSegmentUnmap), "segment_unmap");
}

// A snapshot as PyTorch 2.11 writes it, pickled by Python at protocol 5 (FRAMEs, MEMOIZE): two
// devices' traces, every entry with compile_context and user_metadata, segment_map/unmap and an
// 'annotate' entry, kept as typed values.
TEST(PyTorchSnapshotTest, ImportsA211SnapshotAtProtocol5) {
  const PyTorchSnapshot s = Load("snapshot_211.p5.pickle");
  ASSERT_EQ(s.device_traces.size(), 2u);
  const auto& t0 = s.device_traces[0];
  ASSERT_EQ(t0.size(), 7u);
  EXPECT_EQ(t0[1].user_metadata, "");
  EXPECT_EQ(t0[1].compile_context, "N/A");
  EXPECT_EQ(t0[2].user_metadata, "stage 2");
  EXPECT_EQ(t0[3].compile_context, "Torch-Compiled Region: 0/1");
  EXPECT_EQ(t0[5].action, TraceAction::kAnnotate);
  EXPECT_EQ(t0[5].user_metadata, "checkpoint");
  EXPECT_EQ(t0[6].action, TraceAction::kOom);
  EXPECT_EQ(t0[6].device_free, uint64_t{1} << 20);
  const auto& t1 = s.device_traces[1];
  ASSERT_EQ(t1.size(), 5u);
  EXPECT_EQ(t1[0].action, TraceAction::kSegmentMap);
  EXPECT_EQ(t1[4].action, TraceAction::kSegmentUnmap);
  ASSERT_TRUE(s.allocator_settings.has_value());
  EXPECT_EQ(s.allocator_settings->graph_capture_record_stream_reuse, false);
  // Export keeps them (memory_viz shows user_metadata and compile_context per entry).
  absl::StatusOr<PyTorchSnapshot> back = SnapshotFromPickle(SnapshotToPickle(s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->device_traces[0][2].user_metadata, "stage 2");
  EXPECT_EQ(back->device_traces[0][3].compile_context, "Torch-Compiled Region: 0/1");
  EXPECT_EQ(back->device_traces[0][5].action, TraceAction::kAnnotate);
}

}  // namespace
}  // namespace fragscope::testing
