// libFuzzer target over FslogReader: no input may crash it, hang it or make it allocate
// without bound, and what it returns must respect its own invariants.
//
// Input: one mode byte, then the bytes of an .fslog file.
//   mode even: the bytes are read as they are (CRC checks reject almost every mutation);
//   mode odd:  the CRCs of the header and of every chunk whose stated length fits are first
//              recomputed, so mutations reach the length, sequence and record-decoding logic.
// The seed corpus (corpus/fslog/) holds small logs written by FslogWriter, prefixed with a
// mode byte.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fslog/fslog_format.h"
#include "fslog/fslog_reader.h"
#include "tests/fuzz/fslog_crcs.h"

namespace fragscope {
namespace {

void Check(bool condition) {
  if (!condition) __builtin_trap();
}

}  // namespace
}  // namespace fragscope

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fragscope;
  if (size == 0) return 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) FixFslogCrcs(bytes);

  // Logical records.
  auto reader = FslogReader::OpenBytes(bytes);
  if (!reader.ok()) return 0;
  LogEntry entry;
  uint64_t entries = 0;
  uint64_t last_sequence = 0;
  for (;;) {
    absl::StatusOr<bool> more = reader->Next(&entry);
    if (!more.ok() || !*more) break;
    Check(entries == 0 || entry.sequence > last_sequence);
    last_sequence = entry.sequence;
    Check(entry.text.size() <= kMaxChunkRecords * kOptionsContinuationTextBytes);
    const AllocatorEvent event = entry.event();
    Check(static_cast<uint8_t>(event.kind) == entry.record.kind);
    ++entries;
  }
  // A record stands for at most two events (a combined free).
  Check(entries <= 2 * (bytes.size() / kRecordBytes));
  Check(reader->torn_tail_bytes() < bytes.size());
  Check(reader->warnings().size() <= FslogReader::kMaxWarnings + 1);
  Check(reader->offset() <= bytes.size());

  // Raw chunks, through a second reader: at most the events its records stand for (fewer when
  // options-change continuations fold into their start or an error ends the logical pass).
  auto chunks = FslogReader::OpenBytes(bytes);
  Check(chunks.ok());
  uint64_t events = 0;
  for (;;) {
    auto chunk = chunks->NextChunk();
    if (!chunk.ok() || chunk->empty()) break;
    Check(chunk->size() <= kMaxChunkRecords);
    for (const LogRecord& record : *chunk) {
      events += (chunks->has_combined_frees() && IsCombinedFree(record)) ? 2 : 1;
    }
  }
  Check(events >= entries);
  return 0;
}
