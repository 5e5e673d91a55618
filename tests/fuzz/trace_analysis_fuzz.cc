// libFuzzer target for the analyzer behind the trace commands: `fragscope analyze` (replay,
// metrics, OOM explanations, the sweep, the model gap, the text, JSON and HTML reports),
// `verify`, `convert` and `dump`, on traces whose events make no sense. The parsers have targets
// of their own (fslog, pickle, rmm_csv); here the bytes parse, and what they say is arbitrary:
// frees of blocks never allocated, allocations at live addresses, segments that overlap, OOMs with
// any numbers, options changes to anything, completions without requests, other devices.
//
// Input: a selector byte, then (selector mod 5):
//   0: an event program (below), written as an .fslog by FslogFileWriter, so every event decodes,
//      sometimes after state records (memory held before the log), valid or not;
//   1: the bytes of an .fslog, CRCs recomputed (as fslog_fuzz's odd modes do);
//   2: the bytes of an RMM logging_resource_adaptor CSV;
//   3: the bytes of a PyTorch snapshot pickle;
//   4: a job program: allocations, frees, record_stream, empty_cache and settings changes run on
//      fragscope's own allocator over a SimulatedBackend and recorded, so the trace is faithful.
// The programs are read with FuzzedDataProvider: the capacity and settings from small tables, then
// operations until the input ends. An event program's events take addresses and sizes from small
// tables (so that they collide) or raw values.
//
// Properties checked on every input: nothing crashes, hangs or trips a sanitizer; each command
// exits 0 or 1 (never 2: its arguments are valid), and exit 1 comes with a message; the JSON
// report of an analysis that succeeds parses (estimator/json_value.h, a strict reader). In a job
// program the allocator's invariants (CachingAllocator::CheckInvariants) hold after every
// operation, and the recorded trace verifies as faithful (exit 0): the replay reproduces every
// allocator decision. A job program makes no record_stream calls under settings whose retry ladder
// can tell a stream-ordered free from an immediate one only after the allocation's cache lookup
// (garbage collection, max_split_size, expandable segments): Note [Stream-ordered frees in a
// replay] in analysis/replay/replay.h says why verify may then part from the job.
#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_format.h"
#include "allocator/allocator_options.h"
#include "allocator/caching_allocator.h"
#include "allocator/check.h"
#include "allocator/simulated_backend.h"
#include "allocator/types.h"
#include "analysis/report/fslog_file_writer.h"
#include "cli/analysis_commands.h"
#include "cli/dump_command.h"
#include "estimator/json_value.h"
#include "fslog/fslog_format.h"
#include "tests/fuzz/fslog_crcs.h"

namespace fragscope {
namespace {

constexpr DevicePtr kBase = 0x7f00'0000'0000;
constexpr size_t kMaxOperations = 4000;

// The process's scratch directory, removed when the fuzzer exits normally (after a crash it stays,
// with the trace and reports of the failing input).
const std::string& ScratchDir() {
  static const std::string dir = [] {
    const std::filesystem::path p = std::filesystem::temp_directory_path() /
                                    absl::StrFormat("fragscope-trace-analysis-fuzz-%d", getpid());
    std::filesystem::create_directories(p);
    return p.string();
  }();
  static const bool cleanup_registered = [] {
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(ScratchDir(), ignored);
    });
    return true;
  }();
  (void)cleanup_registered;
  return dir;
}

std::string ScratchPath(const char* name) { return ScratchDir() + "/" + name; }

uint64_t Size(FuzzedDataProvider& in) {
  static constexpr std::array<uint64_t, 12> kSizes = {
      0,        1,         512,       kMiB - 512, kMiB,     kMiB + 1,
      2 * kMiB, 10 * kMiB, 20 * kMiB, 64 * kMiB,  1 * kGiB, 12 * kMiB + 512};
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return in.ConsumeIntegral<uint64_t>();
    case 1:
      return in.ConsumeIntegralInRange<uint64_t>(1, 4) * in.PickValueInArray(kSizes);
    default:
      return in.PickValueInArray(kSizes);
  }
}

DevicePtr Address(FuzzedDataProvider& in) {
  if (in.ConsumeIntegralInRange<int>(0, 15) == 0) return in.ConsumeIntegral<uint64_t>();
  // 64 slots of 512 KiB, each with 4 offsets of 512 bytes: frees meet their allocations, and
  // segments overlap blocks and each other.
  return kBase + in.ConsumeIntegralInRange<uint64_t>(0, 63) * (kMiB / 2) +
         in.ConsumeIntegralInRange<uint64_t>(0, 3) * 512;
}

