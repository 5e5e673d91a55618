// FslogWriter: an AllocatorObserver that records every allocator event in an .fslog file
// (format: fslog_format.h, FORMAT.md) at a few nanoseconds per event.
//
// Note [Event log buffering]
// The writer owns `buffer_count` pre-allocated, pre-faulted 64 KiB chunk buffers. Exactly one is
// "current": records are appended to it in place. When it is full, or when the background thread's
// periodic tick (every flush_interval) finds records in it, it is "handed off": it gets the next
// file offset and goes to a ready queue; the background thread seals it (CRCs) and pwrite()s it
// at that offset, then recycles it. Offsets are reserved in sequence order, so the file's chunk
// order is the record order no matter who writes a chunk (the background thread, a flush or the
// fatal-signal handler), and writing a chunk twice writes the same bytes.
//
// Synchronization: `producer_lock_`, an AsymmetricLock (asymmetric_lock.h), guards the current
// buffer, the sequence counter, the last timestamp and the TSC mapping. OnEvent, already serialized
// by the allocator's lock, takes its fast side: plain stores and a load, no locked instruction and
// no fence, so the previous record's stores need not drain first (a locked instruction per event
// cost 20-35 ns on a KVM Xeon). Mark(), RecordOptionsChange(), Flush(), the background tick
// (every flush_interval) and the signal handler take its slow side (a membarrier system call:
// microseconds); OnEvent falls back to the slow side only when one of those holds the lock at that
// moment. No holder does I/O or blocks on the disk while holding it.
// Buffers move between the producer and the background thread through two
// single-producer/single-consumer rings, so swapping buffers takes no mutex either. While buffers
// keep coming (within kWriterPollWindow of its last write) the background thread polls the ready
// ring every kWriterPollPeriod, so hand-offs cost the producer nothing more; once idle it sleeps
// on `writer_cv_` with `writer_sleeping_` set, and only then does a hand-off wake it (a futex wake,
// which in a VM with idle vCPUs costs the waker tens of microseconds).
// (`mu_` is a std::mutex, not absl::Mutex: the system Abseil is not built with ThreadSanitizer,
// which then cannot see absl::Mutex's happens-before edges, and this is the code TSan must check.)
//
// The hot path (OnEvent with room in the current chunk) is about 45 instructions and no call: the
// fast side, one load of the published clock instead of a clock read (while the background thread
// polls it publishes CLOCK_MONOTONIC every poll period; see Note [Coarse event timestamps] in
// fslog_clock.h for the resolution this gives), a write prefetch of the lines a few records
// ahead (Note [Prefetching the chunk for writing] in the .cc), and the record written as five
// aligned 16-byte stores, copied from the AllocatorEvent, whose first 64 bytes are the
// block-layout record's bytes 8..71 (checked at compile time; oom and empty_cache records, of the
// stats layout, take the slow path). A free_completed that follows its free_requested within
// kCombineFreeWindowNs goes into that record instead (Note [Combined free records] in
// fslog_format.h): three records per immediate malloc+free become two.
//
// Files: fslog_writer.cc is the producer side (OnEvent, markers, flushes),
// fslog_writer_thread.cc the background thread and the fatal-signal path,
// fslog_writer_file.cc the file, its header and the buffer memory, fslog_writer_zstd.cc
// compressed chunks; fslog_clock.h holds the clocks, fslog_slot_ring.h the rings,
// fslog_signals.h the process-wide registry.
//
// When all buffers are waiting to be written (the disk is slower than the event rate), OnEvent
// drops the record and counts it (dropped_records(); readers see the gap in sequence numbers):
// blocking would stall the allocator on I/O. An OOM event is never dropped: OnEvent(kOom) waits for
// a buffer if needed and returns only once the OOM record and everything before it is written to
// the file (the failing allocation is already the slow path). Mark() and RecordOptionsChange()
// wait for a buffer rather than drop. FslogWriterOptions::block_when_full makes OnEvent wait
// too.
//
// Durability: data is on disk (in the kernel's page cache, so it survives the process, not a
// power loss; no fsync) after an OOM, Flush(), the periodic tick, destruction, exit() (atexit),
// and, best effort, a fatal signal. After kill -9 the records lost are those of the current buffer
// (at most one chunk: 64 KiB, 818 records, and at most about flush_interval of events) plus the
// buffers handed off but not yet written: none while the disk keeps up with the event rate, at
// most buffer_count - 1 chunks when it does not (then records are also being dropped).
//
// Compression (FslogWriterOptions::zstd_level): the background thread compresses each chunk
// into a zstd frame before writing it, so OnEvent is the same code either way; the file's chunks
// then sit at offsets the background thread assigns (Note [Writing compressed chunks] in
// fslog_writer_zstd.cc), and the fatal-signal path writes what is left uncompressed.
//
// Fatal signals (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGTERM): the handler takes the lock's
// slow side (bounded; it proceeds without it if the interrupted thread holds it), copies each
// not-yet-written buffer's published records into a pre-allocated scratch chunk, seals it
// (CRC32C: pure computation) and writes it with lseek()+write() at its reserved offset. Nothing in
// it allocates or locks a mutex. It then chains to the previous handler (re-raising under SIG_DFL).
//
// A writer must not be used across fork(): the child has no background thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "allocator/allocator_events.h"
#include "fslog/asymmetric_lock.h"
#include "fslog/fslog_clock.h"
#include "fslog/fslog_context.h"
#include "fslog/fslog_format.h"
#include "fslog/fslog_slot_ring.h"
#include "fslog/fslog_zstd.h"

