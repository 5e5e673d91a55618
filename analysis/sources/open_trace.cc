#include "analysis/sources/open_trace.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "analysis/sources/fslog_source.h"
#include "analysis/sources/pytorch_snapshot.h"
#include "analysis/sources/rmm_source.h"
#include "analysis/sources/snapshot_source.h"
#include "analysis/sources/stream_input.h"
#include "fslog/fslog_format.h"
#include "fslog/fslog_zstd_input.h"

namespace fragscope {

namespace {

// The format of a trace from its first bytes (up to 16) and its name.
absl::StatusOr<TraceFormat> FormatOfHead(std::string_view head, const std::string& path,
                                         bool stream) {
  const size_t n = head.size();
  if (n == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: the %s is empty (0 bytes): not an event log, snapshot or CSV", path,
                        stream ? "stream" : "file"));
  }
  if (n >= sizeof(kFileMagic) && std::memcmp(head.data(), kFileMagic, sizeof(kFileMagic)) == 0) {
    return TraceFormat::kFslog;
  }
  // A pickle starts with PROTO and its protocol number (PyTorch writes 2 to 5); a stream must
  // show both, so that random bytes are not copied in the hope of a pickle.
  if (static_cast<unsigned char>(head[0]) == 0x80 &&
      (!stream || (n >= 2 && head[1] >= 2 && head[1] <= 5))) {
    return TraceFormat::kPyTorchSnapshot;
  }
  // A zstd-compressed file: an .fslog compressed whole (its reader says if it is not one).
  if (StartsWithZstdMagic(head.data(), n)) return TraceFormat::kFslog;
  if (n >= 7 && head.substr(0, 7) == "Thread,") return TraceFormat::kRmmCsv;
  if (absl::EndsWith(path, ".fslog") || absl::EndsWith(path, ".fslog.zst")) {
    return TraceFormat::kFslog;  // damaged: the reader says how
  }
  if (absl::EndsWith(path, ".pickle") || absl::EndsWith(path, ".pkl")) {
    return TraceFormat::kPyTorchSnapshot;
  }
  if (absl::EndsWith(path, ".csv")) return TraceFormat::kRmmCsv;
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: not a format fragscope reads (expected an .fslog event log, a PyTorch snapshot "
      "pickle from torch.cuda.memory._dump_snapshot, or an RMM logging_resource_adaptor CSV)",
      path));
}

}  // namespace

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
  return FormatOfHead(std::string_view(head, static_cast<size_t>(in.gcount())), path,
                      /*stream=*/false);
}

absl::StatusOr<TraceOpener> TraceOpener::Create(const std::string& path,
                                                const TraceOpenOptions& options) {
  TraceOpener opener;
  opener.path_ = path;
  opener.options_ = options;
  absl::StatusOr<TraceFormat> format;
  if (IsStreamInput(path)) {
    // Read once, into a temporary copy that every later reading uses (stream_input.h).
    absl::StatusOr<std::shared_ptr<const StreamInput>> stream =
        StreamInput::Read(path, [&](std::string_view head) {
          format = FormatOfHead(head, path, /*stream=*/true);
          return format.status();
        });
    if (!stream.ok()) return stream.status();
    opener.stream_ = *std::move(stream);
  } else {
    format = DetectTraceFormat(path);
  }
  if (!format.ok()) return format.status();
  opener.format_ = *format;
  if (*format == TraceFormat::kPyTorchSnapshot) {
    absl::StatusOr<PyTorchSnapshot> snapshot =
        opener.stream_ != nullptr ? ReadPyTorchSnapshotBytesForReplay(opener.stream_->bytes(), path)
                                  : ReadPyTorchSnapshotForReplay(path);
    if (!snapshot.ok()) return snapshot.status();
    opener.snapshot_ = std::make_shared<const PyTorchSnapshot>(std::move(*snapshot));
  } else if (*format == TraceFormat::kRmmCsv) {
    absl::StatusOr<RmmLog> log;
    if (opener.stream_ != nullptr) {
      log = ParseRmmCsv(opener.stream_->bytes());
      if (!log.ok()) {
        log = absl::Status(log.status().code(),
                           absl::StrFormat("%s: %s", path, log.status().message()));
      }
    } else {
      log = ReadRmmCsvFile(path);
    }
    if (!log.ok()) return log.status();
    opener.rmm_ = std::make_shared<const RmmLog>(std::move(*log));
  }
  if (options.every_device && options.device < 0 && opener.Devices().size() > 1) {
    return opener;  // each device is opened (and checked) through ForDevice
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

std::vector<int> TraceOpener::Devices() const {
  return snapshot_ != nullptr ? SnapshotTraceDevices(*snapshot_) : std::vector<int>();
}

absl::StatusOr<TraceOpener> TraceOpener::ForDevice(int device) const {
  TraceOpener opener = *this;
  opener.options_.device = device;
  opener.options_.every_device = false;
  absl::StatusOr<std::unique_ptr<TraceSource>> probe = opener.Open();
  if (!probe.ok()) return probe.status();
  return opener;
}

absl::StatusOr<std::unique_ptr<TraceSource>> TraceOpener::Open() const {
  switch (format_) {
    case TraceFormat::kFslog: {
      absl::StatusOr<std::unique_ptr<FslogSource>> s =
          stream_ != nullptr ? FslogSource::OpenBytes(stream_->bytes(), path_)
                             : FslogSource::Open(path_);
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