std::string Conf(FuzzedDataProvider& in) {
  static constexpr std::array<const char*, 9> kConfs = {
      "",
      "expandable_segments:True",
      "max_split_size_mb:20",
      "roundup_power2_divisions:4",
      "garbage_collection_threshold:0.6",
      "per_process_memory_fraction:0.5",
      "max_split_size_mb:20,expandable_segments:True,garbage_collection_threshold:0.5",
      "roundup_power2_divisions:[256:1,>:8],max_non_split_rounding_mb:40",
      "expandable_segments:False"};
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) return in.ConsumeRandomLengthString(48);
  return in.PickValueInArray(kConfs);
}

// Memory held before an event program's first event (state records: Note [State records]):
// segments at the program's addresses, mostly with blocks inside them in address order, sometimes
// not (the reader must refuse those), and segments that may overlap.
std::vector<InitialSegment> State(FuzzedDataProvider& in) {
  std::vector<InitialSegment> state(in.ConsumeIntegralInRange<size_t>(1, 4));
  for (InitialSegment& seg : state) {
    seg.address = Address(in) & ~(2 * kMiB - 1);
    seg.size = in.ConsumeBool() ? 2 * kMiB * in.ConsumeIntegralInRange<uint64_t>(1, 10) : Size(in);
    seg.pool = seg.size <= 2 * kMiB ? PoolKind::kSmall : PoolKind::kLarge;
    seg.stream = in.ConsumeBool() ? 0 : in.ConsumeIntegral<uint64_t>();
    DevicePtr at = seg.address;
    for (size_t n = in.ConsumeIntegralInRange<size_t>(0, 4); n > 0; --n) {
      InitialBlock& block = seg.allocated.emplace_back();
      block.address =
          in.ConsumeBool() ? at + 512 * in.ConsumeIntegralInRange<uint64_t>(0, 2048) : Address(in);
      block.size = in.ConsumeBool() ? 512 * in.ConsumeIntegralInRange<uint64_t>(1, 4096) : Size(in);
      block.requested_bytes = in.ConsumeBool() ? block.size : Size(in);
      at = block.address + block.size;
    }
  }
  return state;
}

// Writes the event program in `in` as an .fslog at `path`.
void WriteProgram(FuzzedDataProvider& in, const std::string& path) {
  static constexpr std::array<uint64_t, 7> kCapacities = {
      0, 2 * kMiB, 20 * kMiB, 256 * kMiB, 16 * kGiB, 80 * kGiB, uint64_t{1} << 42};
  static constexpr std::array<StreamId, 3> kStreams = {0, 1, 0x7f00'dead'beef};
  FslogHeader header;
  header.device_total_bytes = in.PickValueInArray(kCapacities);
  header.allocator_options = Conf(in);
  header.device_index = in.ConsumeBool() ? 0 : 1;
  header.start_monotonic_ns = in.ConsumeBool() ? 1'000'000'000 : 0;
  header.clock = FslogClock::kMonotonic;
  absl::StatusOr<std::unique_ptr<FslogFileWriter>> writer = FslogFileWriter::Open(path, header);
  FRAGSCOPE_CHECK(writer.ok());
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) (*writer)->AppendState(State(in));
  uint64_t now_ns = 0;
  for (size_t i = 0; i < kMaxOperations && in.remaining_bytes() > 0; ++i) {
    // Mostly a few microseconds apart, so that frees and their completions combine (20 us).
    now_ns += in.ConsumeBool() ? in.ConsumeIntegralInRange<uint64_t>(0, 30'000)
                               : in.ConsumeIntegral<uint32_t>();
    const auto kind = static_cast<EventKind>(in.ConsumeIntegralInRange<int>(1, 11));
    if (kind == EventKind::kMarker) {
      (*writer)->Mark(in.ConsumeRandomLengthString(40), now_ns);
      continue;
    }
    if (kind == EventKind::kOptionsChange) {
      (*writer)->OptionsChange(Conf(in), now_ns);
      continue;
    }
    AllocatorEvent e;
    e.kind = kind;
    e.device =
        in.ConsumeIntegralInRange<int>(0, 15) == 0 ? 1 - header.device_index : header.device_index;
    e.ptr = Address(in);
    e.bytes = Size(in);
    e.pool = e.bytes <= kMiB ? PoolKind::kSmall : PoolKind::kLarge;
    e.requested_bytes = in.ConsumeBool() ? e.bytes : Size(in);
    e.stream = in.PickValueInArray(kStreams);
    e.segment = e.ptr & ~(2 * kMiB - 1);
    e.flags = in.ConsumeBool() ? 0 : in.ConsumeIntegral<uint8_t>();
    if (kind == EventKind::kFreeCompleted) {
      e.merged_count = in.ConsumeIntegralInRange<uint8_t>(0, 2);
      e.split_bytes = in.ConsumeBool() ? 0 : Size(in);
      e.result_bytes = e.bytes + e.split_bytes;
    } else if (kind == EventKind::kAlloc) {
      e.split_bytes = in.ConsumeBool() ? 0 : Size(in);
    } else if (kind == EventKind::kOom || kind == EventKind::kEmptyCache) {
      e.device_free_bytes = Size(in);
      e.device_total_bytes = in.ConsumeBool() ? header.device_total_bytes : Size(in);
      e.reserved_bytes = Size(in);
      e.allocated_bytes = Size(in);
    }
    (*writer)->Append(e, now_ns);
  }
  FRAGSCOPE_CHECK((*writer)->Close().ok());
}

