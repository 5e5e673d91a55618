#include "cli/json_output.h"

#include "cli/output_file.h"

namespace fragscope::cli {

JsonOutput::JsonOutput(const std::string* path, std::ostream& out) : out_(out) {
  if (path != nullptr) path_ = *path;
}

absl::Status JsonOutput::Write(const std::function<void(std::ostream&)>& write) {
  if (!to_stdout()) return WriteOutputFile(*path_, write);
  // Rendered whole first, so that a failure while rendering leaves nothing half-written.
  std::ostringstream text;
  write(text);
  out_ << text.str();
  out_.flush();
  if (!out_) return absl::DataLossError("standard output: write failed");
  return absl::OkStatus();
}

}  // namespace fragscope::cli
