// OpenTrace: picks the TraceSource for a file, and TraceOpener, which opens the same trace as
// many times as a sweep needs (one source per thread).
//
// The format comes from the file's first bytes: the .fslog magic (or the zstd magic: a compressed
// .fslog), a pickle protocol opcode (0x80), or RMM's CSV header line; the extension (.fslog,
// .fslog.zst, .pickle/.pkl, .csv) only breaks ties.
// Formats that must be decoded whole (snapshot pickle, RMM CSV) are decoded once and shared
// read-only by every source the opener makes; .fslog sources each stream the file. A stream
// ("-", a pipe, a FIFO) is read once into a temporary copy that the opener keeps
// (stream_input.h); an .fslog source then reads the copy, and must not outlive the opener.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/sources/trace_event.h"

namespace fragscope {

struct PyTorchSnapshot;
struct RmmLog;
class StreamInput;

struct TraceOpenOptions {
  int device = -1;  // snapshot: which device's trace (-1: the only one)
  // A snapshot with several device traces and no `device` is not an error: the caller reads
  // each device through ForDevice (Devices() lists them). Open() itself still needs one.
  bool every_device = false;
};

// The format of `path` from its first bytes and name. Errors: unreadable, empty, unrecognized.
absl::StatusOr<TraceFormat> DetectTraceFormat(const std::string& path);

class TraceOpener {
 public:
  static absl::StatusOr<TraceOpener> Create(const std::string& path,
                                            const TraceOpenOptions& options = {});
  absl::StatusOr<std::unique_ptr<TraceSource>> Open() const;
  TraceFormat format() const { return format_; }
  // The devices of a snapshot whose trace is not empty, ascending; empty for other formats.
  std::vector<int> Devices() const;
  // An opener of the same decoded trace that reads `device`'s trace (snapshots).
  absl::StatusOr<TraceOpener> ForDevice(int device) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  TraceFormat format_ = TraceFormat::kFslog;
  TraceOpenOptions options_;
  std::shared_ptr<const PyTorchSnapshot> snapshot_;
  std::shared_ptr<const RmmLog> rmm_;
  // A stream's copy (stream_input.h), which the sources read. REQUIRES: it outlives them.
  std::shared_ptr<const StreamInput> stream_;
};

}  // namespace fragscope
