// OutputFile: a file the command line writes (a report, a converted trace, a demo's log) such
// that a failed write never leaves a damaged file where a good one was, and never goes unnoticed.
//
// A regular file, or a path that does not exist yet, is written to a temporary file beside it
// (same directory, so the rename cannot cross file systems), which Commit() renames over the
// path (through a symbolic link: its target, the link stays); if Commit() never runs (an error,
// an early return), the destructor removes the temporary and the old file is untouched. Anything
// else that exists (a device such as /dev/stdout or /dev/full, a FIFO) is written in place:
// renaming over it would replace the device itself.
//
// Errors name the user's path and the reason (strerror of the failed call).
#pragma once

#include <functional>
#include <ostream>
#include <string>

#include "absl/status/status.h"

namespace fragscope::cli {

class OutputFile {
 public:
  explicit OutputFile(std::string path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // The path the user named (for messages).
  const std::string& path() const { return path_; }
  // Where to write: the temporary, or path() itself when it is written in place.
  const std::string& write_path() const { return write_path_; }
  // Puts what was written at path(). REQUIRES: the writer closed write_path().
  absl::Status Commit();

 private:
  std::string path_;
  std::string write_path_;
  bool committed_ = false;
};

// Writes path through `write` (a std::ofstream on an OutputFile): an error if the file cannot be
// created, or if any write or the close fails (a full disk), naming the path.
absl::Status WriteOutputFile(const std::string& path,
                             const std::function<void(std::ostream&)>& write);

}  // namespace fragscope::cli
