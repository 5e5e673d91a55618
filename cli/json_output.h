// Where a command's `--json` document goes, the same for every command that writes one
// (analyze, sweep, demo, estimate): `--json PATH` writes the file whole or not at all
// (output_file.h); `--json -` writes it to standard output, which then carries the document
// alone: the command's text goes nowhere (JsonOutput::text), so a pipe reads valid JSON.
#pragma once

#include <functional>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>

#include "absl/status/status.h"

namespace fragscope::cli {

// The `--json` value that names standard output.
inline constexpr char kStdoutPath[] = "-";

class JsonOutput {
 public:
  // `path`: the --json value, nullptr when the flag was not given; `out`: standard output.
  JsonOutput(const std::string* path, std::ostream& out);

  // Whether --json was given.
  bool requested() const { return path_.has_value(); }
  // Whether the document goes to standard output.
  bool to_stdout() const { return path_.has_value() && *path_ == kStdoutPath; }
  // Where the command's text output goes: standard output, or nowhere when the JSON goes there.
  std::ostream& text() { return to_stdout() ? discarded_ : out_; }
  // Writes the document (REQUIRES: requested()). To standard output: an error if the stream
  // fails; to a file: WriteOutputFile's errors, naming the path.
  absl::Status Write(const std::function<void(std::ostream&)>& write);

 private:
  std::optional<std::string> path_;
  std::ostream& out_;
  std::ostringstream discarded_;
};

}  // namespace fragscope::cli
