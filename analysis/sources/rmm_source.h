// RmmSource: RMM's logging_resource_adaptor CSV (analysis/sources/rmm_csv.h) as a TraceSource.
//
// RMM logs the requests its memory resource served: allocate, free, allocate failure. There are
// no segments and no stream-ordered frees, so every free is immediate (TraceInfo::
// records_free_completed = false) and a replay through fragscope's allocator answers "what would
// PyTorch's caching allocator have done with this job's requests". An "allocate failure" row is
// an OOM of the original job. The log has no device capacity: give one (--capacity).
#pragma once

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "analysis/sources/rmm_csv.h"
#include "analysis/sources/trace_event.h"

namespace fragscope {

class RmmSource final : public TraceSource {
 public:
  static absl::StatusOr<std::unique_ptr<RmmSource>> Open(const std::string& path);
  static std::unique_ptr<RmmSource> FromLog(std::shared_ptr<const RmmLog> log,
                                            const std::string& path);

  absl::StatusOr<bool> Next(TraceEvent* event) override;
  std::vector<std::string> warnings() const override;
  double Progress() const override {
    return log_->entries.empty() ? 1.0 : static_cast<double>(pos_) / log_->entries.size();
  }

 private:
  RmmSource() = default;

  std::shared_ptr<const RmmLog> log_;
  size_t pos_ = 0;
  // Live allocations' sizes, to tell frees that name another size (the replay frees by address).
  absl::flat_hash_map<uint64_t, uint64_t> live_sizes_;
  uint64_t size_mismatches_ = 0;
  std::string first_size_mismatch_;
};

}  // namespace fragscope
