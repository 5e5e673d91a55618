// The frame of a PyTorch stack that reports name as an allocation's call site, and its text
// ("train.py:88 in forward"): what both the whole and the streamed snapshot reads give an entry
// (snapshot_call_sites.h, pytorch_snapshot_stream.cc).
//
// Which frame: PyTorch records the innermost first, Python and C++ mixed. The first Python frame
// outside torch's own package is the user's line; a stack with none (a job run from inside torch,
// a C++-only stack) gives its first Python frame, else its first frame.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/sources/pytorch_snapshot.h"

namespace fragscope {

// What a frame is to that choice.
enum class CallSiteFrame : uint8_t {
  kUser,     // Python outside torch's own files: chosen first
  kLibrary,  // Python inside torch (or a frozen module): chosen when no user frame is there
  kOther,    // not Python (C++): chosen when the stack has no Python frame
};

CallSiteFrame ClassifyCallSiteFrame(std::string_view filename);

// "file:line in name", at most kMaxCallSiteBytes and "..." (a hostile snapshot cannot make one
// site text unbounded: a report prints it per block). Not escaped: the reports escape it.
std::string CallSiteFrameText(std::string_view filename, int64_t line, std::string_view name);
inline constexpr size_t kMaxCallSiteBytes = 512;

// The chosen frame's text; "" for an empty stack.
std::string CallSiteText(const std::vector<SnapshotFrame>& frames);

}  // namespace fragscope
