// Replayer: private pools (Note [Private pools in a replay] in replay.h).
#include "absl/strings/str_format.h"
#include "analysis/replay/replay.h"

namespace fragscope {

void Replayer::EnsurePool(PoolId pool) {
  if (allocator_->PoolUseCount(pool).ok()) return;
  absl::Status status = allocator_->CreateOrIncrefPool(pool);
  if (!status.ok()) {
    Warn(absl::StrFormat("private pool %s could not be created: %s", FormatPoolId(pool),
                         status.message()));
  }
}

void Replayer::ReleasePoolForFree(const TraceEvent& event) {
  absl::StatusOr<int> users = allocator_->PoolUseCount(event.pool_id);
  if (!users.ok()) return;  // never used in the replay (a segment from before the trace)
  for (int i = 0; i < *users; ++i) (void)allocator_->ReleasePool(event.pool_id);
}

}  // namespace fragscope
