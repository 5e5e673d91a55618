// Wrapping terminal text at 100 columns: every command's output is read at that width.
// Header-only, so that code compiled without the analysis library (the estimate command in the
// estimator's tests) wraps the same way.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

namespace fragscope {

inline constexpr size_t kTextColumns = 100;

// `text` (one paragraph, no newline) broken at spaces into lines of at most `width` columns,
// each ending in "\n": the first prefixed by `first_indent`, the others by `rest_indent`. Runs of
// spaces at a break are dropped; a word longer than a line gets a line of its own, whole.
inline std::string WrapParagraph(std::string_view text, std::string_view first_indent,
                                 std::string_view rest_indent, size_t width = kTextColumns) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    const std::string_view indent = pos == 0 ? first_indent : rest_indent;
    const size_t room = width > indent.size() ? width - indent.size() : 20;
    size_t end = std::min(text.size(), pos + room);
    if (end < text.size()) {
      const size_t space = text.rfind(' ', end);
      end = space != std::string_view::npos && space > pos
                ? space
                : std::min(text.find(' ', end), text.size());
    }
    size_t line_end = end;
    while (line_end > pos && text[line_end - 1] == ' ') --line_end;
    out.append(indent).append(text.substr(pos, line_end - pos)).push_back('\n');
    pos = end;
    while (pos < text.size() && text[pos] == ' ') ++pos;
  }
  return out;
}

}  // namespace fragscope