namespace fragscope {

// What the writer's caller knows about the device; the writer adds pid, rank, host and times.
struct FslogHeaderInfo {
  std::string device_name;
  uint64_t device_total_bytes = 0;
  int32_t device_index = 0;
  // The allocator's options, e.g. FormatAllocatorOptions(options) or PYTORCH_CUDA_ALLOC_CONF.
  std::string allocator_options;
  // The device's free memory as the log opens (cudaMemGetInfo), and the bytes this process's
  // allocator had reserved then, when the caller knows them (Note [Who wrote the log]).
  std::optional<uint64_t> device_free_bytes;
  uint64_t reserved_bytes = 0;
  // false when the caller cannot see empty_cache calls (kHeaderFlagNoEmptyCacheRecords).
  bool records_empty_cache = true;
};

struct FslogWriterOptions {
  // Chunk buffers of 64 KiB each (see Note [Event log buffering]); at least 2.
  int buffer_count = 8;
  // Records wait at most about this long in memory before the background thread writes them.
  absl::Duration flush_interval = absl::Milliseconds(50);
  // false: OnEvent drops and counts records when every buffer awaits writing (never blocks the
  // allocator on I/O). true: OnEvent waits for a buffer (complete logs, e.g. for tests).
  bool block_when_full = false;
  // Install the fatal-signal handlers (once per process, on the first Open that asks).
  bool install_signal_handlers = true;
  // Timestamp with the TSC when the kernel's clocksource is the TSC (else clock_gettime).
  bool allow_tsc_clock = true;
  // Most records take the background thread's published time (Note [Coarse event timestamps]:
  // resolution about 20 us while events stream in). false: every record reads the clock itself
  // (nanoseconds, 6-25 ns more per event).
  bool coarse_timestamps = true;
  // 0: chunks are written as they are. 1 to 19: the background thread compresses each chunk into
  // a zstd frame at this level before writing it (Note [Compressed chunks] in
  // fslog_format.h); OnEvent does the same work either way. The thread must keep up with the
  // event rate (bench/RESULTS.md), or records are dropped as when the disk falls behind.
  int zstd_level = 0;
  // Testing only: the background thread sleeps this long before each chunk write.
  absl::Duration write_delay_for_testing = absl::ZeroDuration();
};

// The rank used for %r and the header: RANK, else LOCAL_RANK, else 0 (non-numbers are ignored).
int32_t RankFromEnvironment();

// The environment variables that give the hooks the job's pipeline- and tensor-parallel sizes
// (Note [Who wrote the log] in fslog_format.h); positive integers, else not given.
inline constexpr char kPipelineParallelSizeEnv[] = "FRAGSCOPE_PP_SIZE";
inline constexpr char kTensorParallelSizeEnv[] = "FRAGSCOPE_TP_SIZE";

// Expands %p (pid), %r (rank) and %% in `pattern`. Any other use of % is an error.
absl::StatusOr<std::string> ExpandPathPattern(std::string_view pattern, int64_t pid, int32_t rank);

class FslogWriter : public AllocatorObserver {
 public:
  // Creates (truncating) the file named by expanding `path_pattern`, writes the header and starts
  // the background thread. Errors: kInvalidArgument for a bad pattern or options, the errno
  // mapping of open()/write() failures with the path.
  static absl::StatusOr<std::unique_ptr<FslogWriter>> Open(std::string_view path_pattern,
                                                           const FslogHeaderInfo& info,
                                                           const FslogWriterOptions& options = {});

