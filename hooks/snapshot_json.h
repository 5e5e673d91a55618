// SnapshotJson: an AllocatorSnapshot as JSON, with the field names and states of
// torch.cuda.memory_snapshot(), for the C ABI (fragscope_snapshot_json) and the Python helper.
//
//   {"device":0,"segments":[{"device":0,"address":139..,"total_size":2097152,
//     "allocated_size":512,"active_size":512,"requested_size":100,"stream":0,
//     "segment_type":"small","is_expandable":false,
//     "blocks":[{"address":139..,"size":512,"requested_size":100,"state":"active_allocated"}]}]}
//
// Addresses and streams are unsigned decimal integers, as Python's int() reads them.
#pragma once

#include <string>

#include "allocator/allocator_snapshot.h"

namespace fragscope::hooks {

std::string SnapshotJson(const AllocatorSnapshot& snapshot, int device);

}  // namespace fragscope::hooks
