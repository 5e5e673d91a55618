#include "analysis/open_trace.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "allocator/event_log_format.h"
#include "analysis/fslog_source.h"
#include "analysis/pytorch_snapshot.h"
#include "analysis/rmm_source.h"
#include "analysis/snapshot_source.h"
#include "analysis/zstd_input.h"

namespace fragscope {

absl::StatusOr<TraceFormat> DetectTraceFormat(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: is a directory, not a trace file", path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    return absl::NotFoundError(
        absl::StrFormat("%s: cannot open the file: %s", path, std::strerror(error)));
  }
  char head[16] = {};
  in.read(head, sizeof(head));
  const auto n = static_cast<size_t>(in.gcount());
  if (n == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: the file is empty (0 bytes): not an event log, snapshot or CSV", path));
  }
  if (n >= sizeof(kFileMagic) && std::memcmp(head, kFileMagic, sizeof(kFileMagic)) == 0) {
    return TraceFormat::kFslog;
  }
  // A zstd-compressed file: an .fslog compressed whole (its reader says if it is not one).
  if (StartsWithZstdMagic(head, n)) return TraceFormat::kFslog;
  if (static_cast<unsigned char>(head[0]) == 0x80) return TraceFormat::kPyTorchSnapshot;
  if (n >= 7 && std::memcmp(head, "Thread,", 7) == 0) return TraceFormat::kRmmCsv;
  if (absl::EndsWith(path, ".fslog") || absl::EndsWith(path, ".fslog.zst")) {
    return TraceFormat::kFslog;
  }  // damaged: the reader says how
  if (absl::EndsWith(path, ".pickle") || absl::EndsWith(path, ".pkl")) {
    return TraceFormat::kPyTorchSnapshot;
  }
  if (absl::EndsWith(path, ".csv")) return TraceFormat::kRmmCsv;
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: not a format fragscope reads (expected an .fslog event log, a PyTorch snapshot "
      "pickle from torch.cuda.memory._dump_snapshot, or an RMM logging_resource_adaptor CSV)",
      path));
}

absl::StatusOr<TraceOpener> TraceOpener::Create(const std::string& path,
                                                const TraceOpenOptions& options) {
  absl::StatusOr<TraceFormat> format = DetectTraceFormat(path);
  if (!format.ok()) return format.status();
  TraceOpener opener;
  opener.path_ = path;
  opener.format_ = *format;
  opener.options_ = options;
  if (*format == TraceFormat::kPyTorchSnapshot) {
    absl::StatusOr<PyTorchSnapshot> snapshot = ReadPyTorchSnapshotFile(path);
    if (!snapshot.ok()) return snapshot.status();
    opener.snapshot_ = std::make_shared<const PyTorchSnapshot>(std::move(*snapshot));
  } else if (*format == TraceFormat::kRmmCsv) {
    absl::StatusOr<RmmLog> log = ReadRmmCsvFile(path);
    if (!log.ok()) return log.status();
    opener.rmm_ = std::make_shared<const RmmLog>(std::move(*log));
  }
  // Open once now, so that errors in the header or the device choice surface here.
  absl::StatusOr<std::unique_ptr<TraceSource>> probe = opener.Open();
  if (!probe.ok()) return probe.status();
  // An .fslog or RMM log holds one device: a --device naming another is a mistake, not a choice.
  if (*format != TraceFormat::kPyTorchSnapshot && options.device >= 0 &&
      options.device != (*probe)->info().device) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: --device %d, but this log records device %d only", path,
                        options.device, (*probe)->info().device));
  }
  return opener;
}

absl::StatusOr<std::unique_ptr<TraceSource>> TraceOpener::Open() const {
  switch (format_) {
    case TraceFormat::kFslog: {
      absl::StatusOr<std::unique_ptr<FslogSource>> s = FslogSource::Open(path_);
      if (!s.ok()) return s.status();
      return std::unique_ptr<TraceSource>(std::move(*s));
    }
    case TraceFormat::kPyTorchSnapshot: {
      absl::StatusOr<std::unique_ptr<SnapshotSource>> s =
          SnapshotSource::FromSnapshot(snapshot_, path_, {options_.device});
      if (!s.ok()) return s.status();
      return std::unique_ptr<TraceSource>(std::move(*s));
    }
    case TraceFormat::kRmmCsv:
      return std::unique_ptr<TraceSource>(RmmSource::FromLog(rmm_, path_));
  }
  return absl::InternalError("unknown trace format");
}

}  // namespace fragscope
