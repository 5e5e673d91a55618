#include "analysis/sources/streamed_call_sites.h"

#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "allocator/check.h"

namespace fragscope {
namespace {

using pickle::PickleKind;
using pickle::StreamValue;

// Frames are noted as 1 + (index << 2 | class): indices stay below 2^29.
constexpr size_t kMaxFrames = size_t{1} << 29;

absl::Status TypeError(const std::string& path, std::string_view expected, const StreamValue& v) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: expected %s, got %s", path, expected, pickle::PickleKindName(v.kind)));
}

absl::Status Unreadable(const std::string& path) {
  return absl::FailedPreconditionError(
      absl::StrFormat("%s: streamed with an earlier trace entry before it was read", path));
}

}  // namespace

absl::StatusOr<uint32_t> StreamedCallSites::Site(std::string_view path, const StreamValue& frames,
                                                 pickle::StreamContents& contents) {
  // Paths are made for errors only: this runs for every entry.
  const auto list_path = [&] { return absl::StrFormat("%s.frames", path); };
  if (frames.kind != PickleKind::kList && frames.kind != PickleKind::kTuple) {
    return TypeError(list_path(), "list", frames);
  }
  if (frames.note != 0) return frames.note - 1;
  if (!contents.Items(frames, &list_items_)) return Unreadable(list_path());
  frames_read_ += list_items_.size();
  if (frames_read_ > max_frames_) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: snapshot has more than %d frames", list_path(), max_frames_));
  }
  // As CallSiteText: the first user frame, else the first library frame, else the first.
  size_t chosen[3] = {SIZE_MAX, SIZE_MAX, SIZE_MAX};  // by CallSiteFrame: an index into frames_
  for (size_t i = 0; i < list_items_.size(); ++i) {
    FRAGSCOPE_ASSIGN_OR_RETURN(const uint32_t note, FrameNote(path, i, list_items_[i], contents));
    size_t& first = chosen[(note - 1) & 3];
    if (first == SIZE_MAX) first = (note - 1) >> 2;
  }
  const size_t frame = chosen[0] != SIZE_MAX   ? chosen[0]
                       : chosen[1] != SIZE_MAX ? chosen[1]
                                               : chosen[2];
  const uint32_t site = frame == SIZE_MAX ? 0 : SiteOfFrame(frame);
  contents.Note(frames, site + 1);
  return site;
}

absl::StatusOr<uint32_t> StreamedCallSites::FrameNote(std::string_view path, size_t index,
                                                      const StreamValue& frame,
                                                      pickle::StreamContents& contents) {
  const auto frame_path = [&] { return absl::StrFormat("%s.frames[%d]", path, index); };
  if (frame.kind != PickleKind::kDict) return TypeError(frame_path(), "dict", frame);
  if (frame.note != 0) return frame.note;
  if (!contents.Items(frame, &frame_items_)) return Unreadable(frame_path());
  // A key given twice counts with its last value, as in Python.
  const StreamValue* fields[3] = {};
  static constexpr std::string_view kKeys[3] = {"filename", "line", "name"};
  for (size_t k = 0; k + 1 < frame_items_.size(); k += 2) {
    if (frame_items_[k].kind != PickleKind::kString) continue;
    for (size_t f = 0; f < 3; ++f) {
      if (frame_items_[k].text == kKeys[f]) fields[f] = &frame_items_[k + 1];
    }
  }
  // The whole read's order of checks (pytorch_snapshot.cc, Importer::Frames).
  for (size_t f = 0; f < 3; ++f) {
    if (fields[f] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: missing key '%s'", frame_path(), kKeys[f]));
    }
  }
  if (fields[0]->kind != PickleKind::kString) {
    return TypeError(frame_path() + ".filename", "str", *fields[0]);
  }
  if (fields[1]->kind == PickleKind::kBigInt) {
    return absl::OutOfRangeError(
        absl::StrFormat("%s.line: int out of the 64-bit range", frame_path()));
  }
  if (fields[1]->kind != PickleKind::kInt) {
    return TypeError(frame_path() + ".line", "int", *fields[1]);
  }
  if (fields[2]->kind != PickleKind::kString) {
    return TypeError(frame_path() + ".name", "str", *fields[2]);
  }
  if (frames_.size() >= kMaxFrames) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: snapshot has more than %d distinct frames", frame_path(), kMaxFrames));
  }
  const CallSiteFrame kind = ClassifyCallSiteFrame(fields[0]->text);
  frames_.push_back(
      Frame{CallSiteFrameText(fields[0]->text, fields[1]->int_value, fields[2]->text), 0});
  const uint32_t note =
      1 + static_cast<uint32_t>((frames_.size() - 1) << 2 | static_cast<size_t>(kind));
  contents.Note(frame, note);
  return note;
}

uint32_t StreamedCallSites::SiteOfFrame(size_t frame) {
  Frame& f = frames_[frame];
  if (f.site == 0) {
    auto [it, added] = site_ids_.try_emplace(f.text, static_cast<uint32_t>(sites_.size() + 1));
    if (added) sites_.push_back(f.text);
    f.site = it->second;
  }
  return f.site;
}

}  // namespace fragscope
