// CachingAllocator: private pools (CUDA-graph pools and MemPools), PyTorch 2.11's rules; see
// allocator/README.md, "Private pools", for each rule and its source.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "allocator/caching_allocator.h"

namespace fragscope {
namespace {

absl::Status UnknownPool(PoolId id) {
  return absl::NotFoundError(absl::StrFormat("no private pool %s", FormatPoolId(id)));
}

}  // namespace

PrivatePool* CachingAllocator::FindPrivatePoolLocked(PoolId id) const {
  auto it = private_pools_.find(id);
  return it == private_pools_.end() ? nullptr : it->second.get();
}

PrivatePool* CachingAllocator::RoutedPoolLocked(StreamId stream) const {
  for (auto it = captures_underway_.rbegin(); it != captures_underway_.rend(); ++it) {
    if (it->second(stream)) return FindPrivatePoolLocked(it->first);
  }
  return nullptr;
}

absl::Status CachingAllocator::CreateOrIncrefPool(PoolId pool) {
  if (pool.is_default()) {
    return absl::InvalidArgumentError("(0, 0) is the default pool, not a private pool");
  }
  Lock lock(&mu_);
  auto [it, inserted] = private_pools_.try_emplace(pool);
  if (inserted) {
    it->second = std::make_unique<PrivatePool>(pool);
    return absl::OkStatus();
  }
  if (it->second->use_count == 0) {  // PyTorch asserts use_count > 0 here
    return absl::FailedPreconditionError(
        absl::StrFormat("private pool %s was released by all its users and cannot be used again",
                        FormatPoolId(pool)));
  }
  ++it->second->use_count;
  return absl::OkStatus();
}

absl::Status CachingAllocator::BeginAllocateToPool(PoolId pool, StreamFilter filter) {
  FRAGSCOPE_RETURN_IF_ERROR(CreateOrIncrefPool(pool));
  Lock lock(&mu_);
  for (const auto& [id, unused] : captures_underway_) {
    if (id == pool) {
      return absl::FailedPreconditionError("beginAllocateToPool: already recording to mempool_id");
    }
  }
  captures_underway_.emplace_back(pool, std::move(filter));
  return absl::OkStatus();
}

absl::Status CachingAllocator::EndAllocateToPool(PoolId pool) {
  Lock lock(&mu_);
  for (auto it = captures_underway_.begin(); it != captures_underway_.end(); ++it) {
    if (it->first == pool) {
      captures_underway_.erase(it);
      return absl::OkStatus();
    }
  }
  return absl::FailedPreconditionError("endAllocatePool: not currently recording to mempool_id");
}

absl::Status CachingAllocator::ReleasePool(PoolId pool) {
  Lock lock(&mu_);
  PrivatePool* pp = FindPrivatePoolLocked(pool);
  if (pp == nullptr) return UnknownPool(pool);
  if (pp->use_count == 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("private pool %s is already released", FormatPoolId(pool)));
  }
  if (--pp->use_count == 0) pp->freeable = true;
  return absl::OkStatus();
}

absl::StatusOr<int> CachingAllocator::PoolUseCount(PoolId pool) const {
  Lock lock(&mu_);
  const PrivatePool* pp = FindPrivatePoolLocked(pool);
  if (pp == nullptr) return UnknownPool(pool);
  return pp->use_count;
}

absl::Status CachingAllocator::SetUseOnOom(PoolId pool, bool use_on_oom) {
  Lock lock(&mu_);
  if (FindPrivatePoolLocked(pool) == nullptr) return UnknownPool(pool);
  if (use_on_oom) {
    use_on_oom_pools_.insert(pool);
  } else {
    use_on_oom_pools_.erase(pool);
  }
  return absl::OkStatus();
}

absl::Status CachingAllocator::SetNoSplit(PoolId pool) {
  Lock lock(&mu_);
  PrivatePool* pp = FindPrivatePoolLocked(pool);
  if (pp == nullptr) return UnknownPool(pool);
  pp->no_split = true;
  return absl::OkStatus();
}

std::vector<PoolId> CachingAllocator::PrivatePoolIds() const {
  Lock lock(&mu_);
  std::vector<PoolId> ids;
  ids.reserve(private_pools_.size());
  for (const auto& [id, pp] : private_pools_) ids.push_back(id);
  return ids;
}

std::pair<PrivatePool*, BlockPool::iterator> CachingAllocator::MempoolFallbackLocked(
    PoolKind kind, StreamId stream, uint64_t rounded) {
  for (PoolId id : use_on_oom_pools_) {
    PrivatePool* pp = FindPrivatePoolLocked(id);
    if (pp == nullptr) continue;  // deleted after it was marked
    BlockPool& pool = pp->Of(kind);
    BlockPool::iterator found = FindFreeBlockLocked(pool, stream, rounded);
    if (!found.at_end()) return {pp, found};
  }
  return {nullptr, BlockPool::iterator()};
}

void CachingAllocator::ReleaseUnsplitBlocksLocked(BlockPool& pool) {
  std::vector<Block*> victims;
  pool.ForEach([&](Block* block) {
    if (!block->IsSplit() && !block->IsExpandable()) victims.push_back(block);
  });
  for (Block* block : victims) ReleaseBlockLocked(block);
}

void CachingAllocator::ReleaseFreeablePoolsLocked(PoolId only) {
  for (auto it = private_pools_.begin(); it != private_pools_.end();) {
    PrivatePool& pp = *it->second;
    if (!pp.freeable || (!only.is_default() && pp.id != only)) {
      ++it;
      continue;
    }
    // A private pool's small blocks go first (the default pool's large ones do).
    ReleaseUnsplitBlocksLocked(pp.small);
    ReleaseUnsplitBlocksLocked(pp.large);
    if (pp.segment_count == 0) {
      use_on_oom_pools_.erase(pp.id);
      it = private_pools_.erase(it);
    } else {
      ++it;
    }
  }
}

void CachingAllocator::InsertDeferredEventsLocked() {
  std::vector<Block*> deferred;
  deferred.swap(deferred_frees_);
  for (Block* block : deferred) {
    pending_free_bytes_ -= block->size;  // counted again below if it waits for events
    // Streams that used the block during the capture are done with it when the capture ends.
    if (auto captured = capture_stream_uses_.extract(block); !captured.empty()) {
      std::vector<StreamId>& uses = stream_uses_[block];
      std::erase_if(uses, [&](StreamId s) {
        return std::find(captured.mapped().begin(), captured.mapped().end(), s) !=
               captured.mapped().end();
      });
      if (uses.empty()) {
        stream_uses_.erase(block);
        block->used_on_other_streams = false;
        active_.Erase(block);
        FreeBlockLocked(block);
        continue;
      }
    }
    InsertEventsLocked(block);
  }
}

}  // namespace fragscope
