#include "analysis/report/json_verdict.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "analysis/report/json_report.h"

namespace fragscope {
namespace {

using estimator::JsonNumber;
using estimator::JsonOrNull;
using estimator::OrderedJson;

// The estimator's figures are doubles; bytes are written whole.
uint64_t Bytes(double b) { return static_cast<uint64_t>(std::llround(std::max(0.0, b))); }

OrderedJson Footprint(const FootprintCheck& f) {
  OrderedJson j;
  j["model"] = f.model;
  j["origin"] = f.origin;
  OrderedJson assumptions = OrderedJson::array();
  for (const Assumption& a : f.assumptions) {
    assumptions.push_back(
        {{"name", a.name}, {"value", a.value}, {"basis", AssumptionBasisName(a.basis)}});
  }
  j["assumptions"] = std::move(assumptions);
  j["theoretical_peak_bytes"] = Bytes(f.theoretical_peak_bytes);
  j["limit_bytes"] = Bytes(f.limit_bytes);
  j["exceeds_limit"] = f.exceeds;
  j["largest_micro_batch"] = JsonOrNull(f.largest_micro_batch);
  OrderedJson alternatives = OrderedJson::array();
  for (const FitAlternative& a : f.alternatives) {
    alternatives.push_back({{"what", a.what},
                            {"peak_bytes", Bytes(a.peak_bytes)},
                            {"fits", a.fits},
                            {"note", a.note}});
  }
  j["alternatives"] = std::move(alternatives);
  return j;
}

OrderedJson Demand(const DemandCheck& d) {
  OrderedJson j;
  j["peak_bytes"] = d.peak.bytes;
  j["event"] = d.peak.event_index;
  j["time_ns"] = d.peak.time_ns;
  j["phase"] = d.peak.phase;
  j["refused_request"] = d.peak.refused_request;
  j["limit_bytes"] = d.limit_bytes;
  j["outside_bytes"] = d.outside_bytes;
  j["factor"] = JsonNumber(d.factor, 6);
  j["exceeds_limit"] = d.exceeds;
  j["whole_job"] = d.whole_job;
  OrderedJson terms = OrderedJson::array();
  for (const DemandTerm& t : d.terms) terms.push_back({{"name", t.name}, {"bytes", t.bytes}});
  j["terms"] = std::move(terms);
  j["terms_source"] = d.terms_source;
  j["modules"] = ModuleBytesJson(d.peak.modules);
  return j;
}

}  // namespace

OrderedJson JsonVerdict(const JobVerdict& v) {
  OrderedJson j;
  j["cause"] = v.cause.has_value() ? OrderedJson(OomCauseName(*v.cause)) : OrderedJson(nullptr);
  j["basis"] = VerdictBasisName(v.basis);
  j["capacity_bound"] = v.capacity_bound;
  j["headroom_bytes"] = JsonOrNull(v.headroom_bytes);
  j["headroom_share"] = JsonNumber(v.headroom_share, 6);
  j["at_cap"] = v.at_cap;
  j["theoretical_peak_bytes"] = v.footprint.has_value()
                                    ? OrderedJson(Bytes(v.footprint->theoretical_peak_bytes))
                                    : OrderedJson(nullptr);
  j["recommended"] = JsonOrNull(v.recommended);
  j["why"] = v.capacity_bound ? v.why : v.recommendation;
  j["model"] = v.footprint.has_value() ? Footprint(*v.footprint) : OrderedJson(nullptr);
  j["demand"] = v.demand.has_value() ? Demand(*v.demand) : OrderedJson(nullptr);
  return j;
}

}  // namespace fragscope
