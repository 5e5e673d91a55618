// Replays raw allocation sequences recorded from PyTorch 2.11's native caching allocator on an
// H200 (scripts/gpu/record_oracle_traces.py) and requires the same decisions: every allocation
// that succeeded there succeeds here, every OOM there is an OOM here with the same "Tried to
// allocate", allowed, allocated and reserved-but-unallocated figures, and every statistic of
// torch.cuda.memory_stats() after the sequence is equal, and every allocator event PyTorch traced
// (alloc, free, segment alloc/free/map/unmap, oom) is emitted here in the same order with the
// same size and address (expandable-segment reservations are placed at PyTorch's bases).
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace fragscope {
namespace {

std::string DataPath(const std::string& name) {
  return std::string(FRAGSCOPE_TEST_DATA_DIR) + "/oracle/" + name;
}

// The text between `from` and `to` in `s` (empty if absent).
std::string Between(const std::string& s, const std::string& from, const std::string& to) {
  const size_t a = s.find(from);
  if (a == std::string::npos) return "";
  const size_t b = s.find(to, a + from.size());
  return s.substr(a + from.size(),
                  b == std::string::npos ? std::string::npos : b - a - from.size());
}

// With FRAGSCOPE_ORACLE_DUMP=DIR set, writes fragscope's events as "action size stream" lines,
// to diff against the PyTorch snapshot's device_traces when the replay diverges.
class EventDump final : public AllocatorObserver {
 public:
  explicit EventDump(const std::string& path) : out_(path) {}
  void OnEvent(const AllocatorEvent& e) override {
    const uint64_t size = e.kind == EventKind::kAlloc || e.kind == EventKind::kFreeRequested ||
                                  e.kind == EventKind::kFreeCompleted
                              ? e.requested_bytes
                              : e.bytes;
    out_ << EventKindName(e.kind) << " " << size << " " << e.stream << " " << e.ptr << "\n";
  }

 private:
  std::ofstream out_;
};

// Records fragscope's events in the .events format of scripts/gpu/oracle_to_events.py.
// empty_cache has no trace entry in PyTorch, and an OOM's trace address is the device's free
// memory: those are left out / zeroed.
class EventRecorder final : public AllocatorObserver {
 public:
  explicit EventRecorder(std::vector<StreamId> streams) : streams_(std::move(streams)) {}
  void OnEvent(const AllocatorEvent& e) override {
    if (e.kind == EventKind::kEmptyCache) return;
    const bool block_event = e.kind == EventKind::kAlloc || e.kind == EventKind::kFreeRequested ||
                             e.kind == EventKind::kFreeCompleted;
    const auto stream = std::find(streams_.begin(), streams_.end(), e.stream) - streams_.begin();
    lines_.push_back(absl::StrFormat("%s %d %d %d", EventKindName(e.kind),
                                     block_event ? e.requested_bytes : e.bytes, stream,
                                     e.kind == EventKind::kOom ? 0 : e.ptr));
  }
  const std::vector<std::string>& lines() const { return lines_; }

 private:
  std::vector<StreamId> streams_;
  std::vector<std::string> lines_;
};

// The events PyTorch recorded (<name>.events) and the bases of its expandable-segment
// reservations.
struct RecordedEvents {
  std::vector<DevicePtr> reservations;
  std::vector<std::string> lines;
};

RecordedEvents ReadRecordedEvents(const std::string& name) {
  RecordedEvents recorded;
  std::ifstream in(DataPath(name + ".events"));
  EXPECT_TRUE(in) << "missing " << DataPath(name + ".events");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# reservation_addresses", 0) == 0) {
      std::istringstream header(line.substr(23));
      for (DevicePtr a; header >> a;) recorded.reservations.push_back(a);
    } else if (!line.empty()) {
      recorded.lines.push_back(line);
    }
  }
  return recorded;
}

class PytorchOracleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PytorchOracleTest, ReplayMatchesPytorchDecisionsAndStats) {
  std::ifstream ops(DataPath(GetParam() + ".ops"));
  ASSERT_TRUE(ops) << "missing " << DataPath(GetParam() + ".ops");
  std::string conf;
  uint64_t allowed = 0, device_total = 0;
  std::vector<DevicePtr> segment_addresses;
  std::string line;
  std::streampos body = 0;
  while (std::getline(ops, line) && line.rfind("# ", 0) == 0) {
    std::istringstream header(line.substr(2));
    std::string key;
    header >> key;
    if (key == "conf") std::getline(header >> std::ws, conf);
    if (key == "allowed_bytes") header >> allowed;
    if (key == "device_total") header >> device_total;
    if (key == "segment_addresses") {
      for (DevicePtr a; header >> a;) segment_addresses.push_back(a);
    }
    body = ops.tellg();
  }
  ops.clear();
  ops.seekg(body);
  ASSERT_OK_AND_ASSIGN(AllocatorOptions options, ParseAllocatorOptions(conf));
  SimulatedBackend backend(device_total);
  // The device's own addresses, so best-fit ties (lowest address) fall as they did there.
  backend.ScriptAddresses(segment_addresses);
  const RecordedEvents recorded = ReadRecordedEvents(GetParam());
  backend.ScriptReservations(recorded.reservations);
  CachingAllocator allocator(backend, options);
  const StreamId streams[] = {0, 0x51de};
  EventRecorder events({std::begin(streams), std::end(streams)});
  allocator.AddObserver(&events);
  std::unique_ptr<EventDump> dump;
  if (const char* dir = std::getenv("FRAGSCOPE_ORACLE_DUMP")) {
    dump = std::make_unique<EventDump>(std::string(dir) + "/" + GetParam() + ".events");
    allocator.AddObserver(dump.get());
  }
  if (allowed > 0) {
    ASSERT_OK(allocator.SetMemoryFraction(static_cast<double>(allowed) /
                                          static_cast<double>(device_total)));
  }
  std::map<int64_t, DevicePtr> live;
  int line_no = 0;
  std::string last_oom_message;
  while (std::getline(ops, line)) {
    ++line_no;
    std::istringstream in(line);
    char op;
    in >> op;
    if (op == 'a' || op == 'o') {
      int64_t id = -1;
      uint64_t size;
      int stream;
      if (op == 'a') in >> id;
      in >> size >> stream;
      absl::StatusOr<DevicePtr> p = allocator.Allocate(size, streams[stream]);
      if (op == 'a') {
        ASSERT_TRUE(p.ok()) << "line " << line_no << ": PyTorch allocated " << size
                            << " bytes, fragscope failed: " << p.status();
        live[id] = *p;
      } else {
        ASSERT_FALSE(p.ok()) << "line " << line_no << ": PyTorch ran out of memory for " << size
                             << " bytes, fragscope allocated it";
        last_oom_message = std::string(p.status().message());
      }
    } else if (op == 'm') {
      // Compare what both sides know: the request, the cap, and the allocator's own figures.
      // (Device-free and NVML's per-process clause describe the real GPU.)
      const std::string pytorch = line.substr(2);
      for (const auto& [from, to] :
           {std::pair<std::string, std::string>{"Tried to allocate ", ". GPU"},
            {"is free. ", "Of the allocated"},
            {"Of the allocated memory ", " is allocated by PyTorch"},
            {"PyTorch, and ", " is reserved by PyTorch but unallocated"}}) {
        std::string theirs = Between(pytorch, from, to);
        std::string ours = Between(last_oom_message, from, to);
        if (from == "is free. ") {  // keep only the "X allowed; " clause
          theirs =
              theirs.substr(theirs.rfind(". ") == std::string::npos ? 0 : theirs.rfind(". ") + 2);
        }
        EXPECT_EQ(ours, theirs) << "line " << line_no << "\nPyTorch:   " << pytorch
                                << "\nfragscope: " << last_oom_message;
      }
    } else if (op == 'f') {
      int64_t id;
      in >> id;
      ASSERT_OK(allocator.Free(live.at(id)));
      live.erase(id);
    } else if (op == 'e') {
      allocator.EmptyCache();
    } else {
      FAIL() << "bad op line " << line_no << ": " << line;
    }
  }
  ASSERT_OK(allocator.CheckInvariants());

  // Every event, in order, with its address: the same decisions, not only the same totals.
  const std::vector<std::string>& ours = events.lines();
  for (size_t i = 0; i < std::min(ours.size(), recorded.lines.size()); ++i) {
    ASSERT_EQ(ours[i], recorded.lines[i]) << "first divergence at event " << i;
  }
  ASSERT_EQ(ours.size(), recorded.lines.size());

  std::map<std::string, int64_t> our_stats;
  for (const auto& [key, value] : FlattenStats(allocator.GetStats())) our_stats[key] = value;
  std::ifstream stats(DataPath(GetParam() + ".stats"));
  ASSERT_TRUE(stats);
  int compared = 0;
  while (std::getline(stats, line)) {
    std::vector<std::string> kv = absl::StrSplit(line, ' ');
    ASSERT_EQ(kv.size(), 2u) << line;
    auto it = our_stats.find(kv[0]);
    if (it == our_stats.end())
      continue;  // keys fragscope does not model (e.g. pinned, private pools)
    EXPECT_EQ(it->second, std::stoll(kv[1])) << GetParam() << ": " << kv[0];
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(our_stats.size()))
      << "every fragscope stat has a PyTorch twin";
}

INSTANTIATE_TEST_SUITE_P(Micro, PytorchOracleTest,
                         ::testing::Values("micro_default", "micro_max_split_128", "micro_roundup4",
                                           "micro_roundup_list", "micro_fraction_3g",
                                           "micro_fraction_3g_gc", "micro_expandable"));

}  // namespace
}  // namespace fragscope
