#include "cli/progress_bar.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>

#include "absl/strings/str_format.h"

namespace fragscope::cli {
namespace {

// The terminal's width (80 when unknown): a line longer than it would wrap, and every redraw
// would leave the wrapped part behind.
size_t TerminalColumns() {
  winsize size{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 80;
}

}  // namespace

ProgressBar::ProgressBar(std::ostream& err) : err_(err) {
  active_ = &err == &std::cerr && isatty(STDERR_FILENO) == 1;
}

void ProgressBar::Update(const std::string& stage, double fraction) {
  if (!active_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && fraction < 1.0 && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  fraction = std::clamp(fraction, 0.0, 1.0);
  // "[bar] 100% stage     ": the bar takes what the terminal leaves, at most 40 columns; the
  // line stays one column short of the edge (some terminals wrap on the last column).
  const std::string tail = absl::StrFormat(" %3.0f%% %-10s", 100 * fraction, stage);
  const size_t columns = TerminalColumns();
  const size_t width =
      std::min<size_t>(40, columns > tail.size() + 4 ? columns - tail.size() - 4 : 0);
  std::string line;
  if (width >= 5) {
    const size_t filled = static_cast<size_t>(fraction * static_cast<double>(width));
    // Appended piece by piece: GCC 12 at -O3 reports a false -Wrestrict on the operator+ chain.
    line.reserve(width + 2 + tail.size());
    line.push_back('[');
    line.append(filled, '#');
    line.append(width - filled, ' ');
    line.push_back(']');
  }
  line += tail;
  if (line.size() >= columns) line.resize(columns > 1 ? columns - 1 : 0);
  err_ << "\r" << line << std::flush;
  drawn_ = true;
}

void ProgressBar::Clear() {
  if (!drawn_) return;
  const size_t columns = TerminalColumns();
  err_ << "\r" << std::string(std::min<size_t>(60, columns > 1 ? columns - 1 : 0), ' ') << "\r"
       << std::flush;
  drawn_ = false;
}

}  // namespace fragscope::cli
