// FslogWriter: creating the file and its header, the buffer memory, writing at an offset,
// closing; and the %p/%r path patterns. See Note [Event log buffering] in fslog_writer.h.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/check.h"
#include "fslog/fslog_signals.h"
#include "fslog/fslog_writer.h"

namespace fragscope {
namespace {

std::optional<int32_t> EnvInt(const char* name) {
  const char* value = std::getenv(name);
  int32_t parsed = 0;
  if (value == nullptr || !absl::SimpleAtoi(value, &parsed)) return std::nullopt;
  return parsed;
}

absl::Status ErrnoStatus(int err, std::string_view what) {
  const std::string message = absl::StrFormat("%s: %s", what, std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace

int32_t RankFromEnvironment() {
  if (auto rank = EnvInt("RANK")) return *rank;
  if (auto rank = EnvInt("LOCAL_RANK")) return *rank;
  return 0;
}

absl::StatusOr<std::string> ExpandPathPattern(std::string_view pattern, int64_t pid, int32_t rank) {
  std::string path;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      path.push_back(pattern[i]);
      continue;
    }
    const char spec = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
    switch (spec) {
      case 'p':
        absl::StrAppend(&path, pid);
        break;
      case 'r':
        absl::StrAppend(&path, rank);
        break;
      case '%':
        path.push_back('%');
        break;
      default:
        return absl::InvalidArgumentError(absl::StrFormat(
            "event log path pattern '%s': '%%' at %d must be followed by p (pid), r (rank) or %%",
            pattern, i));
    }
    ++i;
  }
  if (path.empty()) return absl::InvalidArgumentError("event log path pattern is empty");
  return path;
}

// --- Opening and closing ---------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<FslogWriter>> FslogWriter::Open(std::string_view path_pattern,
                                                               const FslogHeaderInfo& info,
                                                               const FslogWriterOptions& options) {
  if (options.buffer_count < 2 || options.buffer_count > 4096) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "event log buffer_count must be in [2, 4096], got %d", options.buffer_count));
  }
  if (options.flush_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("event log flush_interval must be positive");
  }
  if (options.zstd_level != 0 && (options.zstd_level < internal::kMinZstdLevel ||
                                  options.zstd_level > internal::kMaxZstdLevel)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("event log zstd_level must be 0 (off) or in [%d, %d], got %d",
                        internal::kMinZstdLevel, internal::kMaxZstdLevel, options.zstd_level));
  }
  FRAGSCOPE_ASSIGN_OR_RETURN(std::string path,
                             ExpandPathPattern(path_pattern, getpid(), RankFromEnvironment()));
  std::unique_ptr<FslogWriter> writer(new FslogWriter());
  FRAGSCOPE_RETURN_IF_ERROR(writer->Init(std::move(path), info, options));
  return writer;
}

absl::Status FslogWriter::Init(std::string path, const FslogHeaderInfo& info,
                               const FslogWriterOptions& options) {
  path_ = std::move(path);
  options_ = options;
  fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return ErrnoStatus(errno, absl::StrCat("cannot create event log ", path_));

  use_tsc_ = options.allow_tsc_clock && internal::KernelClockIsTsc();
  if (use_tsc_) {
    // Initial rate from a 1 ms busy calibration; the background thread refines it every
    // flush interval (Recalibrate).
    calibration_start_ = internal::SampleTscAndNs();
    const internal::TscMapping mapping = internal::CalibrateTsc(calibration_start_);
    use_tsc_ = mapping.ns_per_tick_q32 != 0;
    tsc_ = mapping;  // (no other thread runs yet)
  }

  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  header_.clock = use_tsc_ ? FslogClock::kTscCalibrated : FslogClock::kMonotonic;
  header_.device_index = info.device_index;
  header_.device_total_bytes = info.device_total_bytes;
  header_.pid = getpid();
  header_.rank = RankFromEnvironment();
  header_.local_rank = EnvInt("LOCAL_RANK").value_or(-1);
  header_.world_size = EnvInt("WORLD_SIZE").value_or(0);
  header_.pp_size = std::max(EnvInt(kPipelineParallelSizeEnv).value_or(0), 0);
  header_.tp_size = std::max(EnvInt(kTensorParallelSizeEnv).value_or(0), 0);
  header_.device_free_at_open_bytes = info.device_free_bytes;
  header_.reserved_at_open_bytes = info.device_free_bytes.has_value() ? info.reserved_bytes : 0;
  header_.zstd_chunks = options.zstd_level > 0;
  header_.records_empty_cache = info.records_empty_cache;
  header_.start_wall_ns = internal::WallNs();
  header_.start_monotonic_ns = internal::MonotonicNs();
  header_.device_name = info.device_name;
  header_.host = host;
  header_.allocator_options = info.allocator_options;
  const std::string header_bytes = SerializeFileHeader(header_);
  FRAGSCOPE_ASSIGN_OR_RETURN(header_, ParseFileHeader(header_bytes));  // as stored (truncated)
  FRAGSCOPE_RETURN_IF_ERROR(WriteAt(header_bytes.data(), header_bytes.size(), 0));
  next_file_offset_.store(header_bytes.size(), std::memory_order_relaxed);
  if (options.zstd_level > 0) {
    FRAGSCOPE_ASSIGN_OR_RETURN(compressor_,
                               internal::ZstdChunkCompressor::Create(options.zstd_level));
    partial_chunk_ = std::make_unique<uint64_t[]>(kMaxChunkBytes / sizeof(uint64_t));
    compressed_end_.store(header_bytes.size(), std::memory_order_relaxed);
  }

  // One 64 KiB stride per slot plus the signal handler's scratch chunk, touched now so that no
  // page fault happens on the hot path.
  slot_count_ = static_cast<size_t>(options.buffer_count);
  const size_t total = (slot_count_ + 1) * kMaxChunkBytes;
  memory_ = std::aligned_alloc(4096, total);
  if (memory_ == nullptr) return absl::ResourceExhaustedError("event log buffers");
  std::memset(memory_, 0, total);
  auto* base = static_cast<char*>(memory_);
  slots_ = std::make_unique<Slot[]>(slot_count_);
  free_ring_.Init(slot_count_);
  ready_ring_.Init(slot_count_);
  for (size_t i = 0; i < slot_count_; ++i) {
    slots_[i].chunk = reinterpret_cast<ChunkHeader*>(base + i * kMaxChunkBytes);
    slots_[i].records = reinterpret_cast<LogRecord*>(slots_[i].chunk + 1);
    free_ring_.Push(static_cast<uint32_t>(i));
  }
  scratch_chunk_ = reinterpret_cast<ChunkHeader*>(base + slot_count_ * kMaxChunkBytes);

  thread_ = std::thread([this] { WriterLoop(); });
  registry_index_ = internal::RegisterFslogWriter(this, options.install_signal_handlers);
  return absl::OkStatus();
}

FslogWriter::~FslogWriter() {
  if (registry_index_ >= 0) internal::UnregisterFslogWriter(registry_index_, this);
  if (thread_.joinable()) {
    Flush().IgnoreError();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    writer_cv_.notify_one();
    thread_.join();
  }
  if (fd_ >= 0) close(fd_);
  std::free(memory_);
}

absl::Status FslogWriter::WriteAt(const void* data, size_t size, uint64_t offset) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = pwrite(fd_, p, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno,
                         absl::StrFormat("writing event log %s at offset %d", path_, offset));
    }
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace fragscope
