#include "analysis/json_verdict.h"

#include <algorithm>
#include <cmath>

namespace fragscope {
namespace {

// The estimator's figures are doubles; bytes are written whole.
uint64_t Bytes(double b) { return static_cast<uint64_t>(std::llround(std::max(0.0, b))); }

void WriteFootprint(JsonWriter& j, const FootprintCheck& f) {
  j.BeginObject();
  j.Field("model", f.model);
  j.Field("origin", f.origin);
  j.Key("assumptions");
  j.BeginArray();
  for (const Assumption& a : f.assumptions) {
    j.BeginObject();
    j.Field("name", a.name);
    j.Field("value", a.value);
    j.Field("basis", AssumptionBasisName(a.basis));
    j.EndObject();
  }
  j.EndArray();
  j.Field("theoretical_peak_bytes", Bytes(f.theoretical_peak_bytes));
  j.Field("limit_bytes", Bytes(f.limit_bytes));
  j.Field("exceeds_limit", f.exceeds);
  j.Key("largest_micro_batch");
  if (f.largest_micro_batch.has_value()) {
    j.Int(*f.largest_micro_batch);
  } else {
    j.Null();
  }
  j.Key("alternatives");
  j.BeginArray();
  for (const FitAlternative& a : f.alternatives) {
    j.BeginObject();
    j.Field("what", a.what);
    j.Field("peak_bytes", Bytes(a.peak_bytes));
    j.Field("fits", a.fits);
    j.Field("note", a.note);
    j.EndObject();
  }
  j.EndArray();
  j.EndObject();
}

}  // namespace

void WriteJsonVerdict(JsonWriter& j, const JobVerdict& v) {
  j.BeginObject();
  j.Key("cause");
  if (v.cause.has_value()) {
    j.String(OomCauseName(*v.cause));
  } else {
    j.Null();
  }
  j.Field("basis", VerdictBasisName(v.basis));
  j.Field("capacity_bound", v.capacity_bound);
  j.Key("headroom_bytes");
  if (v.headroom_bytes.has_value()) {
    j.Int(*v.headroom_bytes);
  } else {
    j.Null();
  }
  j.Field("headroom_share", v.headroom_share);
  j.Field("at_cap", v.at_cap);
  j.Key("theoretical_peak_bytes");
  if (v.footprint.has_value()) {
    j.Uint(Bytes(v.footprint->theoretical_peak_bytes));
  } else {
    j.Null();
  }
  j.Key("recommended");
  if (v.recommended.has_value()) {
    j.Uint(*v.recommended);
  } else {
    j.Null();
  }
  j.Field("why", v.capacity_bound ? v.why : v.recommendation);
  j.Key("model");
  if (v.footprint.has_value()) {
    WriteFootprint(j, *v.footprint);
  } else {
    j.Null();
  }
  j.EndObject();
}

}  // namespace fragscope
