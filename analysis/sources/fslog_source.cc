#include "analysis/sources/fslog_source.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/strings/str_format.h"
#include "allocator/allocator_options.h"
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

// Turns the records of one chunk into TraceEvents: folds options-change continuations, passes
// over kinds from newer minor versions, rebases times on the log's start, refuses other devices.
// Used by one thread at a time (the consumer, or the reader thread).
class FslogSource::Decoder {
 public:
  Decoder(std::string name, int32_t device, uint64_t start_monotonic_ns, bool combined_frees,
          bool fold_completions, bool alloc_contexts, FslogContexts* contexts)
      : name_(std::move(name)),
        device_(device),
        time_base_ns_(start_monotonic_ns),
        have_time_base_(start_monotonic_ns > 0),
        combined_frees_(combined_frees),
        fold_completions_(fold_completions),
        alloc_contexts_(alloc_contexts),
        contexts_(contexts) {}

  void SetChunk(std::span<const LogRecord> chunk, uint64_t first_sequence) {
    chunk_ = chunk;
    first_sequence_ = first_sequence;
    pos_ = 0;
    pending_completion_ = nullptr;
  }

  // The chunk's next event into *event; false when the chunk has no more or on an error (then
  // error() says which: mixed devices).
  bool Next(TraceEvent* event);
  const absl::Status& error() const { return error_; }

 private:
  // Next's rare cases, out of line: a marker's or options change's text (record `i` of the
  // chunk, then its continuations); the error for a record of another device (returns false).
  bool DecodeText(const LogRecord& r, size_t i, TraceEvent* event);
  bool FailMixedDevices(const LogRecord& r, const TraceEvent& event);
  bool FailLateState(const LogRecord& r, size_t i);
  bool FailStrayOomContext(const LogRecord& r, size_t i);
  // A string or context record (Note [Context records]): defines it; false on an error.
  bool Define(const LogRecord& r, size_t i);
  // The context record `record` (of kind `kind`) names by `id`, into *context; false (the error)
  // for an id no earlier record defines.
  bool FindContext(uint64_t id, std::string_view kind, uint64_t record,
                   const BlockContext** context);

  std::string name_;
  int32_t device_;
  uint64_t time_base_ns_;
  bool have_time_base_;
  bool combined_frees_;    // format 2.0 or later: Note [Combined free records]
  bool fold_completions_;  // a combined record is one event (kEventFlagCompletionFolded)
  std::span<const LogRecord> chunk_;
  uint64_t first_sequence_ = 0;
  size_t pos_ = 0;
  // A combined free whose free_requested half Next() returned last: the free_completed is next.
  const LogRecord* pending_completion_ = nullptr;
  uint64_t combined_before_ = 0;  // combined free records whose second event was delivered
  bool past_state_ = false;       // a record other than a state record was seen
  bool alloc_contexts_;           // format 2.6 or later: an alloc's word 6 is its context
  FslogContexts* contexts_;       // the log's strings and contexts (Note [Context records])
  // The context an oom_context record gave the oom record that must come next, and its number.
  const BlockContext* oom_context_ = nullptr;
  uint64_t oom_context_record_ = 0;
  absl::Status error_;
};

