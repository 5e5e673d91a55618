#include "hooks/torch_trace_observer.h"

#include <utility>

#include "allocator/memory_fraction.h"

namespace fragscope::torch_hooks {
namespace {

using c10::CachingDeviceAllocator::TraceEntry;
using hooks::kMaxDevices;

// Whether PyTorch checks its memory cap (set_per_process_memory_fraction) around this action:
// the device calls (cudaMalloc, cudaFree, map, unmap) and the OOM.
bool IsDeviceCallOrOom(TraceEntry::Action action) {
  switch (action) {
    case TraceEntry::SEGMENT_ALLOC:
    case TraceEntry::SEGMENT_FREE:
    case TraceEntry::SEGMENT_MAP:
    case TraceEntry::SEGMENT_UNMAP:
    case TraceEntry::OOM:
      return true;
    default:
      return false;
  }
}

}  // namespace

TraceObserver::TraceObserver(std::string pattern, FslogWriterOptions log_options,
                             std::optional<AllocatorOptions> options, FractionGetter fraction_of)
    : pattern_(std::move(pattern)),
      logs_(std::make_unique<hooks::DeviceLogs>(pattern_, log_options)),
      options_(std::move(options)),
      fraction_of_(fraction_of) {}

TraceObserver::~TraceObserver() = default;

void TraceObserver::AddDevice(int device, FslogHeaderInfo header, double fraction) {
  const auto index = static_cast<size_t>(device);
  // PyTorch traces the segment frees of an empty_cache (explicit, or torch.cuda.graph's on
  // entry), not the call: the replay infers it, as for a snapshot.
  header.records_empty_cache = false;
  fractions_[index] = 1.0;
  if (options_.has_value() && fraction >= 0.0 && fraction < 1.0) {
    fractions_[index] = fraction;
    header.allocator_options = ConfWithFraction(header.device_total_bytes, fraction);
  }
  converters_[index] = std::make_unique<hooks::NativeTraceConverter>(
      options_.value_or(AllocatorOptions{}), header.device_total_bytes);
  headers_[index] = std::move(header);
}

FslogWriter* TraceObserver::Log(int device) {
  return logs_->GetOrOpen(device, [&] { return headers_[static_cast<size_t>(device)]; });
}

std::string TraceObserver::ConfWithFraction(uint64_t total, double reported) const {
  AllocatorOptions with = *options_;
  with.per_process_memory_fraction =
      reported < 1.0 && total > 0
          ? FractionForAllowedBytes(AllowedBytesOfReportedFraction(reported, total), total)
          : 1.0;
  return FormatAllocatorOptions(with);
}

// Note [The memory fraction in observed logs]
// torch.cuda.set_per_process_memory_fraction caps PyTorch's reserved memory without showing in
// PYTORCH_CUDA_ALLOC_CONF, and a replay without the cap serves what the job could not (its OOM
// "not reproduced", its retry ladder a divergence). So the log records it as
// per_process_memory_fraction in the allocator options: in the header when set before
// observing, and as an options change when it differs at a device call or an OOM (the first
// moments it can matter; reading it is a plain load in PyTorch, safe under its lock). The replay
// applies it like any other option. Only when the job's own conf parsed: the log's options string
// is then the conf re-formatted with the fraction.
void TraceObserver::RecordFractionChange(int device) {
  if (!options_.has_value() || fraction_of_ == nullptr) return;
  const double fraction = fraction_of_(device);
  double& shown = fractions_[static_cast<size_t>(device)];
  if (fraction == shown || !(fraction >= 0.0 && fraction <= 1.0)) return;
  shown = fraction;
  if (FslogWriter* writer = Log(device))
    writer->RecordOptionsChange(
        ConfWithFraction(headers_[static_cast<size_t>(device)].device_total_bytes, fraction));
}

void TraceObserver::OnTrace(const TraceEntry& entry) noexcept {
  try {
    const int device = entry.device_;
    if (device < 0 || device >= kMaxDevices) return;
    hooks::NativeTraceConverter* converter = converters_[static_cast<size_t>(device)].get();
    if (converter == nullptr) return;
    if (IsDeviceCallOrOom(entry.action_)) [[unlikely]] {
      RecordFractionChange(device);
    }
    const hooks::NativeTraceEntry native{NativeActionOf(entry.action_), device, entry.addr_,
                                         entry.size_, reinterpret_cast<uint64_t>(entry.stream_)};
    AllocatorEvent event;
    if (!converter->Convert(native, &event)) return;
    // The block's, segment's or request's private pool (.fslog 2.4); (0, 0): the default.
    event.pool_id = PoolId{entry.mempool_.first, entry.mempool_.second};
    // The open log is one atomic load; opening (a std::function and a lock) only the first time.
    FslogWriter* writer = logs_->Get(device);
    if (writer == nullptr) [[unlikely]] {
      writer = Log(device);
    }
    if (writer != nullptr) writer->OnEvent(event);
  } catch (...) {
    // A lost record is better than an exception inside PyTorch's allocator.
  }
}

void TraceObserver::OnOutOfMemory(int64_t device) noexcept {
  try {
    if (FslogWriter* writer = logs_->Get(static_cast<int>(device))) writer->Flush().IgnoreError();
  } catch (...) {
  }
}

uint32_t TraceObserver::DefineContext(uint8_t role, std::string_view module, std::string_view op,
                                      std::string_view site, bool backward) {
  return logs_->DefineContextAll(role, module, op, site, backward);
}

}  // namespace fragscope::torch_hooks
