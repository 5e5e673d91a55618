// FixFslogCrcs: recomputes the CRCs of an .fslog's bytes, so that a fuzzer's mutations reach the
// length, sequence and record-decoding logic behind the checksums (fslog_fuzz's odd modes,
// trace_analysis_fuzz's raw-log mode).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "fslog/crc32c.h"
#include "fslog/fslog_format.h"

namespace fragscope {

// Recomputes the header's CRC (when its stated length fits) and that of every chunk, header and
// payload, up to the first chunk whose stated length does not fit.
inline void FixFslogCrcs(std::string& bytes) {
  auto load32 = [&bytes](size_t offset) {
    uint32_t v;
    std::memcpy(&v, bytes.data() + offset, sizeof(v));
    return v;
  };
  auto store32 = [&bytes](size_t offset, uint32_t v) {
    std::memcpy(bytes.data() + offset, &v, sizeof(v));
  };
  if (bytes.size() < kFileHeaderBytes) return;
  const uint32_t header_bytes = load32(offsetof(FileHeader, header_bytes));
  if (header_bytes < kFileHeaderBytes || header_bytes > bytes.size()) return;
  store32(offsetof(FileHeader, header_crc32c), 0);
  store32(offsetof(FileHeader, header_crc32c), Crc32c(bytes.data(), header_bytes));
  size_t offset = header_bytes;
  while (offset + kChunkHeaderBytes <= bytes.size()) {
    const uint32_t payload = load32(offset + offsetof(ChunkHeader, payload_bytes));
    if (payload > kMaxChunkPayloadBytes || offset + kChunkHeaderBytes + payload > bytes.size()) {
      break;
    }
    store32(offset + offsetof(ChunkHeader, payload_crc32c),
            Crc32c(bytes.data() + offset + kChunkHeaderBytes, payload));
    store32(offset + offsetof(ChunkHeader, header_crc32c),
            Crc32c(bytes.data() + offset, kChunkHeaderCrcCoveredBytes));
    offset += kChunkHeaderBytes + payload;
  }
}

}  // namespace fragscope
