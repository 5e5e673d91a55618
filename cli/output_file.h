// OutputFile: a file the command line writes (a report, a converted trace) such that a failed
// write never leaves a damaged file where a good one was, never goes unnoticed, and a hostile
// directory cannot turn it into a write elsewhere.
//
// A regular file, a symbolic link, or a path that does not exist yet is written to a temporary
// file beside it (same directory, so the rename cannot cross file systems), which Commit()
// renames over the path. The temporary is created with O_CREAT|O_EXCL|O_NOFOLLOW under an
// unguessable name, `NAME.fragscope-tmp.HOST.PID.RANDOM`, and written through the descriptor that
// created it (write_path() names that descriptor), so a link planted at a predictable name is
// never followed. A link at the path is replaced by the new file, not written through; an
// existing file's permission bits are kept. If Commit() never runs (an error, an early return),
// the destructor removes the temporary and the old file is untouched; SIGINT and SIGTERM remove
// every open temporary before the process ends; a temporary left by a killed run (SIGKILL) is
// removed by the next run that writes the same path, once its process is gone. Anything else
// that exists (a device such as /dev/stdout or /dev/full, a FIFO) is written in place: renaming
// over it would replace the device itself.
//
// Errors name the user's path and the reason (strerror of the failed call).
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fragscope::cli {

class OutputFile {
 public:
  // Creates the temporary (or opens a device in place). Errors name `path` and the reason.
  static absl::StatusOr<std::unique_ptr<OutputFile>> Create(std::string path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // The path the user named (for messages).
  const std::string& path() const { return path_; }
  // Where a writer that opens by name writes: the open temporary (as /proc/self/fd/N), or
  // path() itself when it is written in place.
  const std::string& write_path() const { return write_path_; }
  // The temporary's name in the directory (empty when written in place).
  const std::string& temporary() const { return temporary_; }
  // Writes `bytes` at the end of what was written through this object; errors name path().
  absl::Status Write(std::string_view bytes);
  // A buffered stream onto the same descriptor, for writers that stream; its first failed write
  // is the error Close() returns, with its reason.
  std::ostream& stream();
  // Closes the descriptor Write() writes to: an error if the close reports a lost write.
  absl::Status Close();
  // Close(), then puts what was written at path(). REQUIRES: writers that opened write_path()
  // closed it.
  absl::Status Commit();

 private:
  OutputFile() = default;

  std::string path_;
  std::string write_path_;
  std::string temporary_;
  class Stream;
  std::unique_ptr<Stream> stream_;
  absl::Status stream_error_;  // the stream's first failed write
  int fd_ = -1;
  int signal_slot_ = -1;  // where the temporary is registered for the signal handler
  bool committed_ = false;
};

// One file a command writes: its path and what goes in it.
struct OutputSpec {
  std::string path;
  std::function<void(std::ostream&)> write;
};

// Writes every output, all or none: each is rendered and written to its temporary first, and
// only when all of them are written are they renamed over their paths. An error (a missing
// directory, a full disk) names the path and the reason, and leaves every path as it was.
absl::Status WriteOutputFiles(const std::vector<OutputSpec>& outputs);

// WriteOutputFiles for one file.
absl::Status WriteOutputFile(const std::string& path,
                             const std::function<void(std::ostream&)>& write);

}  // namespace fragscope::cli
