// Excerpt: a text from a user's file quoted in a message: at most a short prefix of it, with
// bytes that are not printable ASCII escaped, so that a binary or huge field (a log header's
// 64 KiB options text) cannot flood the terminal.
#pragma once

#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace fragscope {

inline constexpr size_t kExcerptBytes = 80;

// `text` cut at kExcerptBytes ("... (N bytes, M left out)" says how long it was and how much is
// not shown), non-printable bytes, '\' and '\'' as \xNN.
inline std::string Excerpt(absl::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < kExcerptBytes; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    }
  }
  if (text.size() > kExcerptBytes) {
    absl::StrAppendFormat(&out, "... (%d bytes, %d left out)", text.size(),
                          text.size() - kExcerptBytes);
  }
  return out;
}

}  // namespace fragscope
