// ProgressBar: a one-line progress indicator on stderr, drawn only when stderr is a terminal
// (never in pipes, files or tests), redrawn at most every 100 ms.
#pragma once

#include <chrono>
#include <ostream>
#include <string>

namespace fragscope::cli {

class ProgressBar {
 public:
  // Active only if `err` is std::cerr and file descriptor 2 is a terminal.
  explicit ProgressBar(std::ostream& err);
  ~ProgressBar() { Clear(); }
  void Update(const std::string& stage, double fraction);
  // Erases the line (before printing results).
  void Clear();
  bool active() const { return active_; }

 private:
  std::ostream& err_;
  bool active_ = false;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace fragscope::cli
