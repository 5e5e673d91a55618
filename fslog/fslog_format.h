// The .fslog event-log format: the one definition shared by FslogWriter (fslog_writer.h) and
// FslogReader (fslog_reader.h). fslog/FORMAT.md specifies the same bytes in prose for
// readers written without this code; the static_asserts below pin every offset it names.
//
// Layout of a file (all integers little-endian, all sections 8-byte aligned):
//
//   FileHeader            256 bytes, fixed fields
//   options text          FileHeader::options_bytes bytes of UTF-8, zero-padded to 8
//   chunk*                until end of file:
//     ChunkHeader         32 bytes (magic, record count, payload length and CRC32C,
//                         first sequence number, CRC32C of the chunk header itself)
//     LogRecord[count]    80 bytes each, 1..kMaxChunkRecords of them
//
// A record's sequence number is its chunk's first_sequence plus its index in the chunk; numbers
// grow by one per record. A gap between chunks counts records the writer dropped (it never blocks
// the allocator; see fslog_writer.h). A torn last chunk (a crash during its write) is dropped
// by readers with a warning; any other damage is an error naming the file offset.
//
// Versioning: a reader rejects a major version it does not know (this one reads 1.x and 2.x; 2.0
// added combined free records, 2.2 state records, 2.3 the header's parallel sizes and memory at
// open, and compressed chunks, 2.4 the private pool id in word 7, 2.5 tag records, 2.6 context
// records (fslog_context.h): all below). A minor version may
// only add record kinds, flag bits, or meanings for fields that are zero/reserved in earlier
// minors; readers pass unknown kinds through and ignore unknown flags.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/status/statusor.h"
#include "allocator/allocator_events.h"
#include "allocator/pool_id.h"

