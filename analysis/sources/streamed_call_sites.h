// StreamedCallSites: the call sites of a snapshot's trace entries as the streamed read meets them
// (pytorch_snapshot_stream.cc), without keeping their frames: each entry's 'frames' list becomes
// the text of the frame a report names (call_site_text.h), interned.
//
// Bounded work and memory: PyTorch pickles one frames list per allocation (shared by its
// segment_alloc and alloc entries and its block in `segments`) and one dict per distinct frame
// (shared by every stack through it), the repeats as memo references. A list's call site and a
// frame's class and text are worked out once and noted on the pickle's container
// (pickle::StreamContents::Note), so a repeat costs a lookup, and a list streamed and emptied with
// an earlier entry is still known. What stays: the distinct frames' texts and the call sites'.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "analysis/sources/call_site_text.h"
#include "analysis/sources/pickle/pickle_reader.h"

namespace fragscope {

class StreamedCallSites {
 public:
  // At most `max_frames` frames are read, over all the distinct lists.
  explicit StreamedCallSites(size_t max_frames) : max_frames_(max_frames) {}

  // The call site of the 'frames' value of the entry at `path` ("device_traces[0][3]"): an id
  // into texts() + 1; 0 for an empty stack. The errors of the whole read's frames (a value of the
  // wrong type, a missing key, each naming its path); FailedPrecondition when a list or frame was
  // streamed and emptied with an earlier entry before it could be read (the caller then reads the
  // pickle whole); ResourceExhausted past max_frames.
  absl::StatusOr<uint32_t> Site(std::string_view path, const pickle::StreamValue& frames,
                                pickle::StreamContents& contents);

  // The call sites' texts, moved out.
  std::vector<std::string> TakeTexts() { return std::move(sites_); }

 private:
  // A distinct frame dict, noted on its container as 1 + (its index in frames_ << 2 | its
  // CallSiteFrame).
  struct Frame {
    std::string text;   // CallSiteFrameText
    uint32_t site = 0;  // its id in sites_ + 1, once chosen
  };
  // The note of frame `index` of the frames list of the entry at `path`, worked out and noted at
  // its first sight. Errors as Site's.
  absl::StatusOr<uint32_t> FrameNote(std::string_view path, size_t index,
                                     const pickle::StreamValue& frame,
                                     pickle::StreamContents& contents);
  // The call site id of frames_[frame], interned when it is first chosen.
  uint32_t SiteOfFrame(size_t frame);

  size_t max_frames_;
  size_t frames_read_ = 0;
  std::vector<Frame> frames_;
  std::vector<std::string> sites_;
  absl::flat_hash_map<std::string, uint32_t> site_ids_;
  std::vector<pickle::StreamValue> list_items_;   // scratch: a frames list's items
  std::vector<pickle::StreamValue> frame_items_;  // and a frame dict's
};

}  // namespace fragscope
