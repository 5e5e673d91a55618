#include "analysis/metrics/demand.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "allocator/allocator_options.h"
#include "allocator/format_size.h"
#include "allocator/size_policy.h"

namespace fragscope {

namespace {

// A request rounded as PyTorch's defaults round it; `size` where the request is not recorded.
uint64_t RoundedRequest(uint64_t requested, uint64_t size) {
  static const AllocatorOptions kDefaults;
  return requested > 0 ? RoundSize(requested, kDefaults) : size;
}

// Bytes by the module of their context, largest first: the first `most` modules, then
// "(N other modules)" and "(no module)" (what `total` holds beyond the named modules). Empty when
// no context names a module.
std::vector<DemandTerm> ModuleTerms(
    const absl::flat_hash_map<const BlockContext*, uint64_t>& by_context, uint64_t total,
    size_t most) {
  absl::flat_hash_map<std::string, uint64_t> by_module;
  uint64_t named = 0;
  for (const auto& [context, bytes] : by_context) {
    if (context->module.empty()) continue;
    by_module[context->module] += bytes;
    named += bytes;
  }
  if (by_module.empty()) return {};
  std::vector<DemandTerm> terms;
  for (auto& [module, bytes] : by_module) terms.push_back({module, bytes});
  std::sort(terms.begin(), terms.end(), [](const DemandTerm& a, const DemandTerm& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.name < b.name;
  });
  if (terms.size() > most) {
    uint64_t rest = 0;
    for (size_t i = most; i < terms.size(); ++i) rest += terms[i].bytes;
    const size_t others = terms.size() - most;
    terms.resize(most);
    terms.push_back({absl::StrCat("(", others, " other modules)"), rest});
  }
  if (total > named) terms.push_back({"(no module)", total - named});
  return terms;
}

}  // namespace

uint64_t DemandBytes(const TraceEvent& event) {
  return RoundedRequest(event.requested_bytes, event.bytes);
}

DemandCollector::DemandCollector(const TraceInfo& info) {
  for (const InitialSegment& segment : info.initial_segments) {
    for (const InitialBlock& block : segment.allocated) {
      const uint64_t bytes = RoundedRequest(block.requested_bytes, block.size);
      live_blocks_[block.address] = {.bytes = bytes};
      live_ += bytes;
      roles_[0] += bytes;
    }
  }
  summary_.peak.bytes = live_;
  summary_.peak.roles = roles_;
  phase_peak_ = live_;
  if (info.device_free_at_open_bytes.has_value() && info.capacity_bytes > 0) {
    const uint64_t held = *info.device_free_at_open_bytes + info.reserved_at_open_bytes;
    summary_.outside_bytes = info.capacity_bytes > held ? info.capacity_bytes - held : 0;
  }
}

void DemandCollector::Raise(uint64_t bytes, const Moment& at, bool refused,
                            uint64_t refused_bytes) {
  if (bytes <= summary_.peak.bytes) return;
  summary_.peak = {.bytes = bytes,
                   .event_index = at.index,
                   .time_ns = at.time_ns,
                   .phase = phase_,
                   .refused_request = refused,
                   .roles = roles_};
  summary_.peak.roles[0] += refused_bytes;
  at_peak_.Now();
}

absl::flat_hash_map<const BlockContext*, uint64_t> DemandCollector::ContextsAt::Of(
    const absl::flat_hash_map<const BlockContext*, uint64_t>& now) const {
  absl::flat_hash_map<const BlockContext*, uint64_t> then = now;
  for (const auto& [context, bytes] : saved) {
    if (bytes == 0) {
      then.erase(context);
    } else {
      then[context] = bytes;
    }
  }
  return then;
}

void DemandCollector::ChangeContext(const BlockContext* context, int64_t delta) {
  if (context == nullptr) return;
  auto it = by_context_.try_emplace(context, 0).first;
  at_peak_.saved.try_emplace(context, it->second);
  at_phase_peak_.saved.try_emplace(context, it->second);
  it->second += static_cast<uint64_t>(delta);  // unsigned wrap: a decrease
  if (it->second == 0) by_context_.erase(it);
}

void DemandCollector::EndPhase() {
  ended_phase_modules_ =
      ModuleTerms(at_phase_peak_.Of(by_context_), phase_peak_, kPhaseModulesKept);
  // The next phase starts with what this one left live.
  phase_peak_ = live_;
  at_phase_peak_.Now();
}

void DemandCollector::Drop(const LiveBlock& block) {
  live_ -= block.bytes;
  roles_[static_cast<size_t>(block.role)] -= block.bytes;
  ChangeContext(block.context, -static_cast<int64_t>(block.bytes));
}

void DemandCollector::ApplyTag(const TraceEvent& tag) {
  summary_.has_roles = true;
  auto it = live_blocks_.find(tag.ptr);
  if (it == live_blocks_.end()) return;  // no block there: passed over
  LiveBlock& block = it->second;
  roles_[static_cast<size_t>(block.role)] -= block.bytes;
  block.role = tag.role;
  if (tag.context != nullptr && tag.context != block.context) {
    // Tags while nothing was allocated or freed since a peak (the states an optimizer makes,
    // tagged once they are all made) belong to that peak, as its roles do.
    ChangeContext(block.context, -static_cast<int64_t>(block.bytes));
    block.context = tag.context;
    ChangeContext(block.context, static_cast<int64_t>(block.bytes));
    if (live_ == summary_.peak.bytes) at_peak_.Now();
    if (live_ == phase_peak_) at_phase_peak_.Now();
  }
  roles_[static_cast<size_t>(block.role)] += block.bytes;
}

void DemandCollector::OnTraceEvent(const TraceEvent& event) {
  // The tag that follows an alloc at once (Note [Tag records]) belongs to the alloc's moment: a
  // peak reached by the alloc is taken after it, with the block's role.
  if (pending_.has_value()) {
    const Moment at = *pending_;
    pending_.reset();
    if (event.kind == EventKind::kTag && event.ptr == at.ptr) {
      ApplyTag(event);
      Raise(live_, at, false);
      return;
    }
    Raise(live_, at, false);
  }
  switch (event.kind) {
    case EventKind::kAlloc: {
      const uint64_t bytes = DemandBytes(event);
      // Its context's role (.fslog 2.6), else unknown until a tag says.
      const LiveBlock block{
          .bytes = bytes,
          .role = event.context != nullptr ? event.context->role : AllocationRole::kUnknown,
          .context = event.context};
      summary_.has_roles |= block.role != AllocationRole::kUnknown;
      auto [it, inserted] = live_blocks_.try_emplace(event.ptr, block);
      if (!inserted) {  // an address allocated twice: the trace lost its free; the later counts
        Drop(it->second);
        it->second = block;
      }
      live_ += bytes;
      roles_[static_cast<size_t>(block.role)] += bytes;
      ChangeContext(block.context, static_cast<int64_t>(bytes));
      if (live_ > phase_peak_) {
        phase_peak_ = live_;
        at_phase_peak_.Now();
      }
      pending_ = Moment{.index = event.index, .time_ns = event.time_ns, .ptr = event.ptr};
      break;
    }
    case EventKind::kFreeRequested: {
      auto it = live_blocks_.find(event.ptr);
      if (it == live_blocks_.end()) break;  // a free of what the trace never allocated
      Drop(it->second);
      live_blocks_.erase(it);
      break;
    }
    case EventKind::kTag:
      ApplyTag(event);
      break;
    case EventKind::kOom: {
      ++summary_.refused_requests;
      const uint64_t request = DemandBytes(event);
      Raise(live_ + request, {.index = event.index, .time_ns = event.time_ns}, true, request);
      if (event.device_total_bytes > 0) {
        const uint64_t held = event.device_free_bytes + event.reserved_bytes;
        if (event.device_total_bytes > held) {
          summary_.outside_bytes =
              std::max(summary_.outside_bytes, event.device_total_bytes - held);
        }
      }
      break;
    }
    case EventKind::kMarker:
      phase_ = event.text;
      EndPhase();
      break;
    default:
      break;
  }
}

void DemandCollector::OnFinish() {
  if (pending_.has_value()) Raise(live_, *pending_, false);
  pending_.reset();
  summary_.peak.modules = ModuleTerms(at_peak_.Of(by_context_), summary_.peak.bytes, kModulesShown);
  EndPhase();
}

std::vector<DemandTerm> DemandCollector::LiveModules(size_t most) const {
  return ModuleTerms(by_context_, live_, most);
}

std::vector<DemandTerm> LargestFirst(std::vector<DemandTerm> terms) {
  std::stable_sort(terms.begin(), terms.end(),
                   [](const DemandTerm& a, const DemandTerm& b) { return a.bytes > b.bytes; });
  return terms;
}

std::vector<DemandTerm> RoleTerms(const RoleBytes& roles) {
  std::vector<DemandTerm> terms;
  for (int r = 0; r < kAllocationRoleCount; ++r) {
    if (roles[static_cast<size_t>(r)] == 0) continue;
    terms.push_back({.name = std::string(AllocationRoleName(static_cast<AllocationRole>(r))),
                     .bytes = roles[static_cast<size_t>(r)]});
  }
  return LargestFirst(std::move(terms));
}

std::string TermsText(const std::vector<DemandTerm>& terms, size_t most) {
  std::string text;
  for (size_t i = 0; i < terms.size() && i < most; ++i) {
    absl::StrAppend(&text, i == 0 ? "" : ", ", terms[i].name, " ", FormatSize(terms[i].bytes));
  }
  return text;
}

}  // namespace fragscope
