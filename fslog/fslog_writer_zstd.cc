// FslogWriter: compressed chunks (FslogWriterOptions::zstd_level). See Note [Event log
// buffering] in fslog_writer.h and Note [Compressed chunks] in fslog_format.h.
//
// Note [Writing compressed chunks]
// Uncompressed, a chunk's file offset is reserved when the producer hands it off (its size is
// known then). Compressed, its size is known only once the background thread has compressed it,
// so that thread assigns offsets: it writes chunks in ready-ring order, which is sequence order,
// each at compressed_end_, and advances compressed_end_ past it. The producer's side is unchanged
// (it still computes the uncompressed offsets, which nothing reads).
//
// The fatal-signal path writes the chunks the background thread has not written, uncompressed
// (compressing there would need the thread's context), after compressed_end_. The two must not
// write at once: the background thread sets background_writing_ and then looks at emergency_, the
// handler sets emergency_ and then looks at background_writing_ (both sequentially consistent, so
// at least one sees the other). The handler waits, boundedly, for a chunk write in progress to
// finish, skips the records that thread wrote (compressed_written_end_), writes the rest, records
// how far it wrote (emergency_end_) and clears emergency_. If the process survives the signal,
// the background thread goes on after that point: a chunk whose first records the handler wrote
// is written from the first record it did not.
#include <time.h>

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "fslog/fslog_writer.h"

namespace fragscope {
namespace {

// How long the signal path waits for a chunk write in progress: 20000 x 100 us = 2 s.
constexpr int kEmergencyWaitSteps = 20000;
constexpr long kEmergencyWaitStepNs = 100'000;

void SleepBriefly() noexcept {
  timespec ts{0, kEmergencyWaitStepNs};
  nanosleep(&ts, nullptr);  // async-signal-safe
}

}  // namespace

absl::Status FslogWriter::WriteCompressedChunk(Slot& slot, uint32_t count, uint64_t first) {
  // The hand-shake with the signal path (the Note): wait while it writes.
  for (;;) {
    background_writing_.store(true, std::memory_order_seq_cst);
    if (!emergency_.load(std::memory_order_seq_cst)) break;
    background_writing_.store(false, std::memory_order_seq_cst);
    SleepBriefly();
  }
  const uint64_t already = emergency_end_.load(std::memory_order_acquire);
  const uint32_t skip =
      already <= first ? 0 : static_cast<uint32_t>(std::min<uint64_t>(already - first, count));
  absl::Status status;
  if (skip < count) {
    const ChunkHeader* chunk = slot.chunk;
    uint32_t n = count;
    if (skip > 0) {  // the signal path wrote the chunk's first records: seal the rest apart
      auto* header = reinterpret_cast<ChunkHeader*>(partial_chunk_.get());
      auto* records = reinterpret_cast<LogRecord*>(header + 1);
      n = count - skip;
      std::memcpy(static_cast<void*>(records), slot.records + skip, n * sizeof(LogRecord));
      SealChunk(n, first + skip, records, header);
      chunk = header;
    }
    absl::StatusOr<std::string_view> frame =
        compressor_->Compress(chunk, kChunkHeaderBytes + n * kRecordBytes);
    if (!frame.ok()) {
      status = frame.status();
    } else {
      const uint64_t offset = compressed_end_.load(std::memory_order_relaxed);
      status = WriteAt(frame->data(), frame->size(), offset);
      // A failed write leaves the offset, so the next chunk overwrites what it left.
      if (status.ok()) compressed_end_.store(offset + frame->size(), std::memory_order_release);
    }
  }
  compressed_written_end_.store(first + count, std::memory_order_release);
  background_writing_.store(false, std::memory_order_seq_cst);
  return status;
}

void FslogWriter::EmergencyFlushCompressed() noexcept {
  emergency_.store(true, std::memory_order_seq_cst);
  int waited = 0;
  while (background_writing_.load(std::memory_order_seq_cst) && waited++ < kEmergencyWaitSteps) {
    SleepBriefly();
  }
  if (background_writing_.load(std::memory_order_seq_cst)) {
    // The background thread is stuck in a write (or this handler interrupted it): writing after
    // it could put chunks out of order. Leave the file as it is.
    emergency_.store(false, std::memory_order_seq_cst);
    return;
  }
  const bool locked = producer_lock_.TrySlowLockFor(1 << 20);
  uint64_t offset = compressed_end_.load(std::memory_order_acquire);
  uint64_t done = std::max(compressed_written_end_.load(std::memory_order_acquire),
                           emergency_end_.load(std::memory_order_relaxed));
  const auto write_slot = [&](const Slot& slot) {
    const uint32_t count = slot.count.load(std::memory_order_acquire);
    const uint64_t first = slot.first_sequence.load(std::memory_order_relaxed);
    if (count == 0 || count > kMaxChunkRecords || first + count <= done) return;
    const auto skip = static_cast<uint32_t>(done > first ? done - first : 0);
    const size_t bytes = WriteChunkFromSignal(slot, skip, count, offset);
    if (bytes == 0) return;
    offset += bytes;
    done = first + count;
  };
  uint32_t ready[64];
  const size_t n = ready_ring_.Snapshot(ready, 64);
  for (size_t i = 0; i < n; ++i) write_slot(slots_[ready[i] % slot_count_]);
  const int32_t current = current_.load(std::memory_order_acquire);
  if (current >= 0 && static_cast<size_t>(current) < slot_count_) {
    write_slot(slots_[static_cast<size_t>(current)]);
  }
  compressed_end_.store(offset, std::memory_order_release);
  emergency_end_.store(done, std::memory_order_release);
  if (locked) producer_lock_.SlowUnlock();
  emergency_.store(false, std::memory_order_seq_cst);
}

}  // namespace fragscope
