#include "fslog/fslog_context.h"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace fragscope {

size_t EncodeString(uint32_t id, std::string_view text, uint64_t timestamp_ns, int32_t device,
                    LogRecord* out) {
  const std::string_view kept = TruncateUtf8(text, kMaxStringTextBytes);
  size_t n = 0;
  size_t pos = 0;
  do {
    LogRecord* r = &out[n];
    *r = LogRecord{};
    r->timestamp_ns = timestamp_ns;
    r->kind = kRecordKindString;
    r->device = device;
    const bool first = n == 0;
    const size_t part = std::min(
        first ? kStringFirstRecordTextBytes : kOptionsContinuationTextBytes, kept.size() - pos);
    if (first) {
      r->flags = kept.size() < text.size() ? kRecordFlagTruncated : 0;
      r->words[kWordStringId] = id;
      r->words[kWordStringBytes] = kept.size();
    } else {
      r->flags = kRecordFlagContinuation;
    }
    r->aux = static_cast<uint8_t>(part);
    const size_t offset = first ? kStringFirstTextOffset : kContinuationTextOffset;
    std::memcpy(reinterpret_cast<char*>(r) + offset, kept.data() + pos, part);
    pos += part;
    ++n;
  } while (pos < kept.size());
  return n;
}

std::string_view StringTextPart(const LogRecord& record) {
  const char* bytes = reinterpret_cast<const char*>(&record);
  if (record.flags & kRecordFlagContinuation) {
    return std::string_view(bytes + kContinuationTextOffset,
                            std::min<size_t>(record.aux, kOptionsContinuationTextBytes));
  }
  return std::string_view(bytes + kStringFirstTextOffset,
                          std::min<size_t>(record.aux, kStringFirstRecordTextBytes));
}

void EncodeContext(const ContextDefinition& context, uint64_t timestamp_ns, int32_t device,
                   LogRecord* record) {
  *record = LogRecord{};
  record->timestamp_ns = timestamp_ns;
  record->kind = kRecordKindContext;
  record->device = device;
  record->aux = context.role;
  record->flags = context.backward ? kRecordFlagBackward : 0;
  record->words[kWordContextId] = context.id;
  record->words[kWordContextModule] = context.module;
  record->words[kWordContextOp] = context.op;
  record->words[kWordContextSite] = context.site;
}

void EncodeOomContext(uint32_t context, uint64_t timestamp_ns, int32_t device, LogRecord* record) {
  *record = LogRecord{};
  record->timestamp_ns = timestamp_ns;
  record->kind = kRecordKindOomContext;
  record->device = device;
  record->words[0] = context;
}

ContextDefinition DecodeContext(const LogRecord& record, bool* wide_ids) {
  const uint64_t words[4] = {record.words[kWordContextId], record.words[kWordContextModule],
                             record.words[kWordContextOp], record.words[kWordContextSite]};
  *wide_ids =
      std::any_of(std::begin(words), std::end(words), [](uint64_t w) { return w > UINT32_MAX; });
  return {.id = static_cast<uint32_t>(words[0]),
          .role = record.aux,
          .backward = (record.flags & kRecordFlagBackward) != 0,
          .module = static_cast<uint32_t>(words[1]),
          .op = static_cast<uint32_t>(words[2]),
          .site = static_cast<uint32_t>(words[3])};
}

}  // namespace fragscope
