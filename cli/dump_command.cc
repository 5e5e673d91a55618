// `fragscope dump`. See dump_command.h.
#include "cli/dump_command.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "allocator/allocator_events.h"
#include "allocator/format_size.h"
#include "analysis/sources/excerpt.h"
#include "cli/flag_parser.h"
#include "cli/usage_error.h"
#include "fslog/allocation_role.h"
#include "fslog/fslog_context.h"
#include "fslog/fslog_format.h"
#include "fslog/fslog_reader.h"

namespace fragscope::cli {
namespace {

const CommandSpec& Command() {
  static const CommandSpec spec{
      .name = "dump",
      .synopsis = R"txt(LOG [--kind K1,K2,...] [--from N] [--to N] [--header] [--bytes])txt",
      .description =
          R"txt(Prints the events of an .fslog event log, one line per event:
  #EVENT +SECONDS KIND FIELDS...
EVENT is the event number that analyze, verify, --at and the reports use (the record's sequence
number, plus one for each combined free record before it, which prints as its two events);
SECONDS count from the log's start; sizes are in human units (--bytes: exact bytes).
Texts (markers, options changes, the model record, the header's) are quoted as short escaped
excerpts: at most 80 bytes, those other than printable ASCII (and ' and \) as \xNN, then their
length and how many bytes are left out.
A log that began while memory was held (e.g. converted from a snapshot) starts with
state_segment and state_block records: the segments and allocated blocks held before its
first event, numbered like events.)txt",
      .flags =
          {{"--kind", "K1,K2,...",
            "only these kinds: alloc, free_requested, free_completed, segment_alloc, segment_free, "
            "segment_map, segment_unmap, oom, empty_cache, options_change, marker, state_segment, "
            "state_block"},
           {"--from", "N", "start at event number N"},
           {"--to", "N", "stop after event number N"},
           {"--header", "", "print the file header first (its texts as short escaped excerpts)"},
           {"--bytes", "", "print sizes as exact byte counts"}},
      .footer =
          R"txt(Exit status: 0 ok (a torn tail is a warning), 1 unreadable or corrupt log, 2 usage error.)txt",
  };
  return spec;
}

struct DumpOptions {
  std::string path;
  uint32_t kinds[8] = {};  // bit set over kind values 0..255; all set = no filter
  bool kind_filter = false;
  uint64_t from = 0;
  uint64_t to = UINT64_MAX;
  bool header = false;
  bool exact_bytes = false;
};

std::optional<uint8_t> KindFromName(std::string_view name) {
  for (int value = 0; value < 256; ++value) {
    const auto kind = static_cast<uint8_t>(value);
    if (RecordKindName(kind) == name && name != "unknown") return kind;
  }
  return std::nullopt;
}

std::string KindName(uint8_t kind) {
  const std::string_view name = RecordKindName(kind);
  if (name == "unknown") return absl::StrFormat("unknown(%d)", kind);
  return std::string(name);
}

// The flags' values into `options`; returns an error message or "" on success.
std::string ApplyFlags(const ParsedFlags& flags, DumpOptions* options) {
  options->header = flags.Has("--header");
  options->exact_bytes = flags.Has("--bytes");
  if (const std::string* value = flags.Get("--kind")) {
    options->kind_filter = true;
    for (absl::string_view piece : absl::StrSplit(*value, ',', absl::SkipEmpty())) {
      const std::string_view name(piece.data(), piece.size());
      const auto kind = KindFromName(name);
      if (!kind) return absl::StrFormat("unknown kind '%s'", name);
      options->kinds[*kind / 32] |= uint32_t{1} << (*kind % 32);
    }
    if (std::all_of(std::begin(options->kinds), std::end(options->kinds),
                    [](uint32_t word) { return word == 0; })) {
      return "--kind needs at least one kind (e.g. alloc,free_requested)";
    }
  }
  for (const std::string_view flag : {"--from", "--to"}) {
    const std::string* value = flags.Get(flag);
    if (value == nullptr) continue;
    uint64_t n = 0;
    if (!absl::SimpleAtoi(*value, &n)) {
      return absl::StrFormat("%s: '%s' is not an event number", flag, *value);
    }
    (flag == "--from" ? options->from : options->to) = n;
  }
  if (flags.positional.empty()) return "missing LOG";
  if (flags.positional.size() > 1) {
    return absl::StrFormat("unexpected argument '%s' (one LOG only)", flags.positional[1]);
  }
  options->path = flags.positional[0];
  if (options->from > options->to) return "--from is after --to";
  return "";
}

class Printer {
 public:
  Printer(const FslogHeader& header, bool exact_bytes)
      : header_(header), exact_bytes_(exact_bytes) {}

  std::string Size(uint64_t bytes) const {
    return exact_bytes_ ? absl::StrFormat("%d", bytes) : FormatSize(bytes);
  }

  static std::string EventFlags(uint8_t flags) {
    static constexpr std::pair<uint8_t, std::string_view> kNames[] = {
        {kEventFlagBlockWasSplit, "was_split"},
        {kEventFlagResultIsSplit, "result_split"},
        {kEventFlagOversize, "oversize"},
        {kEventFlagExpandable, "expandable"},
        {kEventFlagWouldFitIfContiguous, "would_fit_if_contiguous"},
        {1 << 5, "oom_retry"},  // kEventFlagOomRetry
    };
    std::string text;
    for (const auto& [bit, name] : kNames) {
      if (flags & bit) {
        absl::StrAppendFormat(&text, "%s%s", text.empty() ? "" : "|", name);
        flags = static_cast<uint8_t>(flags & ~bit);
      }
    }
    if (flags != 0) absl::StrAppendFormat(&text, "%s0x%02x", text.empty() ? "" : "|", flags);
    return text;
  }

  std::string Line(const LogEntry& entry) const {
    const LogRecord& r = entry.record;
    const double seconds =
        (static_cast<double>(r.timestamp_ns) - static_cast<double>(header_.start_monotonic_ns)) /
        1e9;
    std::string line =
        absl::StrFormat("#%d +%.6fs %-14s", entry.sequence, seconds, KindName(r.kind));
    const AllocatorEvent e = DecodeEvent(r);
    const auto kind = static_cast<EventKind>(r.kind);
    switch (kind) {
      case EventKind::kAlloc:
      case EventKind::kFreeRequested:
      case EventKind::kFreeCompleted:
        absl::StrAppendFormat(
            &line, " ptr=0x%x size=%s requested=%s stream=0x%x segment=0x%x pool=%s", e.ptr,
            Size(e.bytes), Size(e.requested_bytes), e.stream, e.segment, PoolKindName(e.pool));
        if (kind == EventKind::kAlloc && e.split_bytes != 0) {
          absl::StrAppendFormat(&line, " split_remainder=%s", Size(e.split_bytes));
        }
        if (kind == EventKind::kAlloc && r.words[kWordAllocContext] != 0) {
          absl::StrAppendFormat(&line, " context=%d", r.words[kWordAllocContext]);
        }
        if (kind == EventKind::kFreeCompleted) {
          absl::StrAppendFormat(&line, " merged=%d merged_bytes=%s result=%s", e.merged_count,
                                Size(e.split_bytes), Size(e.result_bytes));
        }
        break;
      case EventKind::kSegmentAlloc:
      case EventKind::kSegmentFree:
      case EventKind::kSegmentMap:
      case EventKind::kSegmentUnmap:
        absl::StrAppendFormat(&line, " ptr=0x%x size=%s stream=0x%x pool=%s", e.ptr, Size(e.bytes),
                              e.stream, PoolKindName(e.pool));
        if (e.segment != 0) absl::StrAppendFormat(&line, " segment=0x%x", e.segment);
        break;
      case EventKind::kOom:
        absl::StrAppendFormat(
            &line,
            " requested=%s rounded=%s stream=0x%x pool=%s device_free=%s device_total=%s "
            "reserved=%s allocated=%s",
            Size(e.requested_bytes), Size(e.bytes), e.stream, PoolKindName(e.pool),
            Size(e.device_free_bytes), Size(e.device_total_bytes), Size(e.reserved_bytes),
            Size(e.allocated_bytes));
        break;
      case EventKind::kEmptyCache:
        absl::StrAppendFormat(&line, " released=%s", Size(e.reserved_bytes));
        break;
      case EventKind::kMarker:
        absl::StrAppendFormat(&line, " '%s' thread=%d%s", Excerpt(entry.text), r.words[0],
                              (r.flags & kRecordFlagTruncated) ? " truncated" : "");
        return line;
      case EventKind::kTag:
        if (std::optional<AllocationRole> role = AllocationRoleOf(r.words[kWordTagRole])) {
          absl::StrAppendFormat(&line, " ptr=0x%x role=%s", r.words[kWordPtr],
                                AllocationRoleName(*role));
        } else {
          absl::StrAppendFormat(&line, " ptr=0x%x role=%d (unknown value)", r.words[kWordPtr],
                                r.words[kWordTagRole]);
        }
        if (r.words[kWordTagContext] != 0) {
          absl::StrAppendFormat(&line, " context=%d", r.words[kWordTagContext]);
        }
        return line;
      case EventKind::kOptionsChange:
      case EventKind::kModel:
        absl::StrAppendFormat(&line, " '%s'%s", Excerpt(entry.text),
                              (r.flags & kRecordFlagTruncated) ? " truncated" : "");
        return line;
      default:
        if (r.kind == kRecordKindString) {
          absl::StrAppendFormat(&line, " id=%d '%s'%s", r.words[kWordStringId], Excerpt(entry.text),
                                (r.flags & kRecordFlagTruncated) ? " truncated" : "");
          return line;
        }
        if (r.kind == kRecordKindOomContext) {
          absl::StrAppendFormat(&line, " context=%d (of the oom that follows)", r.words[0]);
          return line;
        }
        if (r.kind == kRecordKindContext) {
          bool wide = false;
          const ContextDefinition c = DecodeContext(r, &wide);
          const std::optional<AllocationRole> role = AllocationRoleOf(c.role);
          absl::StrAppendFormat(&line, " id=%d role=%s module=%d op=%d site=%d%s", c.id,
                                role ? std::string(AllocationRoleName(*role))
                                     : absl::StrCat(c.role, " (unknown value)"),
                                c.module, c.op, c.site, c.backward ? " backward" : "");
          return line;
        }
        if (IsStateRecord(r.kind)) {
          absl::StrAppendFormat(&line, " ptr=0x%x size=%s", e.ptr, Size(e.bytes));
          if (r.kind == kRecordKindStateBlock) {
            absl::StrAppendFormat(&line, " requested=%s segment=0x%x", Size(e.requested_bytes),
                                  e.segment);
          }
          absl::StrAppendFormat(&line, " stream=0x%x pool=%s", e.stream, PoolKindName(e.pool));
          return line;
        }
        absl::StrAppendFormat(&line, " flags=0x%02x aux=%d words=%x,%x,%x,%x,%x,%x,%x,%x", r.flags,
                              r.aux, r.words[0], r.words[1], r.words[2], r.words[3], r.words[4],
                              r.words[5], r.words[6], r.words[7]);
        return line;
    }
    if (!e.pool_id.is_default()) absl::StrAppend(&line, " pool_id=", FormatPoolId(e.pool_id));
    if (r.flags != 0) absl::StrAppendFormat(&line, " flags=%s", EventFlags(r.flags));
    if (r.device != header_.device_index) absl::StrAppendFormat(&line, " device=%d", r.device);
    return line;
  }

  void Header(const std::string& path, std::ostream& out) const {
    const FslogHeader& h = header_;
    std::string_view clock = "unknown";
    if (h.clock == FslogClock::kMonotonic) clock = "CLOCK_MONOTONIC";
    if (h.clock == FslogClock::kTscCalibrated) clock = "TSC calibrated to CLOCK_MONOTONIC";
    out << absl::StrFormat("file: %s\n", path)
        << absl::StrFormat("format: %d.%d (header %d bytes)\n", h.version_major, h.version_minor,
                           h.header_bytes)
        << absl::StrFormat("device: %d '%s' %s\n", h.device_index, Excerpt(h.device_name),
                           Size(h.device_total_bytes))
        << absl::StrFormat("process: pid %d, rank %d, local_rank %d, world_size %d, host '%s'\n",
                           h.pid, h.rank, h.local_rank, h.world_size, Excerpt(h.host))
        << absl::StrFormat("parallel: pp_size %s, tp_size %s\n",
                           h.pp_size > 0 ? absl::StrCat(h.pp_size) : "not given",
                           h.tp_size > 0 ? absl::StrCat(h.tp_size) : "not given")
        << (h.device_free_at_open_bytes.has_value()
                ? absl::StrFormat("at open: device free %s, allocator reserved %s\n",
                                  Size(*h.device_free_at_open_bytes),
                                  Size(h.reserved_at_open_bytes))
                : std::string("at open: device memory not recorded\n"))
        << (h.zstd_chunks ? "chunks: zstd frames (Note [Compressed chunks])\n" : "")
        << (h.records_empty_cache ? ""
                                  : "empty_cache: not recorded (inferred from segment frees)\n")
        << absl::StrFormat(
               "start: %s (monotonic %d ns)\n",
               absl::FormatTime("%Y-%m-%d %H:%M:%E6S UTC", absl::FromUnixNanos(h.start_wall_ns),
                                absl::UTCTimeZone()),
               h.start_monotonic_ns)
        << absl::StrFormat("clock: %s\n", clock)
        << absl::StrFormat("options: '%s'\n", Excerpt(h.allocator_options));
  }

 private:
  const FslogHeader& header_;
  bool exact_bytes_;
};

}  // namespace

int RunDumpCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  int exit_code = 0;
  const std::optional<ParsedFlags> flags = ParseCommandFlags(args, Command(), out, err, &exit_code);
  if (!flags) return exit_code;
  DumpOptions options;
  if (const std::string error = ApplyFlags(*flags, &options); !error.empty()) {
    return UsageError(err, "dump", error);
  }
  auto reader = FslogReader::Open(options.path);
  if (!reader.ok()) {
    err << "fragscope dump: " << reader.status().message() << "\n";
    return 1;
  }
  const Printer printer(reader->header(), options.exact_bytes);
  if (options.header) printer.Header(options.path, out);

  LogEntry entry;
  int status = 0;
  uint64_t printed = 0, last_sequence = 0;
  bool any = false;
  for (;;) {
    absl::StatusOr<bool> more = reader->Next(&entry);
    if (!more.ok()) {
      err << "fragscope dump: " << more.status().message() << "\n";
      status = 1;
      break;
    }
    if (!*more || entry.sequence > options.to) break;
    any = true;
    last_sequence = entry.sequence;
    if (entry.sequence < options.from) continue;
    if (options.kind_filter &&
        !(options.kinds[entry.record.kind / 32] & (uint32_t{1} << (entry.record.kind % 32)))) {
      continue;
    }
    out << printer.Line(entry) << '\n';
    ++printed;
  }
  // An empty answer says why, so that it is not taken for an empty log.
  if (status == 0 && printed == 0 && any && options.from > last_sequence) {
    err << absl::StrFormat("fragscope dump: --from %d is past the log's last event (%d)\n",
                           options.from, last_sequence);
  }
  for (const std::string& warning : reader->warnings()) err << "warning: " << warning << "\n";
  return status;
}

}  // namespace fragscope::cli
