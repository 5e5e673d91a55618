#include "allocator/memory_summary.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace fragscope {
namespace {

// PyTorch's _format_size: the unit is chosen from the row's first value (`pref`).
std::string FormatSizeCell(int64_t value, int64_t pref) {
  static constexpr const char* kUnits[] = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  double pref_scaled = static_cast<double>(pref);
  while (unit + 1 < 6 && pref_scaled >= 768 * 1024) {
    ++unit;
    value /= 1024;
    pref_scaled /= 1024;
  }
  return absl::StrFormat("%6d %s", value, kUnits[unit]);
}

// PyTorch's _format_count.
std::string FormatCountCell(int64_t value, int64_t pref) {
  static constexpr const char* kUnits[] = {" ", "K", "M"};
  int unit = 0;
  double pref_scaled = static_cast<double>(pref);
  while (unit + 1 < 3 && pref_scaled >= 750 * 1000) {
    ++unit;
    value /= 1000;
    pref_scaled /= 1000;
  }
  return absl::StrFormat("%7d %s ", value, kUnits[unit]);
}

using CellFormatter = std::string (*)(int64_t, int64_t);

std::string Row(const std::string& name, const Stat& s, const Stat& pref, CellFormatter f) {
  return absl::StrFormat(" %-21s | %s | %s | %s | %s ", name, f(s.current, pref.current),
                         f(s.peak, pref.peak), f(s.allocated, pref.allocated),
                         f(s.freed, pref.freed));
}

}  // namespace

std::string MemorySummary(const DeviceStats& stats, int device, bool abbreviated) {
  const std::string rule(75, '-');
  const std::string double_rule(75, '=');
  std::vector<std::string> lines;
  lines.push_back(double_rule);
  lines.push_back(
      absl::StrFormat(" %16s PyTorch CUDA memory summary, device ID %-17d ", "", device));
  lines.push_back(rule);
  lines.push_back(absl::StrFormat("  %9s CUDA OOMs: %-12d | %6s cudaMalloc retries: %-8d  ", "",
                                  stats.num_ooms, "", stats.num_alloc_retries));
  lines.push_back(double_rule);
  lines.push_back("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ");
  struct Metric {
    const StatArray& stat;
    const char* name;
    CellFormatter format;
  };
  const Metric metrics[] = {
      {stats.allocated_bytes, "Allocated memory", FormatSizeCell},
      {stats.active_bytes, "Active memory", FormatSizeCell},
      {stats.requested_bytes, "Requested memory", FormatSizeCell},
      {stats.reserved_bytes, "GPU reserved memory", FormatSizeCell},
      {stats.inactive_split_bytes, "Non-releasable memory", FormatSizeCell},
      {stats.allocation, "Allocations", FormatCountCell},
      {stats.active, "Active allocs", FormatCountCell},
      {stats.segment, "GPU reserved segments", FormatCountCell},
      {stats.inactive_split, "Non-releasable allocs", FormatCountCell},
  };
  for (const Metric& m : metrics) {
    lines.push_back(rule);
    const Stat& all = m.stat[static_cast<int>(StatType::kAll)];
    lines.push_back(Row(m.name, all, all, m.format));
    if (abbreviated) continue;
    lines.push_back(Row("      from large pool", m.stat[static_cast<int>(StatType::kLargePool)],
                        all, m.format));
    lines.push_back(Row("      from small pool", m.stat[static_cast<int>(StatType::kSmallPool)],
                        all, m.format));
  }
  for (const auto& [stat, name] :
       {std::pair<const Stat&, const char*>{stats.oversize_allocations, "Oversize allocations"},
        {stats.oversize_segments, "Oversize GPU segments"}}) {
    lines.push_back(rule);
    lines.push_back(Row(name, stat, stat, FormatCountCell));
  }
  lines.push_back(double_rule);
  return absl::StrCat("|", absl::StrJoin(lines, "|\n|"), "|\n");
}

}  // namespace fragscope
