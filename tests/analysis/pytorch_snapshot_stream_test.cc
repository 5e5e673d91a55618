// Tests of the streamed snapshot read for replay (ReadPyTorchSnapshotForReplay,
// pickle::ReadPickleStreaming): the same snapshot as the whole read, less the trace entries'
// frames, whose call sites it keeps; elements handed over as they are appended; layouts that
// cannot be streamed read whole.
#include <string>
#include <vector>

#include "analysis/sources/pickle/pickle_reader.h"
#include "analysis/sources/pickle/pickle_writer.h"
#include "analysis/sources/pytorch_snapshot.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/pickle_test_util.h"

namespace fragscope::testing {
namespace {

using pickle::PickleValue;
using ::testing::HasSubstr;

// The snapshot as the exporter writes it, which is how two snapshots are compared here.
std::string Text(const PyTorchSnapshot& s) { return pickle::DebugString(SnapshotToPickle(s)); }

TEST(PyTorchSnapshotStreamTest, EqualsTheWholeReadWithoutTheEntriesFrames) {
  for (const char* name :
       {"snapshot.p2.pickle", "snapshot.p3.pickle", "snapshot.p4.pickle", "snapshot.p5.pickle",
        "snapshot_jit.p2.pickle", "snapshot_211.p5.pickle"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<PyTorchSnapshot> whole =
        ReadPyTorchSnapshotFile(DataPath(std::string("pickle/") + name));
    ASSERT_TRUE(whole.ok()) << whole.status();
    absl::StatusOr<PyTorchSnapshot> streamed =
        ReadPyTorchSnapshotForReplay(DataPath(std::string("pickle/") + name));
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    ASSERT_EQ(streamed->device_traces.size(), whole->device_traces.size());
    for (auto& trace : whole->device_traces) {
      for (SnapshotTraceEntry& e : trace) e.frames = nullptr;
    }
    for (const auto& trace : streamed->device_traces) {
      for (const SnapshotTraceEntry& e : trace) EXPECT_EQ(e.frames, nullptr);
    }
    EXPECT_EQ(Text(*streamed), Text(*whole));
  }
}

// A consumer that counts what it is handed.
class Counter final : public pickle::PickleListConsumer {
 public:
  absl::Status Element(size_t list, size_t index, const pickle::StreamValue& element,
                       pickle::StreamItems items, pickle::StreamContents& /*contents*/) override {
    if (list >= counts.size()) counts.resize(list + 1);
    EXPECT_EQ(index, counts[list]);
    EXPECT_EQ(element.kind, pickle::PickleKind::kDict);
    for (const auto& [key, value] : items) {
      if (key.text == "size") sizes.push_back(value.int_value);
    }
    ++counts[list];
    return absl::OkStatus();
  }
  std::vector<size_t> counts;
  std::vector<int64_t> sizes;
};

// 2500 entries on device 0 (three APPENDS batches), one on device 1 (an APPEND), each with a
// frames list of its own; the inner lists come out empty, and are found by identity.
TEST(PyTorchSnapshotStreamTest, HandsOverEveryElementAndLeavesTheListsEmpty) {
  const PickleValue frame = D({{"filename", S("a.py")}, {"line", I(1)}, {"name", S("f")}});
  PickleValue::Items trace0;
  for (int i = 0; i < 2500; ++i) {
    trace0.push_back(D({{"action", S("alloc")},
                        {"addr", I(0x7f0000000000 + 512 * i)},
                        {"size", I(512 + i)},
                        {"frames", L({frame, frame})}}));
  }
  const PickleValue trace1 = L({D({{"action", S("alloc")}, {"addr", I(1)}, {"size", I(7)}})});
  const PickleValue root = D({{"segments", L({})},
                              {"device_traces", L({L(trace0), trace1})},
                              {"external_annotations", L({})}});
  for (const int protocol : {2, 4}) {
    SCOPED_TRACE(protocol);
    absl::StatusOr<std::string> bytes = pickle::WritePickle(root, {.protocol = protocol});
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    Counter counter;
    absl::StatusOr<pickle::StreamedPickle> streamed =
        pickle::ReadPickleStreaming(*bytes, "device_traces", counter);
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    EXPECT_EQ(counter.counts, (std::vector<size_t>{2500, 1}));
    ASSERT_EQ(counter.sizes.size(), 2501u);
    EXPECT_EQ(counter.sizes[2499], 512 + 2499);
    EXPECT_EQ(counter.sizes[2500], 7);
    const PickleValue* traces = streamed->root.Find("device_traces");
    ASSERT_NE(traces, nullptr);
    ASSERT_EQ(traces->items().size(), 2u);
    for (size_t d = 0; d < 2; ++d) {
      EXPECT_TRUE(traces->items()[d].items().empty());
      ASSERT_TRUE(streamed->lists.contains(traces->items()[d].identity()));
      EXPECT_EQ(streamed->lists.at(traces->items()[d].identity()), d);
    }
    absl::StatusOr<PyTorchSnapshot> snapshot =
        ReadPyTorchSnapshotBytesForReplay(*bytes, "built.pickle");
    ASSERT_TRUE(snapshot.ok()) << snapshot.status();
    ASSERT_EQ(snapshot->device_traces.size(), 2u);
    EXPECT_EQ(snapshot->device_traces[0].size(), 2500u);
    EXPECT_EQ(snapshot->device_traces[0][2499].addr, uint64_t{0x7f0000000000} + 512 * 2499);
    EXPECT_EQ(snapshot->device_traces[1][0].size, 7u);
  }
}

// One entry dict twice in a trace (a memo reference): streaming refuses to hand it over again,
// and the snapshot is read whole instead, with both entries.
TEST(PyTorchSnapshotStreamTest, ReadsWholeWhatCannotBeStreamed) {
  const PickleValue entry = D({{"action", S("alloc")}, {"addr", I(16)}, {"size", I(512)}});
  const PickleValue root = D({{"segments", L({})}, {"device_traces", L({L({entry, entry})})}});
  absl::StatusOr<std::string> bytes = pickle::WritePickle(root);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  Counter counter;
  absl::StatusOr<pickle::StreamedPickle> streamed =
      pickle::ReadPickleStreaming(*bytes, "device_traces", counter);
  EXPECT_TRUE(absl::IsFailedPrecondition(streamed.status())) << streamed.status();
  EXPECT_THAT(streamed.status().message(), HasSubstr("was streamed, and is streamed again"));
  absl::StatusOr<PyTorchSnapshot> snapshot = ReadPyTorchSnapshotBytesForReplay(*bytes, "twice");
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  ASSERT_EQ(snapshot->device_traces[0].size(), 2u);
  EXPECT_EQ(snapshot->device_traces[0][1].size, 512u);

  // A device's list held under another key too: it would come out empty there.
  const PickleValue trace = L({entry});
  const PickleValue shared = D({{"segments", L({})}, {"device_traces", L({trace})}, {"x", trace}});
  bytes = pickle::WritePickle(shared);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  Counter fresh;
  streamed = pickle::ReadPickleStreaming(*bytes, "device_traces", fresh);
  EXPECT_TRUE(absl::IsFailedPrecondition(streamed.status())) << streamed.status();
  EXPECT_THAT(streamed.status().message(), HasSubstr("is held elsewhere too"));
  snapshot = ReadPyTorchSnapshotBytesForReplay(*bytes, "shared");
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ(snapshot->device_traces[0].size(), 1u);
}

TEST(PyTorchSnapshotStreamTest, NamesTheEntryOfABadField) {
  const PickleValue root =
      D({{"segments", L({})},
         {"device_traces",
          L({L({D({{"action", S("alloc")}, {"addr", I(16)}, {"size", I(512)}}),
                D({{"action", S("alloc")}, {"addr", I(16)}, {"size", S("big")}})})})}});
  absl::StatusOr<std::string> bytes = pickle::WritePickle(root);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<PyTorchSnapshot> snapshot = ReadPyTorchSnapshotBytesForReplay(*bytes, "bad");
  EXPECT_THAT(snapshot.status().message(),
              HasSubstr("bad: device_traces[0][1].size: expected int, got str"));
  const PickleValue no_addr =
      D({{"segments", L({})}, {"device_traces", L({L({D({{"action", S("free_requested")}})})})}});
  bytes = pickle::WritePickle(no_addr);
  ASSERT_TRUE(bytes.ok());
  EXPECT_THAT(ReadPyTorchSnapshotBytesForReplay(*bytes, "bad").status().message(),
              HasSubstr("device_traces[0][0]: missing key 'addr'"));
  EXPECT_THAT(ReadPyTorchSnapshotForReplay(DataPath("pickle/missing.pickle")).status().message(),
              HasSubstr("missing.pickle"));
}

}  // namespace
}  // namespace fragscope::testing
