// Byte and rate units used by the estimator. Every byte count the estimator returns is in bytes
// (double, because per-parameter costs such as 12/d or 0.516 B are fractional); reports print GiB.
// The public tools differ (docs/estimator_reference.md, "Notation and units"): Megatron prints MiB,
// DeepSpeed and accelerate print GiB labelled "GB", llm-analysis and the ZeRO paper decimal GB.
#pragma once

namespace fragscope::estimator {

inline constexpr double kKiB = 1024.0;
inline constexpr double kMiB = 1024.0 * kKiB;
inline constexpr double kGiB = 1024.0 * kMiB;
inline constexpr double kTiB = 1024.0 * kGiB;
inline constexpr double kKB = 1e3;
inline constexpr double kMB = 1e6;
inline constexpr double kGB = 1e9;
inline constexpr double kTB = 1e12;

}  // namespace fragscope::estimator
