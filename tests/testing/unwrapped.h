// Report text with its wrapped lines joined, for tests that look for a phrase wherever the
// wrapping at 100 columns breaks it: a newline and the indent after it read as one space.
#pragma once

#include <string>

namespace fragscope::testing {

inline std::string Unwrapped(const std::string& text) {
  std::string joined;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\n') {
      joined.push_back(text[i]);
      continue;
    }
    joined.push_back(' ');
    while (i + 1 < text.size() && text[i + 1] == ' ') ++i;
  }
  return joined;
}

}  // namespace fragscope::testing