bool FslogSource::Decoder::Next(TraceEvent* event) {
  if (pending_completion_ != nullptr) {
    // The same block, index and time as the free_requested returned last (into another slot).
    const LogRecord& r = *std::exchange(pending_completion_, nullptr);
    ++combined_before_;  // this record's first event took its own number
    event->index = first_sequence_ + static_cast<size_t>(&r - chunk_.data()) + combined_before_;
    event->time_ns = r.timestamp_ns - time_base_ns_;
    event->kind = EventKind::kFreeCompleted;
    event->pool = static_cast<PoolKind>(r.pool & 1);
    event->flags = CombinedFreeCompletedFlags(r.flags);
    event->ptr = r.words[kWordPtr];
    event->bytes = r.words[kWordBytes];
    event->requested_bytes = r.words[kWordRequestedBytes];
    event->stream = r.words[kWordStream];
    event->pool_id = UnpackPoolId(r.words[kWordPoolId]);
    event->device_free_bytes = event->device_total_bytes = 0;
    event->reserved_bytes = event->allocated_bytes = 0;
    return true;
  }
  while (pos_ < chunk_.size()) {
    const size_t i = pos_++;
    const LogRecord& r = chunk_[i];
    const auto kind = static_cast<EventKind>(r.kind);
    if ((UsesLongTextLayout(r.kind) || r.kind == kRecordKindString) &&
        (r.flags & kRecordFlagContinuation) != 0) {
      continue;  // folded into its first record below
    }
    if (IsContextRecord(r.kind)) [[unlikely]] {
      past_state_ = true;
      if (!Define(r, i)) return false;
      continue;
    }
    if (r.kind < static_cast<uint8_t>(EventKind::kAlloc) ||
        (r.kind > static_cast<uint8_t>(EventKind::kMarker) && kind != EventKind::kModel &&
         kind != EventKind::kTag)) {
      // State records were read at Open (Note [State records]); a kind from a newer minor
      // version is passed over.
      if (IsStateRecord(r.kind) && past_state_) return FailLateState(r, i);
      past_state_ = past_state_ || !IsStateRecord(r.kind);
      continue;
    }
    if (kind == EventKind::kTag && !AllocationRoleOf(r.words[kWordTagRole]).has_value()) {
      continue;  // a role this reader does not know (Note [Tag records])
    }
    past_state_ = true;
    if (oom_context_ != nullptr && kind != EventKind::kOom) [[unlikely]] {
      return FailStrayOomContext(r, i);
    }
    if (!have_time_base_ || r.timestamp_ns < time_base_ns_) {
      time_base_ns_ = r.timestamp_ns;
      have_time_base_ = true;
    }
    event->index = first_sequence_ + i + combined_before_;  // LogEntry::sequence's numbering
    event->time_ns = r.timestamp_ns - time_base_ns_;
    event->kind = kind;
    event->pool = static_cast<PoolKind>(r.pool & 1);
    event->flags =
        r.flags & static_cast<uint8_t>(~kEventFlagCompletionFolded);  // only a fold sets it
    event->ptr = event->bytes = event->requested_bytes = event->stream = 0;
    event->device_free_bytes = event->device_total_bytes = 0;
    event->reserved_bytes = event->allocated_bytes = 0;
    event->pool_id = kDefaultPoolId;
    event->role = AllocationRole::kUnknown;
    event->context = nullptr;
    if (kind == EventKind::kMarker || UsesLongTextLayout(r.kind)) {
      return DecodeText(r, i, event);  // tail calls: the path of block events needs no frame
    }
    if (r.device != device_) return FailMixedDevices(r, *event);
    const uint64_t* w = r.words;
    if (kind == EventKind::kTag) {
      event->ptr = w[kWordPtr];
      event->role = static_cast<AllocationRole>(w[kWordTagRole]);  // checked above
      return w[kWordTagContext] == 0 ||
             FindContext(w[kWordTagContext], "tag", event->index, &event->context);
    }
    event->bytes = w[kWordBytes];
    event->requested_bytes = w[kWordRequestedBytes];
    event->stream = w[kWordStream];
    event->pool_id = UnpackPoolId(w[kWordPoolId]);
    if (UsesStatsLayout(r.kind)) {
      event->context = std::exchange(oom_context_, nullptr);  // kOom: its request's, if named
      event->device_free_bytes = w[kWordDeviceFreeBytes];
      event->device_total_bytes = w[kWordDeviceTotalBytes];
      event->reserved_bytes = w[kWordReservedBytes];
      event->allocated_bytes = w[kWordAllocatedBytes];
    } else {
      event->ptr = w[kWordPtr];
      // An alloc's word 6 names its context (2.6; 0 in every earlier alloc record).
      if (kind == EventKind::kAlloc && w[kWordAllocContext] != 0 && alloc_contexts_) [[unlikely]] {
        return FindContext(w[kWordAllocContext], "alloc", event->index, &event->context);
      }
      if (combined_frees_ && IsCombinedFree(r)) {
        event->flags = CombinedFreeRequestedFlags(r.flags);
        if (fold_completions_) {
          event->flags |= kEventFlagCompletionFolded;
          ++combined_before_;  // the completion's number, delivered in this event
        } else {
          pending_completion_ = &r;
        }
      }
    }
    return true;
  }
  return false;
}

ABSL_ATTRIBUTE_NOINLINE bool FslogSource::Decoder::DecodeText(const LogRecord& r, size_t i,
                                                              TraceEvent* event) {
  if (r.kind == static_cast<uint8_t>(EventKind::kMarker)) {
    event->text.assign(MarkerText(r));
    return true;
  }
  event->text.assign(OptionsChangeTextPart(r));
  for (size_t j = i + 1; j < chunk_.size(); ++j) {
    const LogRecord& c = chunk_[j];
    if (c.kind != r.kind || (c.flags & kRecordFlagContinuation) == 0) break;
    event->text.append(OptionsChangeTextPart(c));
  }
  return true;
}

