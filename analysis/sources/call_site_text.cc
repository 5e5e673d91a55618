#include "analysis/sources/call_site_text.h"

namespace fragscope {

CallSiteFrame ClassifyCallSiteFrame(std::string_view filename) {
  if (!filename.ends_with(".py")) return CallSiteFrame::kOther;
  // torch's own modules (an installed package or a source checkout), and Python's frozen modules.
  const bool library = filename.find("/torch/") != std::string_view::npos ||
                       filename.starts_with("torch/") || filename.starts_with("<frozen");
  return library ? CallSiteFrame::kLibrary : CallSiteFrame::kUser;
}

std::string CallSiteFrameText(std::string_view filename, int64_t line, std::string_view name) {
  std::string text(filename);
  text.append(":").append(std::to_string(line)).append(" in ").append(name);
  if (text.size() > kMaxCallSiteBytes) {
    text.resize(kMaxCallSiteBytes);
    text.append("...");
  }
  return text;
}

std::string CallSiteText(const std::vector<SnapshotFrame>& frames) {
  const SnapshotFrame* chosen[3] = {};  // the first frame of each CallSiteFrame
  for (const SnapshotFrame& f : frames) {
    const SnapshotFrame*& first = chosen[static_cast<size_t>(ClassifyCallSiteFrame(f.filename))];
    if (first == nullptr) first = &f;
  }
  const SnapshotFrame* frame = chosen[0] != nullptr   ? chosen[0]
                               : chosen[1] != nullptr ? chosen[1]
                                                      : (frames.empty() ? nullptr : &frames[0]);
  return frame == nullptr ? "" : CallSiteFrameText(frame->filename, frame->line, frame->name);
}

}  // namespace fragscope
