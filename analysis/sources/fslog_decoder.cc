#include "analysis/sources/fslog_decoder.h"

#include <string>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/strings/str_format.h"
#include "allocator/allocator_options.h"
#include "fslog/fslog_context.h"

namespace fragscope {

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

}  // namespace fragscope