ABSL_ATTRIBUTE_NOINLINE bool FslogSource::Decoder::Define(const LogRecord& r, size_t i) {
  const uint64_t record = first_sequence_ + i + combined_before_;
  auto fail = [&](const std::string& why) {
    error_ = absl::InvalidArgumentError(
        absl::StrFormat("%s: bad %s record %d: %s", name_, RecordKindName(r.kind), record, why));
    pos_ = chunk_.size();
    return false;
  };
  if (r.kind == kRecordKindString) {
    const uint64_t id = r.words[kWordStringId];
    if (id == 0 || id > UINT32_MAX)
      return fail(absl::StrFormat("string id %d is not 1..2^32-1", id));
    std::string text(StringTextPart(r));
    for (size_t j = i + 1; j < chunk_.size(); ++j) {
      const LogRecord& c = chunk_[j];
      if (c.kind != r.kind || (c.flags & kRecordFlagContinuation) == 0) break;
      text.append(StringTextPart(c));
    }
    if (text.size() != r.words[kWordStringBytes]) {
      return fail(absl::StrFormat("string %d is torn: %d of its %d text bytes are in the log", id,
                                  text.size(), r.words[kWordStringBytes]));
    }
    if (!contexts_->strings.emplace(static_cast<uint32_t>(id), std::move(text)).second) {
      return fail(absl::StrFormat("string %d is defined twice", id));
    }
    return true;
  }
  if (r.kind == kRecordKindOomContext) {
    // For the oom record right after it (the reader refuses it if anything else comes first).
    oom_context_record_ = record;
    return FindContext(r.words[0], "oom_context", record, &oom_context_);
  }
  bool wide = false;
  const ContextDefinition d = DecodeContext(r, &wide);
  if (wide || d.id == 0) return fail("an id is not 1..2^32-1 (0: none, for the strings)");
  BlockContext context;
  context.role = AllocationRoleOf(d.role).value_or(AllocationRole::kUnknown);
  context.backward = d.backward;
  for (const auto& [string_id, field] :
       {std::pair{d.module, &context.module}, std::pair{d.op, &context.op},
        std::pair{d.site, &context.site}}) {
    if (string_id == 0) continue;
    auto it = contexts_->strings.find(string_id);
    if (it == contexts_->strings.end()) {
      return fail(
          absl::StrFormat("context %d names string %d, which no string record before it "
                          "defines",
                          d.id, string_id));
    }
    *field = it->second;
  }
  contexts_->storage.push_back(std::move(context));
  if (!contexts_->by_id.emplace(d.id, &contexts_->storage.back()).second) {
    return fail(absl::StrFormat("context %d is defined twice", d.id));
  }
  return true;
}

ABSL_ATTRIBUTE_NOINLINE bool FslogSource::Decoder::FindContext(uint64_t id, std::string_view kind,
                                                               uint64_t record,
                                                               const BlockContext** context) {
  auto it =
      id <= UINT32_MAX ? contexts_->by_id.find(static_cast<uint32_t>(id)) : contexts_->by_id.end();
  if (it == contexts_->by_id.end()) {
    error_ = absl::InvalidArgumentError(absl::StrFormat(
        "%s: bad %s record %d: it names context %d, which no context record before it defines",
        name_, kind, record, id));
    pos_ = chunk_.size();
    return false;
  }
  *context = it->second;
  return true;
}

ABSL_ATTRIBUTE_NOINLINE bool FslogSource::Decoder::FailStrayOomContext(const LogRecord& r,
                                                                       size_t i) {
  error_ = absl::InvalidArgumentError(absl::StrFormat(
      "%s: bad oom_context record %d: the record after it is %s record %d, not an oom", name_,
      oom_context_record_, RecordKindName(r.kind), first_sequence_ + i + combined_before_));
  pos_ = chunk_.size();
  return false;
}

ABSL_ATTRIBUTE_NOINLINE bool FslogSource::Decoder::FailLateState(const LogRecord& r, size_t i) {
  error_ = absl::InvalidArgumentError(absl::StrFormat(
      "%s: bad state record: %s record %d comes after the log's first event (state records "
      "state the memory held before the log, and lead it)",
      name_, RecordKindName(r.kind), first_sequence_ + i));
  pos_ = chunk_.size();
  return false;
}

ABSL_ATTRIBUTE_NOINLINE bool FslogSource::Decoder::FailMixedDevices(const LogRecord& r,
                                                                    const TraceEvent& event) {
  error_ = absl::FailedPreconditionError(absl::StrFormat(
      "%s: mixed devices: event %d is on device %d but the log header says device %d; "
      "fragscope analyzes one device per log",
      name_, event.index, r.device, device_));
  pos_ = chunk_.size();
  return false;
}

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
