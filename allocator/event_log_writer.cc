// EventLogWriter. See Note [Event log buffering] in event_log_writer.h.
#include "allocator/event_log_writer.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <tuple>
#include <utility>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/check.h"
#include "allocator/event_log_signals.h"

namespace fragscope {
namespace {

// See Note [Event log buffering]: how long the background thread keeps polling after a write, and
// how often. At 20 us a full 8-buffer ring (6544 records) absorbs ~300M events/s.
constexpr std::chrono::microseconds kWriterPollWindow(2000);
constexpr std::chrono::microseconds kWriterPollPeriod(20);

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

int64_t WallNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

uint64_t ReadTsc() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return 0;
#endif
}

void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// The TSC is used only where the kernel itself trusts it for CLOCK_MONOTONIC (synchronized
// across CPUs, constant rate).
bool KernelClockIsTsc() {
#if defined(__x86_64__)
  std::ifstream in("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string name;
  return static_cast<bool>(in >> name) && name == "tsc";
#else
  return false;
#endif
}

// A (tsc, monotonic ns) pair read as close together as possible.
std::pair<uint64_t, uint64_t> TscAndNs() {
  const uint64_t t0 = ReadTsc();
  const uint64_t ns = MonotonicNs();
  const uint64_t t1 = ReadTsc();
  return {t0 + (t1 - t0) / 2, ns};
}

// ns per TSC tick in 32.32 fixed point, from two pairs; 0 if they are unusable.
uint64_t NsPerTickQ32(std::pair<uint64_t, uint64_t> a, std::pair<uint64_t, uint64_t> b) {
  if (b.first <= a.first || b.second <= a.second) return 0;
  const unsigned __int128 ns = static_cast<unsigned __int128>(b.second - a.second) << 32;
  return static_cast<uint64_t>(ns / (b.first - a.first));
}

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

uint64_t ThreadId() {
  static thread_local const uint64_t tid = static_cast<uint64_t>(gettid());
  return tid;
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

// --- SlotRing and the slow-side holder -------------------------------------------------------

namespace {

// Holds the slow side of an AsymmetricLock for a scope.
class ABSL_SCOPED_LOCKABLE SlowLockHolder {
 public:
  explicit SlowLockHolder(AsymmetricLock* lock) ABSL_EXCLUSIVE_LOCK_FUNCTION(lock) : lock_(lock) {
    lock_->SlowLock();
  }
  ~SlowLockHolder() ABSL_UNLOCK_FUNCTION() { lock_->SlowUnlock(); }

 private:
  AsymmetricLock* lock_;
};

}  // namespace

void EventLogWriter::SlotRing::Init(size_t capacity) {
  capacity_ = capacity;
  items_ = std::make_unique<std::atomic<uint32_t>[]>(capacity);
}

void EventLogWriter::SlotRing::Push(uint32_t slot) {
  const uint64_t tail = tail_.load(std::memory_order_relaxed);
  items_[tail % capacity_].store(slot, std::memory_order_relaxed);
  tail_.store(tail + 1, std::memory_order_release);
}

bool EventLogWriter::SlotRing::Peek(uint32_t* slot) const {
  const uint64_t head = head_.load(std::memory_order_relaxed);
  if (head == tail_.load(std::memory_order_acquire)) return false;
  *slot = items_[head % capacity_].load(std::memory_order_relaxed);
  return true;
}

void EventLogWriter::SlotRing::Pop() {
  head_.store(head_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

size_t EventLogWriter::SlotRing::Snapshot(uint32_t* out, size_t max) const {
  const uint64_t head = head_.load(std::memory_order_acquire);
  const uint64_t tail = tail_.load(std::memory_order_acquire);
  size_t n = 0;
  for (uint64_t i = head; i < tail && n < max && n < capacity_; ++i) {
    out[n++] = items_[i % capacity_].load(std::memory_order_relaxed);
  }
  return n;
}

// --- Opening and closing ---------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<EventLogWriter>> EventLogWriter::Open(
    std::string_view path_pattern, const EventLogHeaderInfo& info,
    const EventLogWriterOptions& options) {
  if (options.buffer_count < 2 || options.buffer_count > 4096) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "event log buffer_count must be in [2, 4096], got %d", options.buffer_count));
  }
  if (options.flush_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("event log flush_interval must be positive");
  }
  FRAGSCOPE_ASSIGN_OR_RETURN(std::string path,
                             ExpandPathPattern(path_pattern, getpid(), RankFromEnvironment()));
  std::unique_ptr<EventLogWriter> writer(new EventLogWriter());
  FRAGSCOPE_RETURN_IF_ERROR(writer->Init(std::move(path), info, options));
  return writer;
}

absl::Status EventLogWriter::Init(std::string path, const EventLogHeaderInfo& info,
                                  const EventLogWriterOptions& options) {
  path_ = std::move(path);
  options_ = options;
  fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return ErrnoStatus(errno, absl::StrCat("cannot create event log ", path_));

  use_tsc_ = options.allow_tsc_clock && KernelClockIsTsc();
  if (use_tsc_) {
    // Initial rate from a 1 ms busy calibration; WriterLoop refines it every flush interval.
    const auto first = TscAndNs();
    while (MonotonicNs() < first.second + 1'000'000) CpuRelax();
    const auto second = TscAndNs();
    ns_per_tick_q32_ = NsPerTickQ32(first, second);
    use_tsc_ = ns_per_tick_q32_ != 0;
    std::tie(calibration_tsc0_, calibration_ns0_) = first;
    std::tie(tsc_anchor_, ns_anchor_) = second;
  }

  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  header_.clock = use_tsc_ ? EventLogClock::kTscCalibrated : EventLogClock::kMonotonic;
  header_.device_index = info.device_index;
  header_.device_total_bytes = info.device_total_bytes;
  header_.pid = getpid();
  header_.rank = RankFromEnvironment();
  header_.local_rank = EnvInt("LOCAL_RANK").value_or(-1);
  header_.world_size = EnvInt("WORLD_SIZE").value_or(0);
  header_.start_wall_ns = WallNs();
  header_.start_monotonic_ns = MonotonicNs();
  header_.device_name = info.device_name;
  header_.host = host;
  header_.allocator_options = info.allocator_options;
  const std::string header_bytes = SerializeFileHeader(header_);
  FRAGSCOPE_ASSIGN_OR_RETURN(header_, ParseFileHeader(header_bytes));  // as stored (truncated)
  FRAGSCOPE_RETURN_IF_ERROR(WriteAt(header_bytes.data(), header_bytes.size(), 0));
  next_file_offset_.store(header_bytes.size(), std::memory_order_relaxed);

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
  registry_index_ = internal::RegisterEventLogWriter(this, options.install_signal_handlers);
  return absl::OkStatus();
}

EventLogWriter::~EventLogWriter() {
  if (registry_index_ >= 0) internal::UnregisterEventLogWriter(registry_index_, this);
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

// --- Producer side ---------------------------------------------------------------------------

ABSL_ATTRIBUTE_ALWAYS_INLINE inline uint64_t EventLogWriter::NowLocked() {
  uint64_t ns;
  if (use_tsc_) {
    const auto ticks = static_cast<int64_t>(ReadTsc() - tsc_anchor_);
    ns = ns_anchor_ + static_cast<uint64_t>(static_cast<int64_t>(
                          (static_cast<__int128>(ticks) * ns_per_tick_q32_) >> 32));
  } else {
    ns = MonotonicNs();
  }
  // Re-anchoring and cross-thread callers must not make time run backwards in sequence order.
  if (ns < last_timestamp_ns_) ns = last_timestamp_ns_;
  last_timestamp_ns_ = ns;
  return ns;
}

inline LogRecord* EventLogWriter::ReserveLocked(uint32_t n, bool* handed_off) {
  if (current_count_ + n <= kMaxChunkRecords) [[likely]] {
    return current_slot_->records + current_count_;
  }
  return ReserveSlowLocked(n, handed_off);
}

LogRecord* EventLogWriter::ReserveSlowLocked(uint32_t n, bool* handed_off) {
  FRAGSCOPE_DCHECK(n <= kMaxChunkRecords);
  if (current_slot_ != nullptr) {
    if (current_count_ + n <= kMaxChunkRecords) return current_slot_->records + current_count_;
    if (HandOffLocked()) *handed_off = true;
  }
  uint32_t index = 0;
  if (!free_ring_.Peek(&index)) return nullptr;
  free_ring_.Pop();
  Slot& slot = slots_[index];
  slot.count.store(0, std::memory_order_relaxed);
  slot.first_sequence.store(next_sequence_, std::memory_order_relaxed);
  current_slot_ = &slot;
  current_count_ = 0;
  current_.store(static_cast<int32_t>(index), std::memory_order_release);
  return slot.records;
}

inline void EventLogWriter::CommitLocked(uint32_t n) {
  current_count_ += n;
  current_slot_->count.store(current_count_, std::memory_order_release);
  next_sequence_ += n;
}

bool EventLogWriter::HandOffLocked() {
  if (current_slot_ == nullptr || current_count_ == 0) return false;
  Slot& slot = *current_slot_;
  const uint64_t offset = next_file_offset_.load(std::memory_order_relaxed);
  slot.file_offset.store(offset, std::memory_order_relaxed);
  next_file_offset_.store(offset + kChunkHeaderBytes + current_count_ * kRecordBytes,
                          std::memory_order_relaxed);
  handed_off_end_ = slot.first_sequence.load(std::memory_order_relaxed) + current_count_;
  current_.store(-1, std::memory_order_release);
  ready_ring_.Push(static_cast<uint32_t>(&slot - slots_.get()));
  current_slot_ = nullptr;
  current_count_ = kMaxChunkRecords;
  return true;
}

void EventLogWriter::DropLocked() {
  ++next_sequence_;  // the gap tells readers how many records are missing
  dropped_.fetch_add(1, std::memory_order_relaxed);
}

void EventLogWriter::OnEvent(const AllocatorEvent& event) {
  if (event.kind == EventKind::kOom) [[unlikely]] {
    LogRecord record;
    EncodeEvent(event, 0, &record);
    AppendWaiting(&record, 1, /*flush=*/true);
    return;
  }
  if (!producer_lock_.TryFastLock()) [[unlikely]] {
    OnEventSlow(event);  // a marker, flush or tick holds the lock right now
    return;
  }
  bool handed_off = false;
  LogRecord* record = ReserveLocked(1, &handed_off);
  const bool wait = record == nullptr && options_.block_when_full;
  if (record != nullptr) [[likely]] {
    EncodeEvent(event, NowLocked(), record);
    CommitLocked(1);
  } else if (!wait) {
    DropLocked();
  }
  producer_lock_.FastUnlock();
  if (handed_off) [[unlikely]]
    NotifyHandOff();
  if (wait) [[unlikely]]
    OnEventSlow(event);
}

void EventLogWriter::OnEventSlow(const AllocatorEvent& event) {
  LogRecord record;
  EncodeEvent(event, 0, &record);
  if (options_.block_when_full) {
    AppendWaiting(&record, 1, /*flush=*/false);
    return;
  }
  bool handed_off = false;
  {
    SlowLockHolder lock(&producer_lock_);
    if (LogRecord* out = ReserveLocked(1, &handed_off)) {
      record.timestamp_ns = NowLocked();
      *out = record;
      CommitLocked(1);
    } else {
      DropLocked();
    }
  }
  if (handed_off) NotifyHandOff();
}

void EventLogWriter::Mark(std::string_view text) {
  LogRecord record;
  EncodeMarker(text, ThreadId(), 0, &record);
  record.device = header_.device_index;
  AppendWaiting(&record, 1, /*flush=*/false);
}

void EventLogWriter::RecordOptionsChange(std::string_view options) {
  LogRecord records[kMaxOptionsChangeRecords];
  const size_t n = EncodeOptionsChange(options, 0, header_.device_index, records);
  AppendWaiting(records, static_cast<uint32_t>(n), /*flush=*/false);
}

uint64_t EventLogWriter::AppendWaiting(LogRecord* records, uint32_t n, bool flush) {
  for (;;) {
    bool handed_off = false;
    bool appended = false;
    uint64_t end = 0;
    {
      SlowLockHolder lock(&producer_lock_);
      if (LogRecord* out = ReserveLocked(n, &handed_off)) {
        const uint64_t now = NowLocked();
        for (uint32_t i = 0; i < n; ++i) records[i].timestamp_ns = now;
        std::memcpy(static_cast<void*>(out), records, n * sizeof(LogRecord));
        CommitLocked(n);
        if (flush && HandOffLocked()) handed_off = true;
        end = flush ? handed_off_end_ : next_sequence_;
        appended = true;
      }
    }
    if (flush) {
      WakeWriter();
    } else if (handed_off) {
      NotifyHandOff();
    }
    if (appended) {
      if (flush) WaitWritten(end);
      return end;
    }
    WaitForFreeBuffer();
  }
}

absl::Status EventLogWriter::Flush() {
  uint64_t end = 0;
  {
    SlowLockHolder lock(&producer_lock_);
    HandOffLocked();
    end = handed_off_end_;
  }
  WakeWriter();
  WaitWritten(end);
  std::lock_guard<std::mutex> lock(mu_);
  return io_status_;
}

void EventLogWriter::NotifyHandOff() {
  SeqCstFence();  // pairs with WriterLoop's fence
  if (writer_sleeping_.load(std::memory_order_relaxed)) WakeWriter();
}

void EventLogWriter::WakeWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    work_pending_ = true;
  }
  writer_cv_.notify_one();
}