namespace fragscope {

static_assert(std::endian::native == std::endian::little,
              ".fslog records are written and read as native structs: little-endian hosts only");

// --- Constants ------------------------------------------------------------------------------

// "FSLOG\r\n\x1a": the CR LF and ^Z catch files mangled by text-mode transfers (as PNG does).
inline constexpr char kFileMagic[8] = {'F', 'S', 'L', 'O', 'G', '\r', '\n', '\x1a'};
// The version the writer writes. Readers accept majors kOldestReadableVersionMajor through
// kFormatVersionMajor (2.0 added combined free records: Note [Combined free records]).
inline constexpr uint16_t kFormatVersionMajor = 2;
inline constexpr uint16_t kFormatVersionMinor = 7;
inline constexpr uint16_t kOldestReadableVersionMajor = 1;
// "FSCK" as the first four bytes of every chunk.
inline constexpr uint32_t kChunkMagic = 0x4B435346;

inline constexpr size_t kFileHeaderBytes = 256;
inline constexpr size_t kChunkHeaderBytes = 32;
inline constexpr size_t kRecordBytes = 80;
// A chunk, header included, never exceeds 64 KiB: 818 records.
inline constexpr size_t kMaxChunkBytes = 64 * 1024;
inline constexpr size_t kMaxChunkRecords = (kMaxChunkBytes - kChunkHeaderBytes) / kRecordBytes;
// Every sequence number is below this bound (a chunk's first_sequence + record_count <= it), so
// readers' event numbers (sequence plus the combined free records before it, Note [Combined free
// records]) stay below 2^63 and never wrap. No writer comes near it (2^62 records of 80 bytes).
inline constexpr uint64_t kMaxSequence = uint64_t{1} << 62;
inline constexpr size_t kMaxChunkPayloadBytes = kMaxChunkRecords * kRecordBytes;
// The largest device ordinal a header may name: PyTorch's DeviceIndex is an int8_t.
inline constexpr int32_t kMaxDeviceIndex = 127;
// Upper bound of the header's options text; longer option strings are truncated by the writer.
inline constexpr size_t kMaxHeaderOptionsBytes = 64 * 1024;
inline constexpr size_t kMaxFileHeaderBytes = kFileHeaderBytes + kMaxHeaderOptionsBytes;
// Text carried by one kMarker record; longer markers are truncated (kRecordFlagTruncated).
inline constexpr size_t kMaxMarkerTextBytes = 56;
// Text of one kOptionsChange, spread over a first record (56 bytes) and continuation records
// (64 bytes each) in the same chunk; longer strings are truncated (kRecordFlagTruncated).
inline constexpr size_t kMaxOptionsChangeTextBytes = 4096;
inline constexpr size_t kOptionsFirstRecordTextBytes = 56;
inline constexpr size_t kOptionsContinuationTextBytes = 64;
// Records one kOptionsChange occupies at most: 1 + ceil((4096 - 56) / 64) = 65.
inline constexpr size_t kMaxOptionsChangeRecords =
    1 + (kMaxOptionsChangeTextBytes - kOptionsFirstRecordTextBytes + kOptionsContinuationTextBytes -
         1) /
            kOptionsContinuationTextBytes;
static_assert(kMaxOptionsChangeRecords <= kMaxChunkRecords,
              "an options change must fit in one chunk: readers reassemble it within a chunk");

// Note [Model records] (format 2.3)
// The model a job runs (its Hugging Face config and the job's shape: sequence, micro-batch,
// precision, ...) as JSON (analysis/explain/model_job.h), in one kModel record and its
// continuation records, laid out as an options change is: at most kMaxModelTextBytes. The hooks
// write one when the job names its model (fragscope.record_model); the last one counts. Readers
// of 2.0-2.2 pass over it (a kind of a newer minor version).
inline constexpr size_t kMaxModelTextBytes = kMaxOptionsChangeTextBytes;

// Which clock produced the record timestamps (FileHeader::clock). Both are CLOCK_MONOTONIC
// nanoseconds; kTscCalibrated reads the TSC and maps it onto CLOCK_MONOTONIC (re-anchored at
// least every flush interval), because clock_gettime costs 20-30 ns per event.
enum class FslogClock : uint32_t {
  kUnknown = 0,
  kMonotonic = 1,
  kTscCalibrated = 2,
};

// Flags of kMarker and kOptionsChange records. (Records of allocator kinds carry the EventFlag
// bits of allocator_events.h verbatim instead.)
enum RecordFlag : uint8_t {
  // The text was longer than the format allows and was cut at a UTF-8 character boundary.
  kRecordFlagTruncated = 1 << 0,
  // kOptionsChange: this record continues the text of the preceding kOptionsChange record.
  kRecordFlagContinuation = 1 << 1,
};

// Note [Combined free records] (format 2.0)
// Most frees complete at once (no stream uses to wait for): the allocator emits free_requested
// and, right after it, free_completed of the same block. The writer stores such a pair as one
// record: the free_requested record with kFreeRecordCompleted set in `flags`, whose otherwise
// unused fields carry the free_completed's own: `aux` its merged_count, word 5 its split_bytes
// (merged neighbour bytes), word 6 its result_bytes, and flag bit result_is_split. Both events
// share the record's timestamp; readers deliver them as two events, in order, with consecutive
// event numbers (LogEntry::sequence). A third of a typical log's records, and of the writer's
// work on a free, go away.
// The bit is outside the EventFlag range (bits 0-6) and a 1.x file never has it set.
// FslogWriter folds only when the free_completed comes within kCombineFreeWindowNs of its
// free_requested (by its clock), the resolution its coarse timestamps have anyway; a
// free_completed that waited for stream events is later and keeps its own record.
inline constexpr uint8_t kFreeRecordCompleted = 1 << 7;
inline constexpr uint64_t kCombineFreeWindowNs = 20'000;

// Note [State records] (format 2.2)
// A log that begins while memory is already held (a PyTorch snapshot whose history recording
// started after the model was loaded, converted to .fslog) states what was held in records before
// its first event: one state_segment record per segment, then one state_block record per block
// allocated in it, in address order; the rest of the segment was free. Both use the block layout
// (below): state_segment has ptr = segment = the segment's address, bytes = its size, stream and
// pool; state_block has ptr, bytes = the block's size, requested_bytes, stream, and segment = its
// segment's address. State records are not events: readers turn them into the trace's initial
// state (analysis: TraceInfo::initial_segments) and deliver no event for them, though they take
// sequence numbers like every record, so the first event's number is the count of state records.
// Every state record comes before the log's first other record; one after it is an error, as are
// a block outside its segment, blocks out of address order or overlapping, and overlapping
// segments. Readers of 2.0 and 2.1 pass over them (kinds of a newer minor version) and so start
// without that state.
inline constexpr uint8_t kRecordKindStateSegment = 12;
inline constexpr uint8_t kRecordKindStateBlock = 13;

inline bool IsStateRecord(uint8_t kind) {
  return kind == kRecordKindStateSegment || kind == kRecordKindStateBlock;
}

// Note [Who wrote the log] (format 2.3)
// Many-rank jobs are compared rank by rank (analysis/ranks/cross_rank.h), so the header says who
// wrote the log: rank, local rank and world size (from the launcher's RANK, LOCAL_RANK,
// WORLD_SIZE), host, device name and capacity (since 1.0), and since 2.3 the pipeline- and
// tensor-parallel sizes given to the hooks (FRAGSCOPE_PP_SIZE, FRAGSCOPE_TP_SIZE) and the device's
// free memory when the log opened, with the allocator's reserved bytes at that moment, from which
// memory held outside the allocator (CUDA context, NCCL, other processes) follows:
// device_total - free - reserved.
enum FileHeaderFlag : uint32_t {
  // device_free_at_open and reserved_at_open are recorded.
  kHeaderFlagOpenMemory = 1u << 0,
  // Chunks may be zstd frames (Note [Compressed chunks]).
  kHeaderFlagZstdChunks = 1u << 1,
  // The writer does not see empty_cache calls, only the segment frees they make (the observe
  // mode: PyTorch traces no entry for the call). Readers infer the calls as for snapshots.
  kHeaderFlagNoEmptyCacheRecords = 1u << 2,
};

// Note [Compressed chunks] (format 2.3)
// A writer may store a chunk as one zstd frame (RFC 8878) whose content is the chunk's own bytes,
// header and records, exactly as an uncompressed chunk would have them; the frame records its
// content size. Readers tell the two apart by the first four bytes at a chunk boundary: the chunk
// magic or the zstd frame magic. Uncompressed and compressed chunks may alternate in one file (a
// writer's fatal-signal path writes uncompressed ones). A frame's content is checked like any
// chunk (CRCs, lengths, sequence); a frame that ends early at the end of the file is a torn tail,
// one that does not decode is a corrupt chunk at the frame's offset. A reader of an earlier minor
// version stops at the first compressed chunk with a bad-magic error, never misreads it.
inline constexpr uint32_t kZstdFrameMagic = 0xFD2FB528;
// The longest frame a reader accepts for one chunk: zstd's bound for 64 KiB (65 824 bytes) with a
// margin for other compressors' frame options. A longer frame is a corrupt chunk.
inline constexpr size_t kMaxCompressedChunkBytes = 68 * 1024;

// --- On-disk structs ------------------------------------------------------------------------

// The fixed part of the file header, at file offset 0.
struct FileHeader {
  char magic[8];                // kFileMagic
  uint16_t version_major;       // kFormatVersionMajor
  uint16_t version_minor;       // kFormatVersionMinor
  uint32_t header_bytes;        // this struct + options text + padding; the first chunk's offset
  uint32_t header_crc32c;       // CRC32C of all header_bytes bytes with this field set to 0
  uint32_t record_bytes;        // kRecordBytes
  uint32_t clock;               // FslogClock
  int32_t device_index;         // CUDA device ordinal
  uint64_t device_total_bytes;  // device capacity
  int64_t pid;                  // writer's process id
  int32_t rank;                 // RANK, else LOCAL_RANK, else 0
  int32_t local_rank;           // LOCAL_RANK, else -1
  int32_t world_size;           // WORLD_SIZE, else 0
  uint32_t reserved0;           // 0
  int64_t start_wall_ns;        // CLOCK_REALTIME at open, ns since the Unix epoch
  uint64_t start_monotonic_ns;  // CLOCK_MONOTONIC at the same instant (same clock as records)
  char device_name[64];         // UTF-8, zero-padded, not necessarily zero-terminated
  char host[64];                // gethostname(), zero-padded, not necessarily zero-terminated
  uint32_t options_bytes;       // length of the options text that follows this struct
  // 2.3 (Note [Who wrote the log]): zero in earlier minors.
  uint32_t header_flags;         // FileHeaderFlag bits
  uint64_t device_free_at_open;  // device free bytes at open (kHeaderFlagOpenMemory)
  uint64_t reserved_at_open;     // the allocator's reserved bytes then (kHeaderFlagOpenMemory)
  int32_t pp_size;               // pipeline-parallel size given to the hooks; 0 = not given
  int32_t tp_size;               // tensor-parallel size given to the hooks; 0 = not given
  uint8_t reserved1[16];         // 0
};
static_assert(sizeof(FileHeader) == kFileHeaderBytes, "FileHeader is 256 bytes on disk");
static_assert(std::is_trivially_copyable_v<FileHeader> && std::is_standard_layout_v<FileHeader>,
              "FileHeader is read and written with memcpy");
static_assert(
    offsetof(FileHeader, version_major) == 8 && offsetof(FileHeader, header_bytes) == 12 &&
        offsetof(FileHeader, header_crc32c) == 16 && offsetof(FileHeader, record_bytes) == 20 &&
        offsetof(FileHeader, clock) == 24 && offsetof(FileHeader, device_index) == 28 &&
        offsetof(FileHeader, device_total_bytes) == 32 && offsetof(FileHeader, pid) == 40 &&
        offsetof(FileHeader, rank) == 48 && offsetof(FileHeader, local_rank) == 52 &&
        offsetof(FileHeader, world_size) == 56 && offsetof(FileHeader, start_wall_ns) == 64 &&
        offsetof(FileHeader, start_monotonic_ns) == 72 && offsetof(FileHeader, device_name) == 80 &&
        offsetof(FileHeader, host) == 144 && offsetof(FileHeader, options_bytes) == 208 &&
        offsetof(FileHeader, header_flags) == 212 &&
        offsetof(FileHeader, device_free_at_open) == 216 &&
        offsetof(FileHeader, reserved_at_open) == 224 && offsetof(FileHeader, pp_size) == 232 &&
        offsetof(FileHeader, tp_size) == 236 && offsetof(FileHeader, reserved1) == 240,
    "FileHeader offsets are specified in FORMAT.md");

// Precedes every chunk's records.
struct ChunkHeader {
  uint32_t magic;           // kChunkMagic
  uint32_t record_count;    // 1..kMaxChunkRecords
  uint32_t payload_bytes;   // record_count * kRecordBytes
  uint32_t payload_crc32c;  // CRC32C of the payload_bytes bytes that follow this header
  uint64_t first_sequence;  // sequence number of the first record
  uint32_t reserved;        // 0
  uint32_t header_crc32c;   // CRC32C of the 28 bytes above
};
static_assert(sizeof(ChunkHeader) == kChunkHeaderBytes, "ChunkHeader is 32 bytes on disk");
static_assert(std::is_trivially_copyable_v<ChunkHeader> && std::is_standard_layout_v<ChunkHeader>,
              "ChunkHeader is read and written with memcpy");
static_assert(offsetof(ChunkHeader, first_sequence) == 16 &&
                  offsetof(ChunkHeader, header_crc32c) == 28,
              "ChunkHeader offsets are specified in FORMAT.md");

// Number of leading ChunkHeader bytes covered by ChunkHeader::header_crc32c.
inline constexpr size_t kChunkHeaderCrcCoveredBytes = offsetof(ChunkHeader, header_crc32c);

// One event. `words` are interpreted per kind (the "layouts" below); unused words are 0.
//
//   kind                       layout   words[0..7]
//   alloc, free_requested,     block    ptr, bytes, requested_bytes, stream, segment,
//   free_completed, segment_*           split_bytes, result_bytes, 0
//   oom, empty_cache           stats    device_free_bytes, bytes, requested_bytes, stream,
//                                       device_total_bytes, reserved_bytes, allocated_bytes, 0
//   marker                     text     os thread id, then text bytes at record offset 24..79
//   options_change (first)     text     total text bytes, then text at record offset 24..79
//   options_change (continued) text     text at record offset 16..79
//   model (first, continued)   text     as options_change
struct LogRecord {
  uint64_t timestamp_ns;  // CLOCK_MONOTONIC ns; non-decreasing in sequence order
  uint8_t kind;           // EventKind value
  uint8_t pool;           // PoolKind value
  uint8_t flags;          // EventFlag bits; RecordFlag bits for marker and options_change
  uint8_t aux;            // free_completed: merged_count; marker/options_change: text bytes here
  int32_t device;         // AllocatorEvent::device
  uint64_t words[8];
};
static_assert(sizeof(LogRecord) == kRecordBytes, "LogRecord is 80 bytes on disk");
static_assert(std::is_trivially_copyable_v<LogRecord> && std::is_standard_layout_v<LogRecord>,
              "LogRecord is read and written with memcpy");
static_assert(offsetof(LogRecord, kind) == 8 && offsetof(LogRecord, aux) == 11 &&
                  offsetof(LogRecord, device) == 12 && offsetof(LogRecord, words) == 16,
              "LogRecord offsets are specified in FORMAT.md");
static_assert(kChunkHeaderBytes % 8 == 0 && kRecordBytes % 8 == 0 && kFileHeaderBytes % 8 == 0,
              "every record starts 8-byte aligned in the file, so readers can map it in place");

// Word indices of the block layout.
inline constexpr int kWordPtr = 0;
inline constexpr int kWordBytes = 1;
inline constexpr int kWordRequestedBytes = 2;
inline constexpr int kWordStream = 3;
inline constexpr int kWordSegment = 4;
inline constexpr int kWordSplitBytes = 5;
inline constexpr int kWordResultBytes = 6;
// 2.4: the private pool of a block, segment, OOM or empty_cache record (PackPoolId; 0 is the
// default pool, as every earlier minor wrote).
inline constexpr int kWordPoolId = 7;
// Word indices of the stats layout (bytes, requested and stream as in the block layout).
inline constexpr int kWordDeviceFreeBytes = 0;
inline constexpr int kWordDeviceTotalBytes = 4;
inline constexpr int kWordReservedBytes = 5;
inline constexpr int kWordAllocatedBytes = 6;
// Text layout: byte offsets of the text inside a record.
inline constexpr size_t kFirstTextOffset = 24;
inline constexpr size_t kContinuationTextOffset = 16;

// --- Encoding and decoding ------------------------------------------------------------------

inline bool UsesStatsLayout(uint8_t kind) {
  return kind == static_cast<uint8_t>(EventKind::kOom) ||
         kind == static_cast<uint8_t>(EventKind::kEmptyCache);
}

// Fills `record` from an allocator event. Lossless for every field the event defines for its kind
// (AllocatorEvent: "fields not listed for a kind are zero"); off-layout fields are dropped.
inline void EncodeEvent(const AllocatorEvent& event, uint64_t timestamp_ns, LogRecord* record) {
  record->timestamp_ns = timestamp_ns;
  record->kind = static_cast<uint8_t>(event.kind);
  record->pool = static_cast<uint8_t>(event.pool);
  record->flags = event.flags;
  record->aux = event.merged_count;
  record->device = event.device;
  uint64_t* w = record->words;
  if (UsesStatsLayout(record->kind)) {
    w[kWordDeviceFreeBytes] = event.device_free_bytes;
    w[kWordDeviceTotalBytes] = event.device_total_bytes;
    w[kWordReservedBytes] = event.reserved_bytes;
    w[kWordAllocatedBytes] = event.allocated_bytes;
  } else {
    w[kWordPtr] = event.ptr;
    w[kWordSegment] = event.segment;
    w[kWordSplitBytes] = event.split_bytes;
    w[kWordResultBytes] = event.result_bytes;
  }
  w[kWordBytes] = event.bytes;
  w[kWordRequestedBytes] = event.requested_bytes;
  w[kWordStream] = event.stream;
  w[kWordPoolId] = PackPoolId(event.pool_id);
}

// The inverse of EncodeEvent, for records of allocator kinds (not marker or options_change).
inline AllocatorEvent DecodeEvent(const LogRecord& record) {
  AllocatorEvent event;
  event.kind = static_cast<EventKind>(record.kind);
  event.pool = static_cast<PoolKind>(record.pool);
  event.flags = record.flags;
  event.merged_count = record.aux;
  event.device = record.device;
  const uint64_t* w = record.words;
  if (UsesStatsLayout(record.kind)) {
    event.device_free_bytes = w[kWordDeviceFreeBytes];
    event.device_total_bytes = w[kWordDeviceTotalBytes];
    event.reserved_bytes = w[kWordReservedBytes];
    event.allocated_bytes = w[kWordAllocatedBytes];
  } else {
    event.ptr = w[kWordPtr];
    event.segment = w[kWordSegment];
    event.split_bytes = w[kWordSplitBytes];
    event.result_bytes = w[kWordResultBytes];
  }
  event.bytes = w[kWordBytes];
  event.requested_bytes = w[kWordRequestedBytes];
  event.stream = w[kWordStream];
  event.pool_id = UnpackPoolId(w[kWordPoolId]);
  return event;
}

// Note [Combined free records]: whether `record` stands for a free_requested and a free_completed.
// REQUIRES for a true answer to mean that: the file's major version is >= 2.
inline bool IsCombinedFree(const LogRecord& record) {
  return record.kind == static_cast<uint8_t>(EventKind::kFreeRequested) &&
         (record.flags & kFreeRecordCompleted) != 0;
}

// Whether the free_completed `completed` can be folded into `requested`, a free_requested record
// written just before it, without losing a field: the same block, nothing in the fields the fold
// reuses, and only the flags each event may carry.
inline bool CanCombineFree(const LogRecord& requested, const AllocatorEvent& completed) {
  constexpr uint8_t kRequestedFlags = kEventFlagOversize | kEventFlagExpandable;
  constexpr uint8_t kCompletedFlags = kEventFlagResultIsSplit | kEventFlagExpandable;
  const uint64_t* w = requested.words;
  return completed.kind == EventKind::kFreeCompleted &&
         requested.kind == static_cast<uint8_t>(EventKind::kFreeRequested) &&
         (requested.flags & ~kRequestedFlags) == 0 && (completed.flags & ~kCompletedFlags) == 0 &&
         ((requested.flags ^ completed.flags) & kEventFlagExpandable) == 0 && requested.aux == 0 &&
         requested.pool == static_cast<uint8_t>(completed.pool) &&
         requested.device == completed.device && w[kWordPtr] == completed.ptr &&
         w[kWordBytes] == completed.bytes && w[kWordRequestedBytes] == completed.requested_bytes &&
         w[kWordStream] == completed.stream && w[kWordSegment] == completed.segment &&
         w[kWordSplitBytes] == 0 && w[kWordResultBytes] == 0;
}

// Folds `completed` into `requested`. REQUIRES: CanCombineFree(*requested, completed).
inline void CombineFree(const AllocatorEvent& completed, LogRecord* requested) {
  requested->aux = completed.merged_count;
  requested->words[kWordSplitBytes] = completed.split_bytes;
  requested->words[kWordResultBytes] = completed.result_bytes;
  // The flag last (a fatal-signal handler may copy the record meanwhile: it then sees a plain
  // free_requested whose spare fields are set, which readers ignore).
  std::atomic_signal_fence(std::memory_order_release);
  requested->flags |= (completed.flags & kEventFlagResultIsSplit) | kFreeRecordCompleted;
}

// The event flags of each half of a combined record whose flags are `flags`.
inline uint8_t CombinedFreeRequestedFlags(uint8_t flags) {
  return flags & static_cast<uint8_t>(~(kFreeRecordCompleted | kEventFlagResultIsSplit));
}
inline uint8_t CombinedFreeCompletedFlags(uint8_t flags) {
  return flags & static_cast<uint8_t>(~(kFreeRecordCompleted | kEventFlagOversize));
}

// The free_requested and free_completed records a combined record stands for (each as the
// writer would have written it alone, with the combined record's timestamp).
// REQUIRES: IsCombinedFree(combined).
inline void SplitCombinedFree(const LogRecord& combined, LogRecord* requested,
                              LogRecord* completed) {
  *requested = combined;
  requested->flags = CombinedFreeRequestedFlags(combined.flags);
  requested->aux = 0;
  requested->words[kWordSplitBytes] = 0;
  requested->words[kWordResultBytes] = 0;
  *completed = combined;
  completed->kind = static_cast<uint8_t>(EventKind::kFreeCompleted);
  completed->flags = CombinedFreeCompletedFlags(combined.flags);
}

// What a record of `kind` is called (dump, errors): EventKindName for the allocator's kinds and
// markers, "state_segment" and "state_block" (Note [State records]), "unknown" otherwise.
std::string_view RecordKindName(uint8_t kind);

// Encodes a state record (Note [State records]). For kRecordKindStateSegment, `segment` is
// `ptr` and `requested_bytes` 0.
void EncodeStateRecord(uint8_t kind, DevicePtr ptr, uint64_t bytes, uint64_t requested_bytes,
                       StreamId stream, DevicePtr segment, PoolKind pool, int32_t device,
                       uint64_t timestamp_ns, LogRecord* record);

// The longest prefix of `text` of at most `max_bytes` bytes that does not end inside a UTF-8
// multi-byte character.
std::string_view TruncateUtf8(std::string_view text, size_t max_bytes);

// Encodes a user marker. Text beyond kMaxMarkerTextBytes is truncated and flagged.
void EncodeMarker(std::string_view text, uint64_t thread_id, uint64_t timestamp_ns,
                  LogRecord* record);

// The text bytes a kMarker record carries (bounded by the record even if `aux` is corrupt).
std::string_view MarkerText(const LogRecord& record);

// Encodes an options change into out[0..n), n returned (1..kMaxOptionsChangeRecords). REQUIRES:
// `out` has room for kMaxOptionsChangeRecords records.
size_t EncodeOptionsChange(std::string_view options, uint64_t timestamp_ns, int32_t device,
                           LogRecord* out);

// Note [Tag records] (format 2.5)
// A `tag` record (EventKind::kTag, block layout) gives the role (fslog/allocation_role.h) of the
// live block at word 0's address: word 1 holds the role's value, every other word is 0. It
// follows the block's alloc record at once when the producer knows the role then (the
// predictor), or comes later, when the role becomes known, and then replaces the block's earlier
// role; a block's role is its last tag's. A tag of an address where no block lives is passed
// over. Readers of 2.0-2.4 pass over the kind.
inline constexpr int kWordTagRole = 1;
void EncodeTag(DevicePtr ptr, uint8_t role, uint64_t timestamp_ns, int32_t device,
               LogRecord* record);

// Encodes a model record (Note [Model records]) like an options change. Text beyond
// kMaxModelTextBytes is truncated and flagged.
size_t EncodeModel(std::string_view json, uint64_t timestamp_ns, int32_t device, LogRecord* out);

// Whether records of `kind` carry a text over a first record and continuation records.
inline bool UsesLongTextLayout(uint8_t kind) {
  return kind == static_cast<uint8_t>(EventKind::kOptionsChange) ||
         kind == static_cast<uint8_t>(EventKind::kModel);
}

// The text bytes one kOptionsChange or kModel record carries (first or continuation).
std::string_view OptionsChangeTextPart(const LogRecord& record);

// --- The file header ------------------------------------------------------------------------

// The file header, decoded.
struct FslogHeader {
  uint16_t version_major = kFormatVersionMajor;
  uint16_t version_minor = kFormatVersionMinor;
  uint32_t header_bytes = 0;  // filled by Serialize/Parse
  FslogClock clock = FslogClock::kUnknown;
  int32_t device_index = 0;
  uint64_t device_total_bytes = 0;
  int64_t pid = 0;
  int32_t rank = 0;
  int32_t local_rank = -1;
  int32_t world_size = 0;
  int64_t start_wall_ns = 0;
  uint64_t start_monotonic_ns = 0;
  std::string device_name;        // at most 64 bytes are stored
  std::string host;               // at most 64 bytes are stored
  std::string allocator_options;  // at most kMaxHeaderOptionsBytes are stored
  // 2.3 (Note [Who wrote the log]). device_free_at_open_bytes: nullopt when not recorded;
  // reserved_at_open_bytes is then 0.
  std::optional<uint64_t> device_free_at_open_bytes;
  uint64_t reserved_at_open_bytes = 0;
  int32_t pp_size = 0;  // 0 = not given
  int32_t tp_size = 0;
  bool zstd_chunks = false;  // the writer may have compressed chunks (Note [Compressed chunks])
  // false: the log has no empty_cache records, whatever its segment frees show
  // (kHeaderFlagNoEmptyCacheRecords).
  bool records_empty_cache = true;
};

// The header's bytes (FileHeader, options text, padding), with its CRC. Strings longer than
// their fields are truncated at a UTF-8 boundary.
std::string SerializeFileHeader(const FslogHeader& header);

// Size of the whole header given its first kFileHeaderBytes bytes, after checking magic,
// version, record size and length bounds. Errors name the offending file offset.
absl::StatusOr<size_t> ParseFileHeaderSize(std::string_view fixed_bytes);

// Decodes and verifies a whole header (`bytes` holds exactly ParseFileHeaderSize() bytes).
absl::StatusOr<FslogHeader> ParseFileHeader(std::string_view bytes);

// Fills the header fields and both CRCs of the chunk whose `record_count` records follow
// `header` in memory. REQUIRES: 1 <= record_count <= kMaxChunkRecords.
void SealChunk(uint32_t record_count, uint64_t first_sequence, const LogRecord* records,
               ChunkHeader* header);

}  // namespace fragscope