  FslogWriter(const FslogWriter&) = delete;
  FslogWriter& operator=(const FslogWriter&) = delete;
  // Writes everything recorded, stops the background thread and closes the file.
  ~FslogWriter() override;

  // Appends the event. Never allocates and never does I/O, except for kOom (see the Note).
  // REQUIRES: calls are serialized (the allocator calls it under its lock).
  void OnEvent(const AllocatorEvent& event) override;

  // A user annotation, e.g. "step 12 / forward"; longer than kMaxMarkerTextBytes is truncated
  // and flagged. Thread-safe; may briefly wait for a buffer.
  void Mark(std::string_view text);
  // The role of the live block at `ptr` (Note [Tag records]): a tag record; with `context`, the
  // block's context from now on too (Note [Context records]).
  void Tag(DevicePtr ptr, uint8_t role, uint32_t context = 0);

  // Who holds the memory (Note [Context records]): string `id` of `text` and a context, each
  // defined once per log before any record names it. Thread-safe; may briefly wait for a buffer.
  void DefineString(uint32_t id, std::string_view text);
  void DefineContext(const ContextDefinition& context);
  // The context of the allocations the calling thread makes from now on (0: none), written in
  // their alloc records by every writer. Cost when no thread ever set one: one relaxed load per
  // event; else a thread-local read per alloc.
  static void SetThreadContext(uint32_t context);

  // Records that the allocator now runs with `options` (at most kMaxOptionsChangeTextBytes kept).
  // Thread-safe; may briefly wait for a buffer.
  void RecordOptionsChange(std::string_view options);

  // Records the model the job runs, as JSON (Note [Model records]; at most kMaxModelTextBytes
  // kept). Thread-safe; may briefly wait for a buffer.
  void RecordModel(std::string_view json);

  // Returns once every record appended before the call is written to the file. Returns the
  // first write error the writer met, if any. Thread-safe.
  absl::Status Flush();

  const std::string& path() const { return path_; }
  const FslogHeader& header() const { return header_; }
  // Records dropped because every buffer was waiting to be written.
  uint64_t dropped_records() const { return dropped_.load(std::memory_order_relaxed); }

  // Fatal-signal path; public for the handler in the .cc only. Async-signal-safe.
  void EmergencyFlush() noexcept ABSL_NO_THREAD_SAFETY_ANALYSIS;

 private:
  // One chunk buffer. Invariant: it is in exactly one place: the free ring, `current_`, or the
  // ready ring.
  // Cache-line aligned: the producer stores `count` on every event; the background thread reads
  // other slots.
  struct alignas(64) Slot {
    ChunkHeader* chunk = nullptr;  // the header, followed in memory by the records
    LogRecord* records = nullptr;
    // Records published by the producer (release); records below it never change until recycled.
    std::atomic<uint32_t> count{0};
    std::atomic<uint64_t> first_sequence{0};  // set when the slot becomes current
    std::atomic<uint64_t> file_offset{0};     // set at hand-off
  };

  FslogWriter() = default;