void EventLogWriter::WaitForFreeBuffer() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t generation = free_generation_;
  done_cv_.wait(lock, [&] { return free_generation_ != generation || !free_ring_.Empty(); });
}

void EventLogWriter::WaitWritten(uint64_t sequence_end) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return written_end_ >= sequence_end; });
}

// --- Background thread -----------------------------------------------------------------------

void EventLogWriter::WriterLoop() {
  // SIGTERM goes to other threads: a handler interrupting this one could find the lock held.
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &block, nullptr);

  // Precise polling sleeps (the default timer slack is 50 us).
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);

  using Clock = std::chrono::steady_clock;
  const auto interval = absl::ToChronoNanoseconds(options_.flush_interval);
  Clock::time_point next_tick = Clock::now() + interval;
  Clock::time_point last_write = Clock::now() - kWriterPollWindow;
  for (;;) {
    bool stop = false;
    if (Clock::now() - last_write < kWriterPollWindow) {
      // Busy period: poll, so that producers never pay for waking us.
      std::this_thread::sleep_for(kWriterPollPeriod);
      std::lock_guard<std::mutex> lock(mu_);
      work_pending_ = false;
      stop = stop_;
    } else {
      std::unique_lock<std::mutex> lock(mu_);
      writer_sleeping_.store(true, std::memory_order_relaxed);
      SeqCstFence();  // pairs with NotifyHandOff's fence
      if (ready_ring_.Empty()) {
        writer_cv_.wait_until(lock, next_tick, [this] { return work_pending_ || stop_; });
      }
      writer_sleeping_.store(false, std::memory_order_relaxed);
      work_pending_ = false;
      stop = stop_;
    }
    if (WriteReadyChunks() > 0) last_write = Clock::now();
    if (stop || Clock::now() >= next_tick) {
      if (use_tsc_) Recalibrate();
      {
        SlowLockHolder lock(&producer_lock_);
        HandOffLocked();
      }
      WriteReadyChunks();
      next_tick = Clock::now() + interval;
      if (stop) return;
    }
  }
}

