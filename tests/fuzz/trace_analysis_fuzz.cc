// libFuzzer target for the analyzer behind the trace commands: `fragscope analyze` (replay,
// metrics, OOM explanations, the sweep, the model gap, the text, JSON and HTML reports),
// `verify`, `convert` and `dump`, on traces whose events make no sense. The parsers have targets
// of their own (event_log, pickle, rmm_csv); here the bytes parse, and what they say is arbitrary:
// frees of blocks never allocated, allocations at live addresses, segments that overlap, OOMs with
// any numbers, options changes to anything, completions without requests, other devices.
//
// Input: a selector byte, then (selector mod 4):
//   0: an event program (below), written as an .fslog by FslogFileWriter, so every event decodes;
//   1: the bytes of an .fslog, CRCs recomputed (as event_log_fuzz's odd modes do);
//   2: the bytes of an RMM logging_resource_adaptor CSV;
//   3: the bytes of a PyTorch snapshot pickle.
// The event program is read with FuzzedDataProvider: the header's capacity, settings and device
// from small tables, then operations until the input ends, each an event kind with addresses and
// sizes from small tables (so that they collide) or raw values.
//
// Properties checked on every input: nothing crashes, hangs or trips a sanitizer; each command
// exits 0 or 1 (never 2: its arguments are valid), and exit 1 comes with a message; the JSON
// report of an analysis that succeeds parses (estimator/json_value.h, a strict reader).
#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "allocator/check.h"
#include "allocator/crc32c.h"
#include "allocator/event_log_format.h"
#include "analysis/cli/analysis_commands.h"
#include "analysis/cli/dump_command.h"
#include "analysis/fslog_file_writer.h"
#include "estimator/json_value.h"

namespace fragscope {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr DevicePtr kBase = 0x7f00'0000'0000;
constexpr size_t kMaxOperations = 4000;

const std::string& ScratchDir() {
  static const std::string dir = [] {
    const std::filesystem::path p = std::filesystem::temp_directory_path() /
                                    absl::StrFormat("fragscope-trace-analysis-fuzz-%d", getpid());
    std::filesystem::create_directories(p);
    return p.string();
  }();
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

// Writes the event program in `in` as an .fslog at `path`.
void WriteProgram(FuzzedDataProvider& in, const std::string& path) {
  static constexpr std::array<uint64_t, 7> kCapacities = {
      0, 2 * kMiB, 20 * kMiB, 256 * kMiB, 16 * kGiB, 80 * kGiB, uint64_t{1} << 42};
  static constexpr std::array<StreamId, 3> kStreams = {0, 1, 0x7f00'dead'beef};
  EventLogHeader header;
  header.device_total_bytes = in.PickValueInArray(kCapacities);
  header.allocator_options = Conf(in);
  header.device_index = in.ConsumeBool() ? 0 : 1;
  header.start_monotonic_ns = in.ConsumeBool() ? 1'000'000'000 : 0;
  header.clock = EventLogClock::kMonotonic;
  absl::StatusOr<std::unique_ptr<FslogFileWriter>> writer = FslogFileWriter::Open(path, header);
  FRAGSCOPE_CHECK(writer.ok());
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

uint32_t Load32(const std::string& bytes, size_t offset) {
  uint32_t v;
  std::memcpy(&v, bytes.data() + offset, sizeof(v));
  return v;
}

void Store32(std::string& bytes, size_t offset, uint32_t v) {
  std::memcpy(bytes.data() + offset, &v, sizeof(v));
}

// Recomputes the header's and every whole chunk's CRCs (as event_log_fuzz does).
void FixCrcs(std::string& bytes) {
  if (bytes.size() < kFileHeaderBytes) return;
  const uint32_t header_bytes = Load32(bytes, offsetof(FileHeader, header_bytes));
  if (header_bytes < kFileHeaderBytes || header_bytes > bytes.size()) return;
  Store32(bytes, offsetof(FileHeader, header_crc32c), 0);
  Store32(bytes, offsetof(FileHeader, header_crc32c), Crc32c(bytes.data(), header_bytes));
  size_t offset = header_bytes;
  while (offset + kChunkHeaderBytes <= bytes.size()) {
    const uint32_t payload = Load32(bytes, offset + offsetof(ChunkHeader, payload_bytes));
    if (payload > kMaxChunkPayloadBytes || offset + kChunkHeaderBytes + payload > bytes.size()) {
      break;
    }
    Store32(bytes, offset + offsetof(ChunkHeader, payload_crc32c),
            Crc32c(bytes.data() + offset + kChunkHeaderBytes, payload));
    Store32(bytes, offset + offsetof(ChunkHeader, header_crc32c),
            Crc32c(bytes.data() + offset, kChunkHeaderCrcCoveredBytes));
    offset += kChunkHeaderBytes + payload;
  }
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
  const uint8_t selector = data[0] % 4;
  std::string trace;
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
      FixCrcs(bytes);
      WriteFile(trace, bytes);
      break;
    }
    case 2:
      trace = ScratchPath("trace.csv");
      WriteFile(trace, std::string(reinterpret_cast<const char*>(data + 1), size - 1));
      break;
    default:
      trace = ScratchPath("trace.pickle");
      WriteFile(trace, std::string(reinterpret_cast<const char*>(data + 1), size - 1));
      break;
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
  Run(cli::RunVerifyCommand, {trace});
  Run(cli::RunConvertCommand, {trace, ScratchPath("converted.pickle")});
  Run(cli::RunConvertCommand, {trace, ScratchPath("converted.json")});
  Run(cli::RunDumpCommand, {trace});
  return 0;
}
