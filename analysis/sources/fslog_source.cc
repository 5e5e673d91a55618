#include "analysis/sources/fslog_source.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/strings/str_format.h"
#include "allocator/allocator_options.h"
#include "analysis/sources/fslog_decoder.h"
#include "analysis/sources/fslog_state.h"
#include "fslog/fslog_context.h"

namespace fragscope {
namespace {

// Cores counted by open, started sources in kAuto's budget: one per consumer, one per reader
// thread (Note [Reading on a background thread]).
std::atomic<int> cores_in_use{0};

// Takes the cores a source that starts reading needs, and says whether it reads in background.
bool TakeCores(FslogReading reading, int* taken) {
  if (reading != FslogReading::kAuto) {
    *taken = reading == FslogReading::kBackgroundThread ? 2 : 1;
    cores_in_use.fetch_add(*taken);
    return reading == FslogReading::kBackgroundThread;
  }
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  int in_use = cores_in_use.load();
  do {
    *taken = in_use + 2 <= cores ? 2 : 1;
  } while (!cores_in_use.compare_exchange_weak(in_use, in_use + *taken));
  return *taken == 2;
}

// A decoded event into a consumer's event: the fields every kind carries, and the text of the
// kinds that have one.
void CopyEvent(const TraceEvent& from, TraceEvent* to) {
  to->kind = from.kind;
  to->pool = from.pool;
  to->flags = from.flags;
  to->index = from.index;
  to->time_ns = from.time_ns;
  to->ptr = from.ptr;
  to->bytes = from.bytes;
  to->requested_bytes = from.requested_bytes;
  to->stream = from.stream;
  to->pool_id = from.pool_id;
  to->device_free_bytes = from.device_free_bytes;
  to->device_total_bytes = from.device_total_bytes;
  to->reserved_bytes = from.reserved_bytes;
  to->allocated_bytes = from.allocated_bytes;
  to->role = from.role;
  to->context = from.context;
  if (from.kind == EventKind::kMarker || from.kind == EventKind::kOptionsChange ||
      from.kind == EventKind::kModel) {
    to->text = from.text;
  }
}

}  // namespace

// One batch of the ring (Note [Reading on a background thread]).
struct FslogSource::Batch {
  std::vector<TraceEvent> events = std::vector<TraceEvent>(kBatchEvents);
  size_t count = 0;
  uint64_t end_offset = 0;  // the reader's file offset after these events
  bool last = false;        // nothing follows: the end of the log, or `error`
  absl::Status error;       // after the events
  bool warnings_changed = false;
  std::vector<std::string> warnings;  // the reader's, when changed
};

FslogSource::FslogSource(FslogReader reader, FslogReading reading)
    : reader_(std::move(reader)), reading_(reading) {
  FillInfo();
}

FslogSource::~FslogSource() {
  StopBackground();
  cores_in_use.fetch_sub(cores_taken_);
}

absl::StatusOr<std::unique_ptr<FslogSource>> FslogSource::Open(const std::string& path,
                                                               FslogReading reading) {
  absl::StatusOr<FslogReader> reader = FslogReader::Open(path);
  if (!reader.ok()) return reader.status();
  absl::StatusOr<FslogReader> state_reader = FslogReader::Open(path);
  if (!state_reader.ok()) return state_reader.status();
  auto source = std::unique_ptr<FslogSource>(new FslogSource(std::move(*reader), reading));
  if (absl::Status s = source->ReadState(*state_reader); !s.ok()) return s;
  source->info_.path = path;
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  source->file_bytes_ = ec ? 0.0 : static_cast<double>(size);
  return source;
}

absl::StatusOr<std::unique_ptr<FslogSource>> FslogSource::OpenBytes(std::string_view bytes,
                                                                    std::string name,
                                                                    FslogReading reading) {
  absl::StatusOr<FslogReader> reader = FslogReader::OpenBytes(bytes, name);
  if (!reader.ok()) return reader.status();
  absl::StatusOr<FslogReader> state_reader = FslogReader::OpenBytes(bytes, name);
  if (!state_reader.ok()) return state_reader.status();
  auto source = std::unique_ptr<FslogSource>(new FslogSource(std::move(*reader), reading));
  if (absl::Status s = source->ReadState(*state_reader); !s.ok()) return s;
  source->info_.path = std::move(name);
  source->file_bytes_ = static_cast<double>(bytes.size());
  return source;
}

void FslogSource::FillInfo() {
  const FslogHeader& h = reader_.header();
  info_.format = TraceFormat::kFslog;
  info_.device = h.device_index;
  info_.rank = h.rank;
  info_.world_size = h.world_size;
  info_.local_rank = h.local_rank;
  info_.pp_size = h.pp_size;
  info_.tp_size = h.tp_size;
  info_.device_free_at_open_bytes = h.device_free_at_open_bytes;
  info_.reserved_at_open_bytes = h.reserved_at_open_bytes;
  info_.pid = h.pid;
  info_.host = h.host;
  info_.device_name = h.device_name;
  info_.capacity_bytes = h.device_total_bytes;
  info_.capacity_source = h.device_total_bytes > 0 ? "log header" : "";
  SetTraceSettings(info_, h.allocator_options);
  if (info_.settings.ok()) {
    // The header's string is the whole of the settings (absent keys at their defaults).
    info_.recorded_settings =
        RecordedSettings{.values = *info_.settings, .where = "the log header"};
    info_.recorded_settings->keys.set();
  }
  info_.start_wall_ns = h.start_wall_ns;
  info_.records_empty_cache = h.records_empty_cache;
  info_.records_free_completed = true;
  info_.expandable_segments = info_.settings.ok() && info_.settings->expandable_segments;
  consumed_offset_ = reader_.input_offset();
}

// The leading state records, read ahead of the events by a second reader of the same log, so
// that the state is known before the first Next() (the replay rebuilds it first).
absl::Status FslogSource::ReadState(FslogReader& state_reader) {
  absl::StatusOr<std::vector<InitialSegment>> state = ReadFslogState(state_reader);
  if (!state.ok()) return state.status();
  info_.initial_segments = std::move(*state);
  return absl::OkStatus();
}

std::vector<std::string> FslogSource::warnings() const {
  return background_ ? warnings_ : reader_.warnings();
}

inline bool FslogSource::NextFast(TraceEvent* event) {
  if (holding_ && pos_ < ring_[head_].count) {
    CopyEvent(ring_[head_].events[pos_++], event);
  } else if (!decoding_here_ || !decoder_->Next(event)) {
    return false;
  }
  NoteExpandable(*event);
  return true;
}

bool FslogSource::FoldFreeCompletions() {
  if (started_) return false;  // the decoder already runs: too late to change what it delivers
  fold_completions_ = true;
  return true;
}

absl::StatusOr<bool> FslogSource::Next(TraceEvent* event) {
  if (NextFast(event)) return true;
  absl::StatusOr<bool> got = NextSlow(event);
  if (!got.ok()) {
    error_ = got.status();
    return error_;
  }
  if (*got) NoteExpandable(*event);
  return got;
}

absl::StatusOr<size_t> FslogSource::NextBatch(std::span<TraceEvent* const> events) {
  size_t n = 0;
  while (n < events.size()) {
    if (!NextFast(events[n])) {
      absl::StatusOr<bool> got = Next(events[n]);  // a boundary, the start, the end or an error
      if (!got.ok() && n == 0) return got.status();
      if (!got.ok() || !*got) break;  // errors are sticky: the next call returns it
    }
    ++n;
  }
  return n;
}

absl::StatusOr<bool> FslogSource::NextSlow(TraceEvent* event) {
  if (!error_.ok()) return error_;
  if (!started_) {
    started_ = true;
    // The name in messages: the path, set after construction.
    decoder_ = std::make_unique<Decoder>(
        info_.path, info_.device, reader_.header().start_monotonic_ns, reader_.has_combined_frees(),
        fold_completions_,
        reader_.header().version_major > 2 ||
            (reader_.header().version_major == 2 && reader_.header().version_minor >= 6),
        &contexts_);
    background_ = TakeCores(reading_, &cores_taken_);
    if (background_) {
      ring_.resize(kRingBatches);
      thread_ = std::thread([this] { ReadInBackground(); });
    }
  }
  if (!background_) {
    absl::StatusOr<bool> got = NextInline(event);
    consumed_offset_ = reader_.input_offset();
    decoding_here_ = got.ok();
    return got;
  }
  for (;;) {
    if (holding_) {
      const Batch& batch = ring_[head_];
      if (pos_ < batch.count) {
        CopyEvent(batch.events[pos_++], event);
        return true;
      }
      if (batch.last) {
        if (!batch.error.ok()) return batch.error;
        return false;
      }
    }
    NextBatch();
  }
}

absl::StatusOr<bool> FslogSource::NextInline(TraceEvent* event) {
  for (;;) {
    if (decoder_->Next(event)) return true;
    if (!decoder_->error().ok()) return decoder_->error();
    uint64_t first_sequence = 0;
    absl::StatusOr<std::span<const LogRecord>> chunk = reader_.NextChunk(&first_sequence);
    if (!chunk.ok()) return chunk.status();
    if (chunk->empty()) return false;
    decoder_->SetChunk(*chunk, first_sequence);
  }
}

void FslogSource::ReadInBackground() {
  size_t tail = 0;  // the next batch to fill; the consumer starts at ring_[0] too
  size_t warnings_seen = 0;
  for (;;) {
    {
      // A full ring is refilled once half of it is free: the thread wakes once per
      // kRingBatches / 2 batches, not once per batch.
      std::unique_lock<std::mutex> lock(mu_);
      if (ready_ == kRingBatches) {
        space_cv_.wait(lock, [this] { return stop_ || ready_ <= kRingBatches / 2; });
      }
      if (stop_) return;
    }
    Batch& batch = ring_[tail];
    batch.count = 0;
    batch.last = false;
    batch.error = absl::OkStatus();
    while (batch.count < kBatchEvents) {
      absl::StatusOr<bool> got = NextInline(&batch.events[batch.count]);
      if (!got.ok() || !*got) {
        batch.last = true;
        if (!got.ok()) batch.error = got.status();
        break;
      }
      ++batch.count;
    }
    batch.end_offset = reader_.input_offset();
    batch.warnings_changed = reader_.warnings().size() != warnings_seen;
    if (batch.warnings_changed) {
      batch.warnings = reader_.warnings();
      warnings_seen = batch.warnings.size();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++ready_;
    }
    ready_cv_.notify_one();
    if (batch.last) return;
    tail = (tail + 1) % kRingBatches;
  }
}

void FslogSource::NextBatch() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (holding_) {  // hand the finished batch back to the reader thread
      --ready_;
      head_ = (head_ + 1) % kRingBatches;
      holding_ = false;
      if (ready_ == kRingBatches / 2) space_cv_.notify_one();
    }
    ready_cv_.wait(lock, [this] { return ready_ > 0; });
  }
  holding_ = true;
  pos_ = 0;
  const Batch& batch = ring_[head_];
  consumed_offset_ = batch.end_offset;
  if (batch.warnings_changed) warnings_ = batch.warnings;
}

void FslogSource::StopBackground() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  space_cv_.notify_one();
  thread_.join();
}

}  // namespace fragscope
