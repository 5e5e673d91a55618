#include "allocator/alloc_conf_syntax.h"

#include <charconv>
#include <cmath>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "allocator/check.h"

namespace fragscope::alloc_conf {
namespace {

bool IsSeparator(char c) { return c == ',' || c == ':' || c == '[' || c == ']'; }

// PyTorch's ConfigTokenizer constructor, plus the offset of each token.
std::vector<Token> Lex(std::string_view conf) {
  std::vector<Token> tokens;
  Token word;
  bool in_word = false;
  for (size_t i = 0; i < conf.size(); ++i) {
    const char c = conf[i];
    if (IsSeparator(c)) {
      if (in_word) tokens.push_back(std::exchange(word, Token{}));
      in_word = false;
      tokens.push_back(Token{std::string(1, c), i});
    } else if (!absl::ascii_isspace(static_cast<unsigned char>(c))) {
      if (!in_word) word.offset = i;
      in_word = true;
      word.text += c;
    }
  }
  if (in_word) tokens.push_back(std::move(word));
  return tokens;
}

// Recursive-descent reader over the tokens of one config string.
class Splitter {
 public:
  Splitter(std::vector<Token> tokens, size_t end_offset)
      : tokens_(std::move(tokens)), end_offset_(end_offset) {}

  absl::StatusOr<std::vector<Entry>> Run() {
    std::vector<Entry> entries;
    while (!AtEnd()) {
      Entry entry;
      if (!IsWord(Peek())) return Error(absl::StrCat("expected a key, got ", Where()));
      entry.key = Take();
      const std::string key = entry.key.text;  // a copy: `entry` is moved below
      if (!IsSymbol(Peek(), ':')) {
        return Error(absl::StrCat("expected ':' after key '", key, "', got ", Where()));
      }
      Take();
      if (IsSymbol(Peek(), '[')) {
        entry.value = Take();
        entry.is_list = true;
        FRAGSCOPE_RETURN_IF_ERROR(ReadListItems(entry));
      } else if (IsWord(Peek())) {
        entry.value = Take();
      } else {
        return Error(absl::StrCat(key, ": expected a value, got ", Where()));
      }
      entries.push_back(std::move(entry));
      if (AtEnd()) break;
      if (!IsSymbol(Peek(), ',')) {
        return Error(absl::StrCat(key, ": expected ',' or the end after the value, got ", Where()));
      }
      Take();
    }
    return entries;
  }

 private:
  // Reads "item {',' item} [','] ']'" after the '['.
  absl::Status ReadListItems(Entry& entry) {
    const std::string& key = entry.key.text;
    while (true) {
      if (AtEnd()) {
        return Error(absl::StrCat(key, ": unterminated list, '[' at offset ", entry.value.offset,
                                  " has no ']'"));
      }
      if (IsSymbol(Peek(), ']')) break;
      ListItem item;
      if (!IsWord(Peek())) {
        return Error(absl::StrCat(key, ": expected a list key or ']', got ", Where()));
      }
      item.key = Take();
      if (!IsSymbol(Peek(), ':')) {
        return Error(absl::StrCat(key, ": expected ':' after list key '", item.key.text, "', got ",
                                  Where()));
      }
      Take();
      if (!IsWord(Peek())) {
        return Error(absl::StrCat(key, ": expected a value for list key '", item.key.text,
                                  "', got ", Where()));
      }
      item.value = Take();
      entry.items.push_back(std::move(item));
      if (IsSymbol(Peek(), ',')) {
        Take();
      } else if (!AtEnd() && !IsSymbol(Peek(), ']')) {
        return Error(absl::StrCat(key, ": expected ',' or ']' in the list, got ", Where()));
      }
    }
    Take();  // ']'
    return absl::OkStatus();
  }

  bool AtEnd() const { return next_ == tokens_.size(); }
  const Token* Peek() const { return AtEnd() ? nullptr : &tokens_[next_]; }
  Token Take() { return tokens_[next_++]; }

  static bool IsSymbol(const Token* token, char symbol) {
    return token != nullptr && token->text.size() == 1 && token->text[0] == symbol;
  }
  // Separators are always tokens of their own, so a one-separator token is never a word.
  static bool IsWord(const Token* token) {
    return token != nullptr && !(token->text.size() == 1 && IsSeparator(token->text[0]));
  }

  // "'x' at offset 7", or "the end of the input (offset 12)".
  std::string Where() const {
    if (AtEnd()) return absl::StrCat("the end of the input (offset ", end_offset_, ")");
    return absl::StrCat("'", tokens_[next_].text, "' at offset ", tokens_[next_].offset);
  }

  static absl::Status Error(std::string message) {
    return absl::InvalidArgumentError(std::move(message));
  }

  std::vector<Token> tokens_;
  size_t end_offset_;
  size_t next_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<Entry>> SplitConfig(std::string_view conf) {
  return Splitter(Lex(conf), conf.size()).Run();
}

absl::Status ValueError(const Entry& entry, std::string_view value, std::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat(entry.key.text, ": ", ToAbsl(value), " ", ToAbsl(problem)));
}

absl::StatusOr<const Token*> SingleValue(const Entry& entry) {
  if (entry.is_list) {
    return absl::InvalidArgumentError(absl::StrCat(entry.key.text,
                                                   ": expected a single value, got a list at "
                                                   "offset ",
                                                   entry.value.offset));
  }
  return &entry.value;
}

absl::StatusOr<uint64_t> ToUint64(const Entry& entry, const Token& value) {
  std::string_view digits = value.text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  uint64_t result = 0;
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, result);
  if (digits.empty() || ptr != end || (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    return ValueError(entry, value.text, "is not a non-negative integer");
  }
  if (ec == std::errc::result_out_of_range) {
    return ValueError(entry, value.text, "is out of range, must be < 2^64");
  }
  return result;
}

absl::StatusOr<double> ToFiniteDouble(const Entry& entry, const Token& value) {
  const std::optional<double> result = ParseDecimal(value.text);
  if (!result.has_value() || !std::isfinite(*result)) {
    return ValueError(entry, value.text, "is not a finite decimal number");
  }
  return *result;
}

absl::StatusOr<bool> ToBool(const Entry& entry, const Token& value) {
  if (value.text == "True") return true;
  if (value.text == "False") return false;
  return ValueError(entry, value.text, "is not a boolean, expected True or False");
}

std::optional<double> ParseDecimal(std::string_view text) {
  if (!text.empty() && text.front() == '+') {
    text.remove_prefix(1);
    if (!text.empty() && text.front() == '-') return std::nullopt;  // "+-1"
  }
  double result = 0.0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, result, std::chars_format::general);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return result;
}

std::string FormatDouble(double value) {
  char buffer[64];
  const auto [ptr, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  FRAGSCOPE_CHECK(ec == std::errc());
  return std::string(buffer, ptr);
}

}  // namespace fragscope::alloc_conf
