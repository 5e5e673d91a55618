// libFuzzer target for the RMM logging_resource_adaptor CSV parser (analysis/sources/rmm_csv.h).
//
// Properties checked on every input: ParseRmmCsv never crashes; accepted entries carry strictly
// increasing line numbers and timestamps that differ from the time of day by whole days.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "allocator/check.h"
#include "analysis/sources/rmm_csv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fragscope;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  for (const bool torn : {true, false}) {
    RmmCsvOptions options;
    options.allow_torn_tail = torn;
    const absl::StatusOr<RmmLog> log = ParseRmmCsv(input, options);
    if (!log.ok()) continue;
    size_t previous_line = 1;
    for (const RmmLogEntry& e : log->entries) {
      FRAGSCOPE_CHECK(e.line > previous_line);
      previous_line = e.line;
      FRAGSCOPE_CHECK(e.time_of_day_us >= 0 && e.time_of_day_us < int64_t{86'401} * 1'000'000);
      FRAGSCOPE_CHECK((e.timestamp_us - e.time_of_day_us) % (int64_t{86'400} * 1'000'000) == 0);
    }
  }
  return 0;
}
