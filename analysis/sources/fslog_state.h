// ReadFslogState: the memory an .fslog says was held before its first event (its leading state
// records, Note [State records] in fslog/fslog_format.h), as TraceInfo::initial_segments.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "analysis/sources/trace_event.h"
#include "fslog/fslog_reader.h"

namespace fragscope {

// Reads chunks from `reader` (its header read, no chunk yet) until the first record that is not a
// state record, and returns the state records' segments, each with its allocated blocks in
// address order; empty for a log without state records. Checks what the Note requires: a block
// follows its segment and lies inside it, blocks in address order without overlap, sizes not 0,
// requested_bytes not above the size, pool small or large, the header's device, and no two
// segments overlapping. Errors name the log and the record's file offset, as do the reader's own.
absl::StatusOr<std::vector<InitialSegment>> ReadFslogState(FslogReader& reader);

}  // namespace fragscope
