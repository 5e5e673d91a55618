// Writes the synthetic many-rank job of bench/RESULTS.md ("Many ranks"): one .fslog per rank
// (analysis/ranks/synthetic_rank_job.h), with an outlier rank that holds more optimizer state and
// one that has more memory outside the allocator, for `fragscope analyze DIR`, `summarize` and
// `merge` at scale.
//
//   rank_logs_generator DIR --ranks N --events M [--threads T] [--pp P] [--tp T]
//                       [--outlier-rank R] [--outlier-gib G] [--outside-rank R] [--outside-gib G]
//
// Files: DIR/rank{r}.fslog, about 80 bytes per event (100 k events: 7-8 MB). Deterministic.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "analysis/ranks/synthetic_rank_job.h"

namespace {

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "rank_logs_generator: %s\nusage: rank_logs_generator DIR --ranks N --events M "
               "[--threads T] [--pp P] [--tp T] [--outlier-rank R] [--outlier-gib G] "
               "[--outside-rank R] [--outside-gib G]\n",
               why.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage("no directory given");
  const std::string dir = argv[1];
  int64_t ranks = 0, events = 0, threads = 2, pp = 0, tp = 0;
  int64_t outlier_rank = -1, outside_rank = -1;
  double outlier_gib = 4, outside_gib = 6;
  for (int i = 2; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return Usage(flag + " needs a value");
    const char* value = argv[i + 1];
    bool ok = true;
    if (flag == "--ranks")
      ok = absl::SimpleAtoi(value, &ranks);
    else if (flag == "--events")
      ok = absl::SimpleAtoi(value, &events);
    else if (flag == "--threads")
      ok = absl::SimpleAtoi(value, &threads);
    else if (flag == "--pp")
      ok = absl::SimpleAtoi(value, &pp);
    else if (flag == "--tp")
      ok = absl::SimpleAtoi(value, &tp);
    else if (flag == "--outlier-rank")
      ok = absl::SimpleAtoi(value, &outlier_rank);
    else if (flag == "--outlier-gib")
      ok = absl::SimpleAtod(value, &outlier_gib);
    else if (flag == "--outside-rank")
      ok = absl::SimpleAtoi(value, &outside_rank);
    else if (flag == "--outside-gib")
      ok = absl::SimpleAtod(value, &outside_gib);
    else
      return Usage("unknown flag " + flag);
    if (!ok) return Usage(absl::StrFormat("bad value for %s: %s", flag, value));
  }
  if (ranks <= 0 || events <= 0 || threads <= 0) {
    return Usage("--ranks, --events and --threads must be positive");
  }
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  const auto work = [&] {
    for (int64_t r = next++; r < ranks && !failed; r = next++) {
      fragscope::SyntheticRankSpec spec;
      spec.rank = static_cast<int32_t>(r);
      spec.world_size = static_cast<int32_t>(ranks);
      spec.local_rank = static_cast<int32_t>(r % 8);
      spec.pp_size = static_cast<int32_t>(pp);
      spec.tp_size = static_cast<int32_t>(tp);
      spec.host = absl::StrFormat("node-%d", r / 8);
      spec.events = static_cast<uint64_t>(events);
      if (r == outlier_rank) {
        spec.extra_optimizer_bytes = static_cast<uint64_t>(outlier_gib * fragscope::kGiB);
      }
      if (r == outside_rank) {
        spec.outside_bytes = static_cast<uint64_t>(outside_gib * fragscope::kGiB);
      }
      const std::string path = absl::StrFormat("%s/rank%d.fslog", dir, r);
      absl::StatusOr<uint64_t> written = fragscope::WriteSyntheticRankLog(path, spec);
      if (!written.ok()) {
        std::fprintf(stderr, "rank_logs_generator: %s\n",
                     std::string(written.status().message()).c_str());
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return failed ? 1 : 0;
}
