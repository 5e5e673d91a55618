// The call sites a streamed snapshot read keeps of its trace entries' frames
// (analysis/sources/streamed_call_sites.h): entry by entry, the text the whole read's frames give
// (CallSiteText), through the ways PyTorch shares frames lists and frame dicts in the pickle; the
// whole read's errors for bad frames; a frames list changed after an entry read it (read whole).
#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "analysis/sources/call_site_text.h"
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

// The call site of every entry of `bytes` read whole and streamed, which must agree; the number
// of entries with one. The streamed read must have streamed (kept no frames).
size_t ExpectSameCallSites(const std::string& bytes, const std::string& name) {
  absl::StatusOr<PyTorchSnapshot> whole = ReadPyTorchSnapshotBytes(bytes, name);
  absl::StatusOr<PyTorchSnapshot> streamed = ReadPyTorchSnapshotBytesForReplay(bytes, name);
  EXPECT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(streamed.ok()) << streamed.status();
  if (!whole.ok() || !streamed.ok()) return 0;
  EXPECT_EQ(streamed->device_traces.size(), whole->device_traces.size());
  size_t with_site = 0;
  for (size_t d = 0; d < whole->device_traces.size(); ++d) {
    const std::vector<SnapshotTraceEntry>& a = whole->device_traces[d];
    const std::vector<SnapshotTraceEntry>& b = streamed->device_traces[d];
    EXPECT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      SCOPED_TRACE(absl::StrFormat("device_traces[%d][%d]", d, i));
      EXPECT_EQ(b[i].frames, nullptr);
      EXPECT_EQ(a[i].call_site, 0u);
      const std::string want = a[i].frames != nullptr ? CallSiteText(*a[i].frames) : "";
      const uint32_t id = b[i].call_site;
      EXPECT_LE(id, streamed->call_sites.size());
      const std::string got =
          id != 0 && id <= streamed->call_sites.size() ? streamed->call_sites[id - 1] : "";
      EXPECT_EQ(got, want);
      with_site += !got.empty();
    }
  }
  return with_site;
}

TEST(StreamedCallSitesTest, EqualTheWholeReadsOnTheFixtures) {
  // Their frames lists are first written in `segments` (the live blocks'), then referenced.
  for (const char* name :
       {"snapshot.p2.pickle", "snapshot.p3.pickle", "snapshot.p4.pickle", "snapshot.p5.pickle",
        "snapshot_jit.p2.pickle", "snapshot_211.p5.pickle"}) {
    SCOPED_TRACE(name);
    EXPECT_GT(ExpectSameCallSites(ReadFileOrDie(DataPath(std::string("pickle/") + name)), name),
              0u);
  }
}

// As PyTorch 2.11 pickles a trace: one frames list per allocation, written first in its
// segment_alloc entry (streamed and emptied with it) and referenced by its alloc entry, and by its
// block in `segments` when still live; one dict per distinct frame, shared by every list through
// it, first written inside an entry. Stacks of C++ frames only, of torch's frames only, empty.
TEST(StreamedCallSitesTest, FollowListsAndFramesSharedThroughTheMemo) {
  const PickleValue cpp = D({{"filename", S("??")}, {"line", I(0)}, {"name", S("c10::malloc")}});
  const PickleValue torch_frame = D({{"filename", S("/site-packages/torch/nn/modules/linear.py")},
                                     {"line", I(125)},
                                     {"name", S("forward")}});
  std::vector<PickleValue> users;
  for (int u = 0; u < 3; ++u) {
    users.push_back(D({{"filename", S(absl::StrFormat("/home/me/model_%d.py", u))},
                       {"line", I(10 + u)},
                       {"name", S(u == 2 ? "layer\n\x1b[31mred" : "forward")}}));
  }
  PickleValue::Items trace;
  PickleValue live_frames;
  const uint64_t base = 0x7f0000000000;
  for (int i = 0; i < 1500; ++i) {  // more than one APPENDS batch
    PickleValue::Items stack = {cpp, torch_frame};
    if (i % 7 == 3) stack = {cpp};               // no Python frame: the first frame
    if (i % 7 == 5) stack = {cpp, torch_frame};  // torch's only: its first Python frame
    if (i % 7 != 3 && i % 7 != 5) stack.push_back(users[static_cast<size_t>(i) % 3]);
    if (i % 11 == 0) stack.clear();
    const PickleValue frames = L(stack);  // one list per allocation, shared by its entries
    const int64_t addr = static_cast<int64_t>(base + 0x200000 * static_cast<uint64_t>(i));
    trace.push_back(D({{"action", S("segment_alloc")},
                       {"addr", I(addr)},
                       {"size", I(2 << 20)},
                       {"frames", frames}}));
    trace.push_back(
        D({{"action", S("alloc")}, {"addr", I(addr)}, {"size", I(4096)}, {"frames", frames}}));
    if (i + 1 < 1500) {
      trace.push_back(D({{"action", S("free_requested")},
                         {"addr", I(addr)},
                         {"size", I(4096)},
                         {"frames", L({cpp, users[0]})}}));
    } else {
      live_frames = frames;
    }
  }
  const int64_t last = static_cast<int64_t>(base + 0x200000 * uint64_t{1499});
  const PickleValue segments = L({D({{"device", I(0)},
                                     {"address", I(last)},
                                     {"total_size", I(2 << 20)},
                                     {"stream", I(0)},
                                     {"segment_type", S("small")},
                                     {"frames", live_frames},
                                     {"blocks", L({D({{"address", I(last)},
                                                      {"size", I(2 << 20)},
                                                      {"requested_size", I(4096)},
                                                      {"state", S("active_allocated")},
                                                      {"frames", live_frames}})})}})});
  const PickleValue root = D({{"segments", segments}, {"device_traces", L({L(trace)})}});
  for (const int protocol : {2, 4}) {
    SCOPED_TRACE(protocol);
    absl::StatusOr<std::string> bytes = pickle::WritePickle(root, {.protocol = protocol});
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_GT(ExpectSameCallSites(*bytes, "built"), 2500u);
    absl::StatusOr<PyTorchSnapshot> streamed = ReadPyTorchSnapshotBytesForReplay(*bytes, "built");
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    // Interned: three user lines, the C++ frame, torch's frame.
    EXPECT_EQ(streamed->call_sites.size(), 5u);
  }
}

