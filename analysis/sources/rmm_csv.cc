#include "analysis/sources/rmm_csv.h"

#include <array>
#include <fstream>

#include "absl/strings/str_format.h"
#include "allocator/check.h"

namespace fragscope {
namespace {

constexpr std::string_view kHeader = "Thread,Time,Action,Pointer,Size,Stream";
constexpr std::array<std::string_view, 6> kColumns = {"Thread",  "Time", "Action",
                                                      "Pointer", "Size", "Stream"};
constexpr int64_t kUsPerDay = int64_t{86'400} * 1'000'000;

// Shown text of a bad field, cut to keep the message short.
std::string Shown(std::string_view field) {
  constexpr size_t kMaxShown = 40;
  if (field.size() <= kMaxShown) return std::string(field);
  return absl::StrFormat("%s...", field.substr(0, kMaxShown));
}

bool ParseDecimal(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
    const auto digit = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *out = v;
  return true;
}

// "0x1f", "0X1F" or "1f"; at most 16 digits.
bool ParseHex(std::string_view s, uint64_t* out) {
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
  if (s.empty() || s.size() > 16) return false;
  uint64_t v = 0;
  for (const char c : s) {
    uint64_t digit = 0;
    if (c >= '0' && c <= '9') {
      digit = static_cast<uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<uint64_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      digit = static_cast<uint64_t>(c - 'A' + 10);
    } else {
      return false;
    }
    v = (v << 4) | digit;
  }
  *out = v;
  return true;
}

bool TwoDigits(std::string_view s, size_t at, int64_t limit, int64_t* out) {
  if (at + 2 > s.size()) return false;
  const char a = s[at];
  const char b = s[at + 1];
  if (a < '0' || a > '9' || b < '0' || b > '9') return false;
  *out = (a - '0') * 10 + (b - '0');
  return *out <= limit;
}

// "HH:MM:SS" with an optional ".f" of 1-9 digits (RMM writes 6), as microseconds since midnight.
bool ParseTimeOfDay(std::string_view s, int64_t* out_us) {
  int64_t h = 0;
  int64_t m = 0;
  int64_t sec = 0;
  if (s.size() < 8 || s[2] != ':' || s[5] != ':' || !TwoDigits(s, 0, 23, &h) ||
      !TwoDigits(s, 3, 59, &m) || !TwoDigits(s, 6, 60, &sec)) {
    return false;
  }
  int64_t fraction_us = 0;
  if (s.size() > 8) {
    std::string_view frac = s.substr(9);
    if (s[8] != '.' || frac.empty() || frac.size() > 9) return false;
    int64_t scale = 100'000;
    for (const char c : frac) {
      if (c < '0' || c > '9') return false;
      fraction_us += (c - '0') * scale;
      scale /= 10;
    }
  }
  *out_us = ((h * 60 + m) * 60 + sec) * 1'000'000 + fraction_us;
  return true;
}

absl::Status FieldError(size_t line, size_t column, std::string_view expected,
                        std::string_view got) {
  return absl::InvalidArgumentError(
      absl::StrFormat("rmm csv: line %d, column %d (%s): expected %s, got '%s'", line, column + 1,
                      kColumns[column], expected, Shown(got)));
}

absl::Status ParseRow(std::string_view line, size_t line_number, RmmLogEntry* entry) {
  std::array<std::string_view, 6> fields;
  size_t count = 0;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    const size_t end = comma == std::string_view::npos ? line.size() : comma;
    if (count < fields.size()) fields[count] = line.substr(start, end - start);
    ++count;
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (count != fields.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rmm csv: line %d: expected 6 comma-separated fields (%s), got %d: '%s'",
                        line_number, kHeader, count, Shown(line)));
  }
  entry->line = line_number;
  if (!ParseDecimal(fields[0], &entry->thread_id)) {
    return FieldError(line_number, 0, "a decimal thread id", fields[0]);
  }
  if (!ParseTimeOfDay(fields[1], &entry->time_of_day_us)) {
    return FieldError(line_number, 1, "a time of day HH:MM:SS.ffffff", fields[1]);
  }
  if (fields[2] == "allocate") {
    entry->action = RmmAction::kAllocate;
  } else if (fields[2] == "free") {
    entry->action = RmmAction::kFree;
  } else if (fields[2] == "allocate failure") {
    entry->action = RmmAction::kAllocateFailure;
  } else {
    return FieldError(line_number, 2, "allocate, free or allocate failure", fields[2]);
  }
  if (fields[3] == "(nil)") {
    entry->pointer = 0;
  } else if (!ParseHex(fields[3], &entry->pointer)) {
    return FieldError(line_number, 3, "a hex pointer or (nil)", fields[3]);
  }
  if (!ParseDecimal(fields[4], &entry->size_bytes)) {
    return FieldError(line_number, 4, "a decimal byte count", fields[4]);
  }
  if (!ParseHex(fields[5], &entry->stream)) {
    return FieldError(line_number, 5, "a hex stream handle", fields[5]);
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view RmmActionName(RmmAction action) {
  switch (action) {
    case RmmAction::kAllocate:
      return "allocate";
    case RmmAction::kFree:
      return "free";
    case RmmAction::kAllocateFailure:
      return "allocate failure";
  }
  return "?";
}

absl::StatusOr<RmmLog> ParseRmmCsv(std::string_view text, const RmmCsvOptions& options) {
  if (text.size() > options.max_input_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("rmm csv: input of %d bytes exceeds the limit of %d", text.size(),
                        options.max_input_bytes));
  }
  RmmLog log;
  size_t pos = 0;
  size_t line_number = 0;
  bool header_seen = false;
  int64_t previous_us = -1;
  int64_t day = 0;
  while (pos < text.size()) {
    const size_t newline = text.find('\n', pos);
    const bool terminated = newline != std::string_view::npos;
    std::string_view line = text.substr(pos, (terminated ? newline : text.size()) - pos);
    pos = terminated ? newline + 1 : text.size();
    ++line_number;
    // RMM ends every row with a newline; an unterminated last line is a torn write whose fields
    // may be cut short, so it is dropped even when it happens to parse.
    if (!terminated && options.allow_torn_tail && header_seen) {
      log.dropped_tail_bytes = line.size();
      break;
    }
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > options.max_line_bytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("rmm csv: line %d is %d bytes long (limit %d)", line_number, line.size(),
                          options.max_line_bytes));
    }
    if (!header_seen) {
      if (line != kHeader) {
        return absl::InvalidArgumentError(
            absl::StrFormat("rmm csv: line %d: expected the header '%s', got '%s'", line_number,
                            kHeader, Shown(line)));
      }
      header_seen = true;
      continue;
    }
    if (line.empty()) continue;
    RmmLogEntry entry;
    FRAGSCOPE_RETURN_IF_ERROR(ParseRow(line, line_number, &entry));
    if (previous_us >= 0 && entry.time_of_day_us + kUsPerDay / 2 < previous_us) ++day;
    previous_us = entry.time_of_day_us;
    entry.timestamp_us = entry.time_of_day_us + day * kUsPerDay;
    log.entries.push_back(entry);
  }
  if (!header_seen) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rmm csv: no header line '%s' (empty input)", kHeader));
  }
  return log;
}

absl::StatusOr<RmmLog> ReadRmmCsvFile(const std::string& path, const RmmCsvOptions& options) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(absl::StrFormat("cannot open %s", path));
  const std::streamoff size = in.tellg();
  if (size < 0) return absl::DataLossError(absl::StrFormat("cannot size %s", path));
  if (static_cast<uint64_t>(size) > options.max_input_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: %d bytes exceeds the rmm csv size limit of %d", path, size, options.max_input_bytes));
  }
  std::string text(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(text.data(), size)) {
    return absl::DataLossError(absl::StrFormat("cannot read %s", path));
  }
  absl::StatusOr<RmmLog> log = ParseRmmCsv(text, options);
  if (!log.ok()) {
    return absl::Status(log.status().code(),
                        absl::StrFormat("%s: %s", path, log.status().message()));
  }
  return log;
}

}  // namespace fragscope
