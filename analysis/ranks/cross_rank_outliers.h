// Outlier ranks (Note [Outlier ranks] in cross_rank.h): the robust rule and the sentence that
// says what stands out, and in which phase it arose.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "analysis/ranks/cross_rank.h"

namespace fragscope {

// A set of ranks compared with each other: indices into the ranks, and what the set is called in
// sentences ("all ranks", "pipeline stage 1").
struct ComparedRanks {
  std::vector<size_t> members;
  std::string name;
};

// The median of `values` (the mean of the middle two for an even count; 0 for none).
double Median(std::vector<double> values);

// Every outlier of every set, by rank index then metric. Sets of fewer than kMinComparedRanks
// ranks name none. A group of ranks too large to be outliers is said in `notes`.
std::vector<RankOutlier> FindOutliers(const std::vector<RankSummary>& ranks,
                                      const std::vector<ComparedRanks>& sets,
                                      std::vector<std::string>* notes);

}  // namespace fragscope