TEST(StreamedCallSitesTest, BadFramesAreTheWholeReadsErrors) {
  const auto read = [](const PickleValue& frames) {
    const PickleValue root =
        D({{"segments", L({})},
           {"device_traces", L({L({D({{"action", S("alloc")}, {"addr", I(16)}, {"size", I(512)}}),
                                   D({{"action", S("alloc")},
                                      {"addr", I(16)},
                                      {"size", I(512)},
                                      {"frames", frames}})})})}});
    absl::StatusOr<std::string> bytes = pickle::WritePickle(root);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    absl::StatusOr<PyTorchSnapshot> whole = ReadPyTorchSnapshotBytes(*bytes, "bad");
    absl::StatusOr<PyTorchSnapshot> streamed = ReadPyTorchSnapshotBytesForReplay(*bytes, "bad");
    EXPECT_FALSE(whole.ok());
    EXPECT_EQ(streamed.status().code(), whole.status().code()) << streamed.status();
    return std::string(streamed.status().message());
  };
  EXPECT_THAT(read(I(3)), HasSubstr("bad: device_traces[0][1].frames: expected list, got int"));
  EXPECT_THAT(read(L({S("x")})),
              HasSubstr("device_traces[0][1].frames[0]: expected dict, got str"));
  EXPECT_THAT(read(L({D({{"filename", S("a.py")}, {"name", S("f")}})})),
              HasSubstr("device_traces[0][1].frames[0]: missing key 'line'"));
  EXPECT_THAT(read(L({D({{"filename", S("a.py")}, {"line", S("1")}, {"name", S("f")}})})),
              HasSubstr("device_traces[0][1].frames[0].line: expected int, got str"));
}

// Protocol 2 opcodes, written by hand: a pickle no writer makes.
struct Ops {
  std::string bytes = Bytes({0x80, 2});  // PROTO 2
  int memo = 0;
  Ops& Op(char c) {
    bytes.push_back(c);
    return *this;
  }
  Ops& Str(const std::string& s) {  // BINUNICODE
    Op('X');
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((s.size() >> (8 * i)) & 0xff));
    bytes += s;
    return *this;
  }
  Ops& Int(int v) { return Op('K').Op(static_cast<char>(v)); }  // BININT1
  Ops& Put(int* index) {                                        // BINPUT
    *index = memo++;
    return Op('q').Op(static_cast<char>(*index));
  }
  Ops& Get(int index) { return Op('h').Op(static_cast<char>(index)); }      // BINGET
  Ops& Frame(const std::string& file, int line, const std::string& name) {  // a frame dict
    Op('}').Str("filename").Str(file).Op('s').Str("line").Int(line).Op('s');
    return Str("name").Str(name).Op('s');
  }
};

// The entry's frames list gets a user frame after the entry was streamed: what the entry's call
// site was read from is stale, so the snapshot is read whole, and names the user frame.
TEST(StreamedCallSitesTest, AListChangedAfterAnEntryReadItIsReadWhole) {
  Ops o;
  int root = 0, list = 0, scratch = 0;
  o.Op('}').Put(&root);
  o.Str("segments").Op(']').Op('s');
  o.Str("frames_list").Op(']').Put(&list);
  o.Frame("/site-packages/torch/nn/functional.py", 2000, "linear").Op('a').Op('s');
  o.Str("device_traces").Op(']').Put(&scratch).Op(']').Put(&scratch);
  o.Op('}').Str("action").Str("alloc").Op('s').Str("addr").Int(16).Op('s');
  o.Str("size").Int(100).Op('s').Str("frames").Get(list).Op('s');
  o.Op('a').Op('a').Op('s');  // the entry into the device's list, that into device_traces
  o.Str("later").Get(list).Frame("/home/me/model.py", 7, "step").Op('a').Op('s');
  o.Op('.');

  absl::StatusOr<PyTorchSnapshot> whole = ReadPyTorchSnapshotBytes(o.bytes, "changed");
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_NE(whole->device_traces[0][0].frames, nullptr);
  EXPECT_EQ(CallSiteText(*whole->device_traces[0][0].frames), "/home/me/model.py:7 in step");
  absl::StatusOr<PyTorchSnapshot> streamed = ReadPyTorchSnapshotBytesForReplay(o.bytes, "changed");
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  ASSERT_NE(streamed->device_traces[0][0].frames, nullptr) << "read whole";
  EXPECT_EQ(CallSiteText(*streamed->device_traces[0][0].frames), "/home/me/model.py:7 in step");
}

}  // namespace
}  // namespace fragscope::testing