// Runs the job program in `in` on fragscope's allocator and records it as an .fslog at `path`.
// Returns the number of events recorded.
uint64_t WriteJob(FuzzedDataProvider& in, const std::string& path) {
  static constexpr std::array<uint64_t, 3> kCapacities = {20 * kMiB, 256 * kMiB, 16 * kGiB};
  static constexpr std::array<const char*, 6> kConfs = {
      "",
      "roundup_power2_divisions:4",
      "max_split_size_mb:20",
      "garbage_collection_threshold:0.6,per_process_memory_fraction:0.8",
      "expandable_segments:True",
      "max_split_size_mb:40,expandable_segments:True,garbage_collection_threshold:0.5"};
  // The first two leave no ambiguity in a stream-ordered free (see the top of the file).
  constexpr size_t kConfsWithStreamUses = 2;
  static constexpr std::array<StreamId, 3> kStreams = {0, 0x100, 0x200};
  constexpr StreamId kUser = 1;  // a user stream on top of each: kStreams[i] + kUser

  const uint64_t capacity = in.PickValueInArray(kCapacities);
  const bool stream_uses = in.ConsumeBool();
  auto pick_conf = [&] {
    return std::string(kConfs[in.ConsumeIntegralInRange<size_t>(
        0, (stream_uses ? kConfsWithStreamUses : kConfs.size()) - 1)]);
  };
  std::string conf = pick_conf();
  FslogHeader header;
  header.device_total_bytes = capacity;
  header.allocator_options = conf;
  header.start_monotonic_ns = 1'000'000'000;
  header.clock = FslogClock::kMonotonic;
  absl::StatusOr<std::unique_ptr<FslogFileWriter>> writer = FslogFileWriter::Open(path, header);
  FRAGSCOPE_CHECK(writer.ok());
  SimulatedBackend backend(capacity);
  absl::StatusOr<AllocatorOptions> options = ParseAllocatorOptions(conf);
  FRAGSCOPE_CHECK(options.ok());
  CachingAllocator allocator(backend, *options);
  allocator.AddObserver(writer->get());
  std::vector<DevicePtr> live;
  uint64_t now_ns = 0;
  for (size_t i = 0; i < kMaxOperations && in.remaining_bytes() > 0; ++i) {
    (*writer)->set_time_ns(now_ns += 1000);
    switch (in.ConsumeIntegralInRange<int>(0, 9)) {
      default: {  // 0-4: allocate
        const uint64_t size = std::min(Size(in), 2 * capacity);
        const absl::StatusOr<DevicePtr> p = allocator.Allocate(size, in.PickValueInArray(kStreams));
        if (p.ok() && *p != 0) live.push_back(*p);
        break;
      }
      case 5:
      case 6:
      case 7: {  // free a live block, perhaps used on another stream first
        if (live.empty()) break;
        const size_t k = in.ConsumeIntegralInRange<size_t>(0, live.size() - 1);
        if (stream_uses && in.ConsumeBool()) {
          const StreamId user = in.PickValueInArray(kStreams) + kUser;
          backend.SetStreamBusy(user, true);
          FRAGSCOPE_CHECK(allocator.RecordStream(live[k], user).ok());
        }
        FRAGSCOPE_CHECK(allocator.Free(live[k]).ok());
        live[k] = live.back();
        live.pop_back();
        break;
      }
      case 8:
        if (stream_uses) backend.CompleteStream(in.PickValueInArray(kStreams) + kUser);
        break;
      case 9:
        if (in.ConsumeBool()) {
          allocator.EmptyCache();
        } else {  // as TraceBuilder::SetOptions: the settings and the fraction they carry
          conf = pick_conf();
          options = ParseAllocatorOptions(conf);
          FRAGSCOPE_CHECK(options.ok());
          const double fraction = options->per_process_memory_fraction;
          allocator.SetOptions(std::move(*options));
          FRAGSCOPE_CHECK(allocator.SetMemoryFraction(fraction).ok());
          (*writer)->OptionsChange(conf, now_ns);
        }
        break;
    }
    if (const absl::Status invariants = allocator.CheckInvariants(); !invariants.ok()) {
      internal::CheckFailed(__FILE__, __LINE__, std::string(invariants.message()).c_str());
    }
  }
  allocator.RemoveObserver(writer->get());
  FRAGSCOPE_CHECK((*writer)->Close().ok());
  return (*writer)->events();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  FRAGSCOPE_CHECK(file.good());
}

