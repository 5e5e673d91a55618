#include "analysis/ranks/rank_inputs.h"

#include <glob.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <limits>

#include "absl/strings/str_format.h"

namespace fragscope {
namespace {

bool IsTraceFileName(std::string_view name) {
  return name.ends_with(".fslog") || name.ends_with(".fslog.zst") || name.ends_with(".pickle") ||
         name.ends_with(".pkl");
}

bool IsSummaryFileName(std::string_view name) { return name.ends_with(".json"); }

bool IsPattern(std::string_view arg) { return arg.find_first_of("*?[") != std::string_view::npos; }

// Expands `args` (see ExpandTraceInputs), a directory to the files whose names `wanted` accepts.
absl::StatusOr<std::vector<std::string>> Expand(const std::vector<std::string>& args,
                                                bool (*wanted)(std::string_view),
                                                std::string_view what) {
  std::vector<std::string> paths;
  for (const std::string& arg : args) {
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      std::vector<std::string> found;
      for (const auto& entry : std::filesystem::directory_iterator(arg, ec)) {
        std::error_code type_error;
        if (entry.is_regular_file(type_error) && wanted(entry.path().filename().string())) {
          found.push_back(entry.path().string());
        }
      }
      if (ec) {
        return absl::NotFoundError(
            absl::StrFormat("%s: cannot list the directory: %s", arg, ec.message()));
      }
      if (found.empty()) {
        return absl::NotFoundError(absl::StrFormat("%s: a directory with no %s in it", arg, what));
      }
      std::sort(found.begin(), found.end(), NaturalLess);
      paths.insert(paths.end(), found.begin(), found.end());
    } else if (IsPattern(arg) && !std::filesystem::exists(arg, ec)) {
      glob_t matches{};
      const int rc = glob(arg.c_str(), 0, nullptr, &matches);
      std::vector<std::string> found;
      for (size_t i = 0; rc == 0 && i < matches.gl_pathc; ++i) {
        found.emplace_back(matches.gl_pathv[i]);
      }
      globfree(&matches);
      if (found.empty()) {
        return absl::NotFoundError(absl::StrFormat("%s: the pattern matches no file", arg));
      }
      std::sort(found.begin(), found.end(), NaturalLess);
      paths.insert(paths.end(), found.begin(), found.end());
    } else {
      paths.push_back(arg);
    }
  }
  return paths;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandTraceInputs(const std::vector<std::string>& args) {
  return Expand(args, IsTraceFileName, "trace (.fslog, .fslog.zst, .pickle, .pkl)");
}

absl::StatusOr<std::vector<std::string>> ExpandSummaryInputs(const std::vector<std::string>& args) {
  return Expand(args, IsSummaryFileName, "summary (.json)");
}

bool NaturalLess(std::string_view a, std::string_view b) {
  const auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t i_end = i, j_end = j;
      while (i_end < a.size() && digit(a[i_end])) ++i_end;
      while (j_end < b.size() && digit(b[j_end])) ++j_end;
      // Compare as numbers: strip leading zeros, then the longer is larger.
      size_t i0 = i, j0 = j;
      while (i0 + 1 < i_end && a[i0] == '0') ++i0;
      while (j0 + 1 < j_end && b[j0] == '0') ++j0;
      const std::string_view x = a.substr(i0, i_end - i0), y = b.substr(j0, j_end - j0);
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = i_end;
      j = j_end;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  if (a.size() - i != b.size() - j) return a.size() - i < b.size() - j;
  return a < b;  // "rank01" and "rank1": any fixed order
}

std::optional<int32_t> RankFromFileName(std::string_view path) {
  const size_t slash = path.rfind('/');
  std::string name(path.substr(slash == std::string_view::npos ? 0 : slash + 1));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::optional<int32_t> rank;
  for (size_t at = name.find("rank"); at != std::string::npos; at = name.find("rank", at + 1)) {
    size_t i = at + 4;
    if (i < name.size() && (name[i] == '_' || name[i] == '-')) ++i;
    size_t end = i;
    int64_t value = 0;
    while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end])) &&
           value <= std::numeric_limits<int32_t>::max()) {
      value = value * 10 + (name[end] - '0');
      ++end;
    }
    if (end > i && value <= std::numeric_limits<int32_t>::max()) {
      rank = static_cast<int32_t>(value);
    }
  }
  return rank;
}

std::pair<int32_t, RankSource> AssignRank(const std::string& path, TraceFormat format,
                                          int32_t header_rank, const RankHint& hint) {
  if (hint.flag_rank.has_value()) return {*hint.flag_rank, RankSource::kFlag};
  if (format == TraceFormat::kFslog) return {header_rank, RankSource::kLogHeader};
  if (std::optional<int32_t> rank = RankFromFileName(path)) return {*rank, RankSource::kFileName};
  const size_t position =
      std::min<size_t>(hint.position, static_cast<size_t>(std::numeric_limits<int32_t>::max()));
  return {static_cast<int32_t>(position), RankSource::kOrderGiven};
}

}  // namespace fragscope
