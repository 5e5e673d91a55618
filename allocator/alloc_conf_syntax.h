// The syntax of PYTORCH_CUDA_ALLOC_CONF strings: splitting into entries, and converting and
// formatting the value words. AllocatorOptions' parser (allocator_options.cc) is built on it.
//
// Lexing is PyTorch's (c10::CachingAllocator::ConfigTokenizer): ',' ':' '[' ']' are tokens of
// their own, whitespace (C-locale isspace) is dropped everywhere, also inside a word
// ("max_split _size_mb" is one key), and all other bytes accumulate into word tokens.
//
// The grammar is the one PyTorch's parsers assume:
//   config := [entry {',' entry} [',']]          a trailing ',' is accepted, as in PyTorch
//   entry  := WORD ':' value
//   value  := WORD | '[' [item {',' item} [',']] ']'
//   item   := WORD ':' WORD
// PyTorch does not check every separator (its checkToken() result is ignored, so
// "max_split_size_mb,40" is read as max_split_size_mb:40), and std::stoull/std::stod accept a
// numeric prefix ("40abc" is 40, "-1" wraps to 2^64-1). Here any violation is an error naming
// its byte offset, and a number must be the whole word.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fragscope::alloc_conf {

struct Token {
  std::string text;   // whitespace removed
  size_t offset = 0;  // byte offset of the token's first character in the input
};

struct ListItem {
  Token key;
  Token value;
};

struct Entry {
  Token key;
  Token value;  // the single value word, or the '[' opening the list
  bool is_list = false;
  std::vector<ListItem> items;  // the list's items in order (when is_list)
};

// Splits `conf` into entries, in order. Fails with kInvalidArgument naming the offset (and the
// key, once known) of the first syntax error.
absl::StatusOr<std::vector<Entry>> SplitConfig(std::string_view conf);

// kInvalidArgument "<key>: <value> <problem>", e.g. "max_split_size_mb: 2 is too small, ...".
absl::Status ValueError(const Entry& entry, std::string_view value, std::string_view problem);

// The entry's single value word; an error if the value is a list.
absl::StatusOr<const Token*> SingleValue(const Entry& entry);

// `value` as an unsigned 64-bit integer: decimal digits with an optional leading '+'.
absl::StatusOr<uint64_t> ToUint64(const Entry& entry, const Token& value);

// `value` as a finite double in decimal notation ("0.5", "+1e-3").
absl::StatusOr<double> ToFiniteDouble(const Entry& entry, const Token& value);

// `value` as a boolean: exactly "True" or "False", as in PyTorch.
absl::StatusOr<bool> ToBool(const Entry& entry, const Token& value);

// All of `text` as a decimal double with an optional leading '+'; may be inf or nan. nullopt if
// malformed or beyond double's range.
std::optional<double> ParseDecimal(std::string_view text);

// The shortest decimal text that ParseDecimal() reads back as exactly `value`.
std::string FormatDouble(double value);

// Debian's Abseil 20220623 has its own absl::string_view (ABSL_OPTION_USE_STD_STRING_VIEW 0),
// which absl::StrCat needs; this converts.
inline absl::string_view ToAbsl(std::string_view text) { return {text.data(), text.size()}; }

}  // namespace fragscope::alloc_conf
