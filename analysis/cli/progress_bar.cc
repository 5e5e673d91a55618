#include "analysis/cli/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <iostream>

#include "absl/strings/str_format.h"

namespace fragscope::cli {

ProgressBar::ProgressBar(std::ostream& err) : err_(err) {
  active_ = &err == &std::cerr && isatty(STDERR_FILENO) == 1;
}

void ProgressBar::Update(const std::string& stage, double fraction) {
  if (!active_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && fraction < 1.0 && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  fraction = std::clamp(fraction, 0.0, 1.0);
  constexpr int kWidth = 40;
  const int filled = static_cast<int>(fraction * kWidth);
  err_ << absl::StrFormat("\r[%s%s] %3.0f%% %-10s", std::string(static_cast<size_t>(filled), '#'),
                          std::string(static_cast<size_t>(kWidth - filled), ' '), 100 * fraction,
                          stage)
       << std::flush;
  drawn_ = true;
}

void ProgressBar::Clear() {
  if (!drawn_) return;
  err_ << "\r" << std::string(60, ' ') << "\r" << std::flush;
  drawn_ = false;
}

}  // namespace fragscope::cli
