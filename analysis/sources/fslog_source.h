// FslogSource: an .fslog event log (fslog/FORMAT.md) as a TraceSource.
//
// Streams the file through FslogReader::NextChunk, so memory stays bounded whatever the log's
// size. The header gives the device, rank, capacity and allocator options. Options-change
// continuation records are folded into one event; a combined free record (Note [Combined free
// records]) is two events, or one if asked (FoldFreeCompletions). Events on another device than the
// header's are an error ("mixed devices"), as are records of unknown kinds from a newer major
// version (the reader refuses those files up front). The log's leading state records (Note [State
// records] in fslog_format.h) are read at Open into TraceInfo::initial_segments; they are
// not events. Every numeric field of a delivered event is
// set (0 where its kind carries nothing); text is set for markers and options changes only.
//
// Note [Reading on a background thread]
// Reading, checking (CRC) and decoding a log costs about a third of a replay. With a background
// reader (FslogReading), a thread started at the first Next() does that work into a bounded ring
// of kRingBatches batches of up to kBatchEvents decoded events, and Next() only copies events out
// of the batch at the head of the ring, so that decoding overlaps the replay's allocator work.
// A full ring is refilled once half of it is free, so the thread wakes once per kRingBatches / 2
// batches. Memory: the ring (about 1 MiB) plus the reader's buffer. The events, their order and
// every error are the same as on the calling thread: an error (with the file offset the reader
// names) ends the batch it occurs in and is returned after the events before it, and stays
// returned. Early stop: destroying the source stops the thread at its next batch and joins it.
// The reader thread pays only when a core is free for it. kAuto (the default) counts, process
// wide, one core per source that has started reading and one per reader thread, and gives a
// source a reader thread when the count stays within std::thread::hardware_concurrency(): a
// single replay (analyze, verify) reads in the background on a machine of two cores or more, a
// sweep whose workers fill the cores reads on its replay threads (the first worker may get a
// reader while cores are free). On a machine whose other cores are busy with other processes the
// reader competes with them and can cost wall time; kCallingThread avoids it.
//
// Contexts (.fslog 2.6, Note [Context records] in fslog/fslog_context.h): the log's string and
// context records are read as they come and are not events; an alloc or tag event points at its
// BlockContext, which lives as long as the source. An id used before a record defines it, an id
// defined twice or a torn string is an error naming the record.
//
// Threads: Next(), warnings() and Progress() are for one consumer thread (the one that reads);
// info() does not change once Next() has been called, except expandable_segments, which the
// consumer's Next() sets when it delivers the first map or unmap.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "absl/status/statusor.h"
#include "analysis/sources/trace_event.h"
#include "fslog/fslog_reader.h"

namespace fragscope {

// Where FslogSource reads and decodes (Note [Reading on a background thread]).
enum class FslogReading : uint8_t {
  kAuto,              // a background thread when a core is free for it
  kBackgroundThread,  // always a background thread
  kCallingThread,     // in Next(), on the caller's thread
};

// The strings and contexts a log has defined so far (Note [Context records]).
struct FslogContexts {
  absl::flat_hash_map<uint32_t, std::string> strings;
  absl::flat_hash_map<uint32_t, const BlockContext*> by_id;
  std::deque<BlockContext> storage;
};

class FslogSource final : public TraceSource {
 public:
  static constexpr size_t kBatchEvents = 1024;
  static constexpr size_t kRingBatches = 8;

  static absl::StatusOr<std::unique_ptr<FslogSource>> Open(
      const std::string& path, FslogReading reading = FslogReading::kAuto);
  // A log held in memory (tests). REQUIRES: `bytes` outlives the source.
  static absl::StatusOr<std::unique_ptr<FslogSource>> OpenBytes(
      std::string_view bytes, std::string name = "<memory>",
      FslogReading reading = FslogReading::kAuto);
  ~FslogSource() override;

  absl::StatusOr<bool> Next(TraceEvent* event) override;
  absl::StatusOr<size_t> NextBatch(std::span<TraceEvent* const> events) override;
  // Folds the halves of the log's combined free records (Note [Combined free records]): those are
  // the frees that completed at once.
  bool FoldFreeCompletions() override;
  std::vector<std::string> warnings() const override;
  double Progress() const override {
    return file_bytes_ == 0 ? 0.0 : static_cast<double>(consumed_offset_) / file_bytes_;
  }
  // Whether this source reads on a background thread (decided at the first Next()).
  bool reads_in_background() const { return background_; }

 private:
  class Decoder;
  struct Batch;

  FslogSource(FslogReader reader, FslogReading reading);
  void FillInfo();
  absl::Status ReadState(FslogReader& state_reader);
  // The common cases of Next(): the next event of the batch in hand, or of the chunk being
  // decoded on this thread. False: Next() must take the slow path.
  bool NextFast(TraceEvent* event);
  void NoteExpandable(const TraceEvent& event) {
    if (event.kind == EventKind::kSegmentMap || event.kind == EventKind::kSegmentUnmap) {
      info_.expandable_segments = true;
    }
  }
  // Everything but the next event of the batch in hand: errors, the start, the calling-thread
  // path, the next batch.
  absl::StatusOr<bool> NextSlow(TraceEvent* event);
  // Reads and decodes the next event on this thread (the consumer's, or the reader thread).
  absl::StatusOr<bool> NextInline(TraceEvent* event);
  // The background path: the thread's loop, and the consumer's move to the next batch (which
  // waits for it). REQUIRES for NextBatch: the batch held, if any, is not the last.
  void ReadInBackground();
  void NextBatch();
  void StopBackground();

  FslogReader reader_;  // the reader thread's while it runs
  // The decoder's (filled on the thread that decodes); events point into `storage`, which never
  // moves an element, and are handed to the consumer after the element is made.
  FslogContexts contexts_;
  std::unique_ptr<Decoder> decoder_;
  FslogReading reading_;
  bool started_ = false;
  bool background_ = false;
  bool decoding_here_ = false;  // started on the calling thread, and no error
  bool fold_completions_ = false;
  int cores_taken_ = 0;  // counted against kAuto's budget while open
  double file_bytes_ = 0;
  uint64_t consumed_offset_ = 0;  // file offset of the data delivered so far
  absl::Status error_;            // sticky

  // Background path. The ring: batches [head_, head_ + ready_) are decoded, the first one is the
  // consumer's; the rest are the thread's to fill.
  // (mu_ is a std::mutex: the system Abseil is not built with ThreadSanitizer, which then cannot
  // see absl::Mutex's happens-before edges.)
  std::vector<Batch> ring_;
  std::mutex mu_;
  std::condition_variable ready_cv_;   // the consumer waits here for a decoded batch
  std::condition_variable space_cv_;   // the reader thread waits here for a free batch, or stop_
  size_t ready_ = 0;                   // guarded by mu_
  bool stop_ = false;                  // guarded by mu_
  size_t head_ = 0;                    // consumer only
  size_t pos_ = 0;                     // consumer only: the next event in ring_[head_]
  bool holding_ = false;               // consumer only: ring_[head_] is being read
  std::vector<std::string> warnings_;  // consumer only: the reader's, as of the batch read
  std::thread thread_;
};

}  // namespace fragscope
