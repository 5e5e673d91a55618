// FslogWriter, the producer side: OnEvent (the hot path), markers, options changes and
// flushes. See Note [Event log buffering] in fslog_writer.h; the file and the background
// thread are in fslog_writer_file.cc and fslog_writer_thread.cc.
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <type_traits>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "absl/base/attributes.h"
#include "allocator/check.h"
#include "fslog/fslog_writer.h"

namespace fragscope {
namespace {

// Note [Context records]: the calling thread's allocation context, and whether any thread ever
// set one (so that a job that names none pays one relaxed load per event, not a TLS read).
std::atomic<bool> thread_contexts_in_use{false};
thread_local uint32_t thread_context = 0;

uint64_t ThreadId() {
  static thread_local const uint64_t tid = static_cast<uint64_t>(gettid());
  return tid;
}

// Whether an AllocatorEvent's first 64 bytes are, byte for byte, bytes 8..71 of its block-layout
// record (kind, pool, flags, aux, device, then words 0..6), so that OnEvent can copy them instead
// of encoding field by field. Checked rather than assumed: if AllocatorEvent changes, OnEvent
// falls back to EncodeEvent.
constexpr bool kEventIsBlockRecordImage =
    std::is_standard_layout_v<AllocatorEvent> && sizeof(AllocatorEvent) >= 64 &&
    offsetof(AllocatorEvent, kind) == 0 && sizeof(AllocatorEvent::kind) == 1 &&
    offsetof(AllocatorEvent, pool) == 1 && sizeof(AllocatorEvent::pool) == 1 &&
    offsetof(AllocatorEvent, flags) == 2 && sizeof(AllocatorEvent::flags) == 1 &&
    offsetof(AllocatorEvent, merged_count) == 3 && sizeof(AllocatorEvent::merged_count) == 1 &&
    offsetof(AllocatorEvent, device) == 4 && sizeof(AllocatorEvent::device) == 4 &&
    offsetof(AllocatorEvent, ptr) == 8 + 8 * kWordPtr &&
    offsetof(AllocatorEvent, bytes) == 8 + 8 * kWordBytes &&
    offsetof(AllocatorEvent, requested_bytes) == 8 + 8 * kWordRequestedBytes &&
    offsetof(AllocatorEvent, stream) == 8 + 8 * kWordStream &&
    offsetof(AllocatorEvent, segment) == 8 + 8 * kWordSegment &&
    offsetof(AllocatorEvent, split_bytes) == 8 + 8 * kWordSplitBytes &&
    offsetof(AllocatorEvent, result_bytes) == 8 + 8 * kWordResultBytes && kWordResultBytes == 6 &&
    sizeof(AllocatorEvent::result_bytes) == 8 && offsetof(LogRecord, kind) == 8 &&
    offsetof(LogRecord, words) == 16;

// Records start 16-byte aligned: chunk buffers are page aligned and both sizes are multiples of
// 16 (StoreBlockRecord's aligned stores rely on it).
static_assert(kChunkHeaderBytes % 16 == 0 && kRecordBytes % 16 == 0);

// EncodeEvent(event, timestamp_ns, out) for a block-layout event, as five 16-byte stores: the
// record is written once, with no field-by-field byte stores and no separate zeroing.
// REQUIRES: !UsesStatsLayout(event.kind).
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void StoreBlockRecord(const AllocatorEvent& event,
                                                          uint64_t timestamp_ns, LogRecord* out) {
#if defined(__x86_64__)
  // A private pool's id goes into word 7, which the image leaves 0: EncodeEvent writes it.
  if (kEventIsBlockRecordImage && ABSL_PREDICT_TRUE(event.pool_id.is_default())) {
    const auto* in = reinterpret_cast<const char*>(&event);
    auto* to = reinterpret_cast<__m128i*>(out);
    const auto at = [in](size_t offset) { return reinterpret_cast<const __m128i*>(in + offset); };
    // Bytes 0..15: timestamp, then kind, pool, flags, aux (merged_count), device.
    _mm_store_si128(to, _mm_unpacklo_epi64(_mm_cvtsi64_si128(static_cast<int64_t>(timestamp_ns)),
                                           _mm_loadl_epi64(at(0))));
    _mm_store_si128(to + 1, _mm_loadu_si128(at(8)));   // words 0, 1
    _mm_store_si128(to + 2, _mm_loadu_si128(at(24)));  // words 2, 3
    _mm_store_si128(to + 3, _mm_loadu_si128(at(40)));  // words 4, 5
    _mm_store_si128(to + 4, _mm_loadl_epi64(at(56)));  // word 6, and word 7 = 0
    return;
  }
#endif
  EncodeEvent(event, timestamp_ns, out);
}

// Note [Prefetching the chunk for writing]
// A recycled chunk buffer's lines were last read by the background thread (CRC, pwrite) on
// another core, and a fresh one is at best in L2, so the first store to each line waits for the
// line's ownership (an RFO). The allocator's unlock, a locked instruction, then waits for those
// stores to drain: on machine B that made a logged warm malloc+free pair 133-138 ns against 80
// plain. Asking for ownership kPrefetchRecordsAhead records (640 bytes, a few events) early hides
// it: 104-112 ns. Both lines a record may span are requested (records are 80 bytes, lines 64).
// Prefetching past the buffer's end is harmless (a prefetch never faults); the address is
// computed as an integer, so no out-of-bounds pointer is formed.
constexpr uint32_t kPrefetchRecordsAhead = 8;

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void PrefetchForWrite(const LogRecord* records,
                                                          uint32_t index) {
  const uintptr_t line = reinterpret_cast<uintptr_t>(records) + uintptr_t{index} * kRecordBytes;
#if defined(__x86_64__)
  // PREFETCHW (not in the x86-64 baseline, so no compiler emits it by default; CPUs without it,
  // pre-Broadwell Intel, execute it as a NOP).
  asm volatile("prefetchw (%0)\n\tprefetchw 64(%0)" : : "r"(line));
#else
  __builtin_prefetch(reinterpret_cast<const void*>(line), 1);
  __builtin_prefetch(reinterpret_cast<const void*>(line + 64), 1);
#endif
}

}  // namespace

// --- Timestamps (Note [Coarse event timestamps]) ----------------------------------------------

ABSL_ATTRIBUTE_NOINLINE uint64_t FslogWriter::PreciseTimestampLocked(uint64_t published) {
  uint64_t ns = use_tsc_ ? tsc_.Map(internal::ReadTsc()) : internal::MonotonicNs();
  // A published time this old means the background thread stalls: read the clock until it
  // publishes again.
  if (published != 0 && ns > published + internal::kMaxPublishedAgeNs) stale_published_ = published;
  // Re-anchoring, the published clock and other threads' markers must not make time run
  // backwards in sequence order.
  if (ns < last_timestamp_ns_) ns = last_timestamp_ns_;
  last_timestamp_ns_ = ns;
  return ns;
}

// --- Buffers ----------------------------------------------------------------------------------

inline LogRecord* FslogWriter::ReserveLocked(uint32_t n, bool* handed_off) {
  if (current_count_ + n <= kMaxChunkRecords) [[likely]] {
    return current_slot_->records + current_count_;
  }
  return ReserveSlowLocked(n, handed_off);
}

LogRecord* FslogWriter::ReserveSlowLocked(uint32_t n, bool* handed_off) {
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

inline void FslogWriter::CommitLocked(uint32_t n) {
  current_count_ += n;
  current_slot_->count.store(current_count_, std::memory_order_release);
  next_sequence_ += n;
}

bool FslogWriter::HandOffLocked() {
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

void FslogWriter::DropLocked() {
  ++next_sequence_;  // the gap tells readers how many records are missing
  // Not a fetch_add: every writer of dropped_ holds producer_lock_, and a locked instruction on
  // this path would cost more than the record it replaces.
  dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// --- Events -----------------------------------------------------------------------------------

void FslogWriter::SetThreadContext(uint32_t context) {
  if (context != 0 && !thread_contexts_in_use.load(std::memory_order_relaxed)) {
    thread_contexts_in_use.store(true, std::memory_order_relaxed);
  }
  thread_context = context;
}

void FslogWriter::OnEvent(const AllocatorEvent& event) {
  if (thread_contexts_in_use.load(std::memory_order_relaxed) && event.kind == EventKind::kAlloc &&
      thread_context != 0 && event.result_bytes == 0) [[unlikely]] {
    // An alloc's word 6 (result_bytes, 0 for an alloc) carries the context (format 2.6).
    AllocatorEvent with_context = event;
    with_context.result_bytes = thread_context;
    OnEvent(with_context);
    return;
  }
  if (UsesStatsLayout(static_cast<uint8_t>(event.kind))) [[unlikely]] {
    OnStatsEvent(event);  // oom, empty_cache
    return;
  }
  if (!producer_lock_.TryFastLock()) [[unlikely]] {
    OnEventSlow(event);  // a marker, flush or tick holds the lock right now
    return;
  }
  const uint32_t index = current_count_;
  if (index >= kMaxChunkRecords) [[unlikely]] {
    OnEventNoRoom(event);
    return;
  }
  // Note [Coarse event timestamps]. Published values only grow, so `ns <= stale_published_`
  // means "0 (not ticking) or the value found stale".
  uint64_t ns = published_clock_.Load();
  if (ns <= stale_published_ || index % internal::kPreciseRecordInterval == 0) [[unlikely]] {
    // A tail call, so that the common path needs no stack frame.
    OnEventPreciseLocked(event, index, ns);
    return;
  }
  if (ns < last_timestamp_ns_) ns = last_timestamp_ns_;
  last_timestamp_ns_ = ns;
  if (!TryCombineFreeLocked(event, index, ns)) AppendEventLocked(event, index, ns);
  producer_lock_.FastUnlock();
}

ABSL_ATTRIBUTE_NOINLINE void FslogWriter::OnEventPreciseLocked(const AllocatorEvent& event,
                                                               uint32_t index, uint64_t published) {
  const uint64_t ns = PreciseTimestampLocked(published);
  if (!TryCombineFreeLocked(event, index, ns)) AppendEventLocked(event, index, ns);
  producer_lock_.FastUnlock();
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool FslogWriter::TryCombineFreeLocked(
    const AllocatorEvent& event, uint32_t index, uint64_t timestamp_ns) {
  if (event.kind != EventKind::kFreeCompleted || index == 0) return false;
  LogRecord& previous = current_slot_->records[index - 1];
  // Timestamps never decrease in sequence order, so the difference cannot wrap.
  if (timestamp_ns - previous.timestamp_ns > kCombineFreeWindowNs ||
      !CanCombineFree(previous, event)) {
    return false;
  }
  CombineFree(event, &previous);
  return true;
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void FslogWriter::AppendEventLocked(const AllocatorEvent& event,
                                                                        uint32_t index,
                                                                        uint64_t timestamp_ns) {
  // CommitLocked(1), with the fields kept in registers across the record's stores.
  Slot* const slot = current_slot_;
  PrefetchForWrite(slot->records, index + kPrefetchRecordsAhead);
  StoreBlockRecord(event, timestamp_ns, slot->records + index);
  current_count_ = index + 1;
  slot->count.store(index + 1, std::memory_order_release);
  ++next_sequence_;
}

ABSL_ATTRIBUTE_NOINLINE void FslogWriter::OnStatsEvent(const AllocatorEvent& event) {
  if (event.kind != EventKind::kOom) {
    OnEventSlow(event);
    return;
  }
  // The refused request's context, when the thread has one, just before it (Note [Context
  // records]).
  LogRecord records[2];
  uint32_t n = 0;
  if (thread_contexts_in_use.load(std::memory_order_relaxed) && thread_context != 0) {
    EncodeOomContext(thread_context, 0, header_.device_index, &records[n++]);
  }
  EncodeEvent(event, 0, &records[n++]);
  AppendWaiting(records, n, /*flush=*/true);
}

ABSL_ATTRIBUTE_NOINLINE void FslogWriter::OnEventNoRoom(const AllocatorEvent& event) {
  bool handed_off = false;
  LogRecord* record = ReserveSlowLocked(1, &handed_off);
  const bool wait = record == nullptr && options_.block_when_full;
  if (record != nullptr) {
    StoreBlockRecord(event, PreciseTimestampLocked(), record);  // (a chunk's first record)
    CommitLocked(1);
  } else if (!wait) {
    DropLocked();
  }
  producer_lock_.FastUnlock();
  if (handed_off) NotifyHandOff();
  if (wait) OnEventSlow(event);
}

void FslogWriter::OnEventSlow(const AllocatorEvent& event) {
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
      record.timestamp_ns = PreciseTimestampLocked();
      *out = record;
      CommitLocked(1);
    } else {
      DropLocked();
    }
  }
  if (handed_off) NotifyHandOff();
}

void FslogWriter::Mark(std::string_view text) {
  LogRecord record;
  EncodeMarker(text, ThreadId(), 0, &record);
  record.device = header_.device_index;
  AppendWaiting(&record, 1, /*flush=*/false);
}

void FslogWriter::Tag(DevicePtr ptr, uint8_t role, uint32_t context) {
  LogRecord record;
  EncodeTag(ptr, role, 0, header_.device_index, &record);
  record.words[kWordTagContext] = context;
  AppendWaiting(&record, 1, /*flush=*/false);
}

void FslogWriter::DefineString(uint32_t id, std::string_view text) {
  LogRecord records[kMaxStringRecords];
  const size_t n = EncodeString(id, text, 0, header_.device_index, records);
  AppendWaiting(records, static_cast<uint32_t>(n), /*flush=*/false);
}

void FslogWriter::DefineContext(const ContextDefinition& context) {
  LogRecord record;
  EncodeContext(context, 0, header_.device_index, &record);
  AppendWaiting(&record, 1, /*flush=*/false);
}

void FslogWriter::RecordOptionsChange(std::string_view options) {
  LogRecord records[kMaxOptionsChangeRecords];
  const size_t n = EncodeOptionsChange(options, 0, header_.device_index, records);
  AppendWaiting(records, static_cast<uint32_t>(n), /*flush=*/false);
}

void FslogWriter::RecordModel(std::string_view json) {
  LogRecord records[kMaxOptionsChangeRecords];
  const size_t n = EncodeModel(json, 0, header_.device_index, records);
  AppendWaiting(records, static_cast<uint32_t>(n), /*flush=*/false);
}

uint64_t FslogWriter::AppendWaiting(LogRecord* records, uint32_t n, bool flush) {
  for (;;) {
    bool handed_off = false;
    bool appended = false;
    uint64_t end = 0;
    {
      SlowLockHolder lock(&producer_lock_);
      if (LogRecord* out = ReserveLocked(n, &handed_off)) {
        const uint64_t now = PreciseTimestampLocked();
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

// --- Flushing and waiting for the background thread -------------------------------------------

absl::Status FslogWriter::Flush() {
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

void FslogWriter::NotifyHandOff() {
  SeqCstFence();  // pairs with WriterLoop's fence
  if (writer_sleeping_.load(std::memory_order_relaxed)) WakeWriter();
}

void FslogWriter::WakeWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    work_pending_ = true;
  }
  writer_cv_.notify_one();
}

void FslogWriter::WaitForFreeBuffer() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t generation = free_generation_;
  done_cv_.wait(lock, [&] { return free_generation_ != generation || !free_ring_.Empty(); });
}

void FslogWriter::WaitWritten(uint64_t sequence_end) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return written_end_ >= sequence_end; });
}

}  // namespace fragscope
