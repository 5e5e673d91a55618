// FslogWriter: the background thread (writing handed-off chunks, the periodic hand-off and
// TSC re-anchoring, the published clock) and the fatal-signal path. See Note [Event log
// buffering] in fslog_writer.h.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/time/clock.h"
#include "fslog/fslog_writer.h"

namespace fragscope {
namespace {

// See Note [Event log buffering]: how long the background thread keeps polling after a write, and
// how often. At 20 us a full 8-buffer ring (6544 records) absorbs ~300M events/s. The poll period
// is also the published clock's tick (Note [Coarse event timestamps]).
constexpr std::chrono::microseconds kWriterPollWindow(2000);
constexpr std::chrono::microseconds kWriterPollPeriod(20);

}  // namespace

void FslogWriter::WriterLoop() {
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
    const bool polling = Clock::now() - last_write < kWriterPollWindow;
    // The time is published only while polling: only then is it refreshed every poll period.
    const bool ticking = polling && options_.coarse_timestamps;
    if (polling) {
      // Busy period: poll, so that producers never pay for waking us.
      std::this_thread::sleep_for(kWriterPollPeriod);
      if (ticking) published_clock_.Tick();
      std::lock_guard<std::mutex> lock(mu_);
      work_pending_ = false;
      stop = stop_;
    } else {
      published_clock_.Stop();  // before sleeping: from now on producers read the clock
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
    if (WriteReadyChunks(ticking) > 0) last_write = Clock::now();
    if (stop || Clock::now() >= next_tick) {
      // The TSC rate comes from the longest window (since Open); the anchor is re-taken every
      // time, so the mapping never drifts more than one interval's worth of rate error from
      // CLOCK_MONOTONIC.
      std::optional<internal::TscMapping> mapping;
      if (use_tsc_) {
        mapping = internal::MeasureTsc(calibration_start_, internal::SampleTscAndNs());
        if (mapping->ns_per_tick_q32 == 0) mapping.reset();
      }
      {
        SlowLockHolder lock(&producer_lock_);
        if (mapping) tsc_ = *mapping;
        HandOffLocked();
      }
      WriteReadyChunks(ticking);
      next_tick = Clock::now() + interval;
      if (stop) {
        published_clock_.Stop();
        return;
      }
    }
  }
}

int FslogWriter::WriteReadyChunks(bool tick) {
  int written = 0;
  uint32_t index = 0;
  while (ready_ring_.Peek(&index)) {
    // A chunk write takes tens of microseconds (more on a slow disk): keep the clock fresh.
    if (tick) published_clock_.Tick();
    ++written;
    Slot& slot = slots_[index];
    const uint32_t count = slot.count.load(std::memory_order_acquire);
    const uint64_t first = slot.first_sequence.load(std::memory_order_relaxed);
    if (options_.write_delay_for_testing > absl::ZeroDuration()) {
      absl::SleepFor(options_.write_delay_for_testing);
    }
    SealChunk(count, first, slot.records, slot.chunk);
    absl::Status status = compressor_ != nullptr
                              ? WriteCompressedChunk(slot, count, first)
                              : WriteAt(slot.chunk, kChunkHeaderBytes + count * kRecordBytes,
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

// --- Fatal-signal path -----------------------------------------------------------------------

void FslogWriter::EmergencyFlush() noexcept {
  if (compressor_ != nullptr) {
    EmergencyFlushCompressed();
    return;
  }
  // Holding the lock keeps every slot we look at from being reused (only a holder takes slots
  // from the free ring). If the interrupted thread holds it, go on without it.
  const bool locked = producer_lock_.TrySlowLockFor(1 << 20);
  uint32_t ready[64];
  const size_t n = ready_ring_.Snapshot(ready, 64);
  for (size_t i = 0; i < n; ++i) {
    const Slot& slot = slots_[ready[i] % slot_count_];
    WriteChunkFromSignal(slot, 0, slot.count.load(std::memory_order_acquire),
                         slot.file_offset.load(std::memory_order_relaxed));
  }
  const int32_t current = current_.load(std::memory_order_acquire);
  if (current >= 0 && static_cast<size_t>(current) < slot_count_) {
    const Slot& slot = slots_[static_cast<size_t>(current)];
    // The chunk goes where its hand-off would put it; a later hand-off (if the process survives)
    // rewrites the same offset with a superset of these records.
    WriteChunkFromSignal(slot, 0, slot.count.load(std::memory_order_acquire),
                         next_file_offset_.load(std::memory_order_relaxed));
  }
  if (locked) producer_lock_.SlowUnlock();
}

size_t FslogWriter::WriteChunkFromSignal(const Slot& slot, uint32_t skip, uint32_t count,
                                         uint64_t offset) noexcept {
  if (count == 0 || count > kMaxChunkRecords || skip >= count) return 0;
  const uint32_t n_records = count - skip;
  auto* records = reinterpret_cast<LogRecord*>(scratch_chunk_ + 1);
  std::memcpy(static_cast<void*>(records), slot.records + skip, n_records * sizeof(LogRecord));
  SealChunk(n_records, slot.first_sequence.load(std::memory_order_relaxed) + skip, records,
            scratch_chunk_);
  // lseek()+write() rather than pwrite(): both are on the async-signal-safe list. Only this
  // handler moves the file position; everything else uses pwrite().
  if (lseek(fd_, static_cast<off_t>(offset), SEEK_SET) < 0) return 0;
  const auto* p = reinterpret_cast<const char*>(scratch_chunk_);
  const size_t bytes = kChunkHeaderBytes + n_records * kRecordBytes;
  size_t left = bytes;
  while (left > 0) {
    const ssize_t n = write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 0;
    p += n;
    left -= static_cast<size_t>(n);
  }
  return bytes;
}

}  // namespace fragscope