using Command = int (*)(const std::vector<std::string>&, std::ostream&, std::ostream&);

// Runs one command, checks its exit status and messages, and returns the status.
int Run(Command command, const std::vector<std::string>& args) {
  std::ostringstream out;
  std::ostringstream err;
  const int rc = command(args, out, err);
  FRAGSCOPE_CHECK(rc == 0 || rc == 1);
  if (rc == 1) FRAGSCOPE_CHECK(!err.str().empty() || !out.str().empty());
  return rc;
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

}  // namespace
}  // namespace fragscope

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fragscope;
  if (size < 1) return 0;
  const uint8_t selector = data[0] % 5;
  std::string trace;
  uint64_t job_events = 0;
  switch (selector) {
    case 0: {
      trace = ScratchPath("trace.fslog");
      FuzzedDataProvider in(data + 1, size - 1);
      WriteProgram(in, trace);
      break;
    }
    case 1: {
      trace = ScratchPath("raw.fslog");
      std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
      FixFslogCrcs(bytes);
      WriteFile(trace, bytes);
      break;
    }
    case 2:
      trace = ScratchPath("trace.csv");
      WriteFile(trace, std::string(reinterpret_cast<const char*>(data + 1), size - 1));
      break;
    case 3:
      trace = ScratchPath("trace.pickle");
      WriteFile(trace, std::string(reinterpret_cast<const char*>(data + 1), size - 1));
      break;
    default: {
      trace = ScratchPath("job.fslog");
      FuzzedDataProvider in(data + 1, size - 1);
      job_events = WriteJob(in, trace);
      break;
    }
  }
  // A small sweep grid on one thread keeps an input's run short; the flags are valid, so any exit
  // status 2 is a bug.
  const std::string json = ScratchPath("report.json");
  std::filesystem::remove(json);
  const int rc = Run(cli::RunAnalyzeCommand,
                     {trace, "--json", json, "--html", ScratchPath("report.html"), "--at", "7",
                      "--model", "gpt2-small", "--max-split-size-mb", "0,20",
                      "--expandable-segments", "False,True", "--threads", "1"});
  // A report is JSON that a strict reader accepts (no NaN, no raw control characters).
  if (rc == 0) FRAGSCOPE_CHECK(estimator::ParseJson(ReadFile(json)).ok());
  const int verified = Run(cli::RunVerifyCommand, {trace});
  // A job with no events is an empty trace, which verify refuses.
  if (job_events > 0) FRAGSCOPE_CHECK(verified == 0);
  Run(cli::RunConvertCommand, {trace, ScratchPath("converted.pickle")});
  Run(cli::RunConvertCommand, {trace, ScratchPath("converted.json")});
  Run(cli::RunDumpCommand, {trace});
  return 0;
}
