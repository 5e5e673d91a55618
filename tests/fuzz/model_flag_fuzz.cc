// libFuzzer target for the `--model SPEC` argument of `fragscope analyze`
// (analysis/explain/model_job.h: PRESET[:key=value,...]).
//
// Properties checked on every input: nothing crashes or trips a sanitizer, and an accepted spec
// gives an estimate with only finite, non-negative terms. (A name ending in .json is read as a
// file; the fuzzer's names are not files, so those fail with kNotFound.)
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "allocator/check.h"
#include "analysis/explain/model_job.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string spec(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<fragscope::estimator::MemoryEstimate> estimate =
      fragscope::EstimateFromModelSpec(spec);
  if (!estimate.ok()) return 0;
  for (const fragscope::estimator::Term& term : estimate->terms) {
    FRAGSCOPE_CHECK(std::isfinite(term.value) && term.value >= 0);
  }
  return 0;
}