  // --- fslog_writer_file.cc: the file, its header, buffer memory ---
  absl::Status Init(std::string path, const FslogHeaderInfo& info,
                    const FslogWriterOptions& options);
  absl::Status WriteAt(const void* data, size_t size, uint64_t offset);

  // --- fslog_writer.cc: the producer side ---
  // Note [Combined free records]: folds a free_completed into the free_requested record at
  // `index` - 1 when that is its block's and `timestamp_ns` is within kCombineFreeWindowNs of it;
  // returns whether it did (then nothing is appended).
  bool TryCombineFreeLocked(const AllocatorEvent& event, uint32_t index, uint64_t timestamp_ns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(producer_lock_);
  // Stores the event's record at `index` of the current chunk and commits it.
  void AppendEventLocked(const AllocatorEvent& event, uint32_t index, uint64_t timestamp_ns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(producer_lock_);
  // OnEvent for a record that reads the precise clock (Note [Coarse event timestamps]); `published`
  // is the published clock's value OnEvent saw. Releases the fast side.
  void OnEventPreciseLocked(const AllocatorEvent& event, uint32_t index, uint64_t published)
      ABSL_UNLOCK_FUNCTION(producer_lock_);
  // The precise clock, never below the previous record's timestamp. `published`: the published
  // clock's value the caller saw (0 if none), marked stale if it is too old.
  uint64_t PreciseTimestampLocked(uint64_t published = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(producer_lock_);
  // OnEvent for the stats-layout kinds. kOom: appends the record, hands its chunk off and waits
  // until it is written. kEmptyCache (rare, and already slow): through OnEventSlow.
  void OnStatsEvent(const AllocatorEvent& event);
  // OnEvent when the current chunk is full or absent: hands it off, takes a free buffer, or
  // drops (or waits). Releases the fast side.
  void OnEventNoRoom(const AllocatorEvent& event) ABSL_UNLOCK_FUNCTION(producer_lock_);
  // OnEvent through the slow side: when a slow holder had the lock, or to wait for a buffer.
  void OnEventSlow(const AllocatorEvent& event);
  // Room for `n` consecutive records in the current chunk, or nullptr if no buffer is free.
  // Sets *handed_off when a buffer went to the ready ring (the caller then wakes the writer).
  LogRecord* ReserveLocked(uint32_t n, bool* handed_off)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(producer_lock_);
  LogRecord* ReserveSlowLocked(uint32_t n, bool* handed_off)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(producer_lock_);
  void CommitLocked(uint32_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(producer_lock_);
  // Moves a non-empty current buffer to the ready ring; returns whether it did.
  bool HandOffLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(producer_lock_);
  void DropLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(producer_lock_);
  // Appends `n` encoded records (timestamps and sequence are set here), waiting for a buffer if
  // none is free. Returns the sequence number after the last record.
  uint64_t AppendWaiting(LogRecord* records, uint32_t n, bool flush);
  // After a hand-off on the hot path: wakes the background thread only if it sleeps.
  void NotifyHandOff();
  // Wakes the background thread unconditionally (flushes, OOM, stop).
  void WakeWriter();
  void WaitForFreeBuffer();
  void WaitWritten(uint64_t sequence_end);

  // --- fslog_writer_thread.cc: the background thread and the fatal-signal path ---
  void WriterLoop();
  // Writes every ready chunk; returns how many it wrote. `tick`: publish the time before each.
  int WriteReadyChunks(bool tick);
  // Writes records [skip, count) of `slot` as a chunk at `offset`; returns the bytes written (0
  // on failure or when there is nothing to write).
  size_t WriteChunkFromSignal(const Slot& slot, uint32_t skip, uint32_t count,
                              uint64_t offset) noexcept;

  // --- fslog_writer_zstd.cc: compressed chunks (Note [Writing compressed chunks]) ---
  // Compresses the sealed chunk of `slot` (`count` records from `first`) and appends it.
  absl::Status WriteCompressedChunk(Slot& slot, uint32_t count, uint64_t first);
  // EmergencyFlush when chunks are compressed.
  void EmergencyFlushCompressed() noexcept;

  std::string path_;
  FslogHeader header_;
  FslogWriterOptions options_;
  int fd_ = -1;
  int registry_index_ = -1;

  // Buffer memory: buffer_count slots plus the signal handler's scratch chunk, page aligned.
  void* memory_ = nullptr;
  size_t slot_count_ = 0;
  std::unique_ptr<Slot[]> slots_;
  ChunkHeader* scratch_chunk_ = nullptr;
  internal::SlotRing free_ring_;   // background thread -> producer
  internal::SlotRing ready_ring_;  // producer -> background thread

  // See Note [Event log buffering]: OnEvent takes the fast side, everything else the slow side.
  AsymmetricLock producer_lock_;
  // The producer's hot fields, on one cache line of their own (away from the rings and mu_).
  alignas(64) Slot* current_slot_ ABSL_GUARDED_BY(producer_lock_) = nullptr;
  // Records in the current slot; kMaxChunkRecords when there is none (forces the slow path).
  uint32_t current_count_ ABSL_GUARDED_BY(producer_lock_) = kMaxChunkRecords;
  bool use_tsc_ = false;  // set by Init
  uint64_t next_sequence_ ABSL_GUARDED_BY(producer_lock_) = 0;
  uint64_t last_timestamp_ns_ ABSL_GUARDED_BY(producer_lock_) = 0;
  // The last published clock value found more than kMaxPublishedAgeNs old (0: none); records read
  // the clock while the published clock shows it (or 0).
  uint64_t stale_published_ ABSL_GUARDED_BY(producer_lock_) = 0;
  internal::TscMapping tsc_ ABSL_GUARDED_BY(producer_lock_);
  // Index of current_slot_, or -1. Atomic only for the signal handler.
  std::atomic<int32_t> current_ ABSL_GUARDED_BY(producer_lock_){-1};
  // End sequence of the last handed-off chunk: what a flush waits for.
  uint64_t handed_off_end_ ABSL_GUARDED_BY(producer_lock_) = 0;
  std::atomic<uint64_t> next_file_offset_ ABSL_GUARDED_BY(producer_lock_){0};
  // Written under producer_lock_ (either side); read by anyone.
  std::atomic<uint64_t> dropped_{0};
  internal::TscSample calibration_start_;  // set by Init, then read by the background thread

  // The background thread's clock, loaded by OnEvent (Note [Coarse event timestamps]).
  internal::PublishedClock published_clock_;

  // The background thread is (about to be) blocked on writer_cv_. Hand-offs read it after a
  // seq_cst fence, the thread sets it and fences before its last look at the ready ring, so one of
  // the two always sees the other (no lost wake-up).
  alignas(64) std::atomic<bool> writer_sleeping_{false};
  // Coordination with the background thread. Everything below is guarded by mu_.
  // Compressed chunks (Note [Writing compressed chunks]): the compressor and a scratch chunk of
  // the background thread, the end of the file, and the hand-shake with the fatal-signal path.
  std::unique_ptr<internal::ZstdChunkCompressor> compressor_;
  std::unique_ptr<uint64_t[]> partial_chunk_;        // kMaxChunkBytes, for a chunk's unwritten tail
  std::atomic<uint64_t> compressed_end_{0};          // where the next chunk goes
  std::atomic<uint64_t> compressed_written_end_{0};  // sequence end of the chunks written
  std::atomic<bool> background_writing_{false};
  std::atomic<bool> emergency_{false};
  std::atomic<uint64_t> emergency_end_{0};  // sequence end of what the signal path wrote

  std::mutex mu_;
  std::condition_variable writer_cv_;  // the background thread waits here for work or stop_
  std::condition_variable done_cv_;    // flushes and buffer waits wait here for the writer
  bool work_pending_ = false;
  bool stop_ = false;
  uint64_t written_end_ = 0;      // every sequence below it is written
  uint64_t free_generation_ = 0;  // bumped when a slot is recycled
  absl::Status io_status_;
  std::thread thread_;
};

}  // namespace fragscope
