// libFuzzer target for the small parsers of the command line and the hooks' environment: byte
// sizes and counts (cli/cli_flags.h: --capacity, --allowed, --at, ...), list splitting
// (the sweep's grids), the trace commands' flags with the sweep grid (ParseFlags and
// ApplyAnalysisFlags; arguments one per line), and FRAGSCOPE_LOG path patterns
// (fslog/fslog_writer.h %p %r %%, hooks/hook_config.h %d and the per-device name).
//
// Input: one selector byte, then the text. Properties checked: nothing crashes or trips a
// sanitizer; an accepted size or count printed in decimal parses back to itself; split lists
// hold exactly the input's characters minus the separating commas; an expanded path pattern
// keeps no '%' except the literal ones its "%%" asked for; a refused command line says why.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "allocator/check.h"
#include "cli/cli_flags.h"
#include "fslog/fslog_writer.h"
#include "hooks/hook_config.h"

namespace {

size_t CountLiteralPercents(std::string_view pattern) {
  size_t n = 0;
  for (size_t i = 0; i + 1 < pattern.size(); ++i) {
    if (pattern[i] == '%' && pattern[i + 1] == '%') {
      ++n;
      ++i;
    }
  }
  return n;
}

// An accepted number, printed in decimal, parses back to itself.
void CheckRoundTrip(absl::StatusOr<uint64_t> (*parse)(std::string_view, std::string_view),
                    std::string_view text) {
  const absl::StatusOr<uint64_t> value = parse(text, "--flag");
  if (!value.ok()) return;
  const absl::StatusOr<uint64_t> again = parse(absl::StrCat(*value), "--flag");
  FRAGSCOPE_CHECK(again.ok() && *again == *value);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fragscope;
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0:
      CheckRoundTrip(cli::ParseByteSize, text);
      break;
    case 1:
      CheckRoundTrip(cli::ParseCount, text);
      break;
    case 2: {
      const std::vector<std::string> items = cli::SplitList(text);
      size_t chars = 0;
      for (const std::string& item : items) chars += item.size();
      const size_t commas = static_cast<size_t>(std::count(text.begin(), text.end(), ','));
      FRAGSCOPE_CHECK(chars <= text.size() && chars + commas >= text.size());
      break;
    }
    case 3: {
      const absl::StatusOr<std::string> path = ExpandPathPattern(text, 4242, 3);
      if (path.ok()) {
        const size_t percents = static_cast<size_t>(std::count(path->begin(), path->end(), '%'));
        FRAGSCOPE_CHECK(percents == CountLiteralPercents(text));
      }
      break;
    }
    case 5: {
      const std::vector<std::string> args =
          absl::StrSplit(absl::string_view(text.data(), text.size()), '\n');
      static const cli::CommandSpec kCommand{
          .name = "fuzz", .flags = cli::Flags({cli::kTraceFlags, cli::kSweepFlags})};
      absl::StatusOr<cli::ParsedFlags> flags = cli::ParseFlags(args, kCommand);
      absl::Status status = flags.status();
      AnalysisOptions options;
      if (flags.ok()) status = cli::ApplyAnalysisFlags(*flags, &options);
      FRAGSCOPE_CHECK(status.ok() || !status.message().empty());
      break;
    }
    case 4: {
      // The device expansion leaves %p, %r and %% for ExpandPathPattern.
      const absl::StatusOr<std::string> pattern = hooks::ExpandDeviceLogPattern(text, 1);
      if (pattern.ok()) (void)ExpandPathPattern(*pattern, 4242, 3);
      break;
    }
  }
  return 0;
}