int EventLogWriter::WriteReadyChunks() {
  int written = 0;
  uint32_t index = 0;
  while (ready_ring_.Peek(&index)) {
    ++written;
    Slot& slot = slots_[index];
    const uint32_t count = slot.count.load(std::memory_order_acquire);
    const uint64_t first = slot.first_sequence.load(std::memory_order_relaxed);
    if (options_.write_delay_for_testing > absl::ZeroDuration()) {
      absl::SleepFor(options_.write_delay_for_testing);
    }
    SealChunk(count, first, slot.records, slot.chunk);
    absl::Status status = WriteAt(slot.chunk, kChunkHeaderBytes + count * kRecordBytes,
                                  slot.file_offset.load(std::memory_order_relaxed));
    ready_ring_.Pop();
    free_ring_.Push(index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      written_end_ = first + count;
      ++free_generation_;
      if (!status.ok() && io_status_.ok()) io_status_ = std::move(status);
    }
    done_cv_.notify_all();
  }
  return written;
}

absl::Status EventLogWriter::WriteAt(const void* data, size_t size, uint64_t offset) {
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

void EventLogWriter::Recalibrate() {
  // The rate comes from the longest window (since Open); the anchor is re-taken every time so the
  // mapping never drifts more than one interval's worth of rate error from CLOCK_MONOTONIC.
  const auto now = TscAndNs();
  const uint64_t rate = NsPerTickQ32({calibration_tsc0_, calibration_ns0_}, now);
  if (rate == 0) return;
  SlowLockHolder lock(&producer_lock_);
  std::tie(tsc_anchor_, ns_anchor_) = now;
  ns_per_tick_q32_ = rate;
}

// --- Fatal-signal path -----------------------------------------------------------------------

void EventLogWriter::EmergencyFlush() noexcept {
  // Holding the lock keeps every slot we look at from being reused (only a holder takes slots
  // from the free ring). If the interrupted thread holds it, go on without it.
  const bool locked = producer_lock_.TrySlowLockFor(1 << 20);
  uint32_t ready[64];
  const size_t n = ready_ring_.Snapshot(ready, 64);
  for (size_t i = 0; i < n; ++i) {
    const Slot& slot = slots_[ready[i] % slot_count_];
    WriteChunkFromSignal(slot, slot.count.load(std::memory_order_acquire),
                         slot.file_offset.load(std::memory_order_relaxed));
  }
  const int32_t current = current_.load(std::memory_order_acquire);
  if (current >= 0 && static_cast<size_t>(current) < slot_count_) {
    const Slot& slot = slots_[static_cast<size_t>(current)];
    // The chunk goes where its hand-off would put it; a later hand-off (if the process survives)
    // rewrites the same offset with a superset of these records.
    WriteChunkFromSignal(slot, slot.count.load(std::memory_order_acquire),
                         next_file_offset_.load(std::memory_order_relaxed));
  }
  if (locked) producer_lock_.SlowUnlock();
}

void EventLogWriter::WriteChunkFromSignal(const Slot& slot, uint32_t count,
                                          uint64_t offset) noexcept {
  if (count == 0 || count > kMaxChunkRecords) return;
  auto* records = reinterpret_cast<LogRecord*>(scratch_chunk_ + 1);
  std::memcpy(static_cast<void*>(records), slot.records, count * sizeof(LogRecord));
  SealChunk(count, slot.first_sequence.load(std::memory_order_relaxed), records, scratch_chunk_);
  // lseek()+write() rather than pwrite(): both are on the async-signal-safe list. Only this
  // handler moves the file position; everything else uses pwrite().
  if (lseek(fd_, static_cast<off_t>(offset), SEEK_SET) < 0) return;
  const auto* p = reinterpret_cast<const char*>(scratch_chunk_);
  size_t left = kChunkHeaderBytes + count * kRecordBytes;
  while (left > 0) {
    const ssize_t n = write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace fragscope
