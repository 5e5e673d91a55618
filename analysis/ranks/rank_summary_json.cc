#include "analysis/ranks/rank_summary_json.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "analysis/ranks/json_fields.h"
#include "estimator/json_document.h"

namespace fragscope {

using ordered_json = nlohmann::ordered_json;

ordered_json RankSummaryToJson(const RankSummary& s) {
  ordered_json j;
  j["path"] = s.path;
  j["format"] = s.format;
  j["rank"] = s.rank;
  j["rank_source"] = std::string(RankSourceName(s.rank_source));
  j["local_rank"] = s.local_rank;
  j["world_size"] = s.world_size;
  j["pp_size"] = s.pp_size;
  j["tp_size"] = s.tp_size;
  j["host"] = s.host;
  j["device"] = s.device;
  j["device_name"] = s.device_name;
  j["pid"] = s.pid;
  j["start_wall_ns"] = s.start_wall_ns;
  j["capacity_bytes"] = s.capacity_bytes;
  j["capacity_source"] = s.capacity_source;
  j["events"] = s.events;
  j["allocations"] = s.allocations;
  j["frees"] = s.frees;
  j["peak_allocated_bytes"] = s.peak_allocated_bytes;
  j["peak_active_bytes"] = s.peak_active_bytes;
  j["peak_reserved_bytes"] = s.peak_reserved_bytes;
  j["utilization"] = s.utilization;
  j["outside_pytorch_bytes"] =
      s.outside_pytorch_bytes.has_value() ? ordered_json(*s.outside_pytorch_bytes) : ordered_json();
  j["outside_source"] = s.outside_source;
  j["oom_count"] = s.oom_count;
  ordered_json causes = ordered_json::object();
  for (const auto& [cause, count] : s.oom_causes) causes[cause] = count;
  j["oom_causes"] = std::move(causes);
  if (s.first_oom.has_value()) {
    const OomBrief& o = *s.first_oom;
    ordered_json oom;
    oom["event_index"] = o.event_index;
    oom["time_ns"] = o.time_ns;
    oom["wall_ns"] = o.wall_ns;
    oom["in_trace"] = o.in_trace;
    oom["cause"] = o.cause;
    oom["rule"] = o.rule;
    oom["phase"] = o.phase;
    oom["requested_bytes"] = o.requested_bytes;
    oom["headline"] = o.headline;
    oom["evidence"] = o.evidence;
    j["first_oom"] = std::move(oom);
  } else {
    j["first_oom"] = nullptr;
  }
  ordered_json phases = ordered_json::array();
  for (const PhaseRise& p : s.phases) {
    phases.push_back(ordered_json{{"phase", p.phase},
                                  {"reserved_rise_bytes", p.reserved_rise_bytes},
                                  {"allocated_rise_bytes", p.allocated_rise_bytes}});
  }
  j["phases"] = std::move(phases);
  j["warnings"] = s.warnings;
  j["warning_count"] = s.warning_count;
  j["replay_seconds"] = s.replay_seconds;
  return j;
}

std::string RankSummaryDocument(const RankSummary& summary) {
  ordered_json j;
  j["schema"] = kRankSummarySchema;
  j["schema_version"] = kRankSummarySchemaVersion;
  j.update(RankSummaryToJson(summary));
  // Invalid UTF-8 (a truncated host name) is replaced, not thrown on.
  return estimator::DumpJson(j);
}

namespace {

// The strings a summary holds are bounded like the summaries SummarizeTrace makes.
constexpr size_t kMaxEvidence = 64;

void ReadStrings(JsonFields& f, std::string_view key, size_t max, std::vector<std::string>* out) {
  const nlohmann::json* a = f.Array(key, max);
  if (a == nullptr) return;
  for (size_t i = 0; i < a->size(); ++i) {
    if (!(*a)[i].is_string()) {
      f.Fail(absl::StrFormat("%s[%d]", key, i),
             absl::StrFormat("expected a string, got %s", (*a)[i].type_name()));
      return;
    }
    out->push_back((*a)[i].get<std::string>());
  }
}

}  // namespace

absl::StatusOr<RankSummary> RankSummaryFromJson(const nlohmann::json& json,
                                                const std::string& name) {
  JsonFields f(json, name);
  RankSummary s;
  s.path = f.String("path");
  s.format = f.String("format");
  s.rank = f.Int32("rank");
  const std::string source = f.String("rank_source");
  if (f.status().ok()) {
    std::optional<RankSource> parsed = RankSourceFromName(source);
    if (!parsed.has_value()) {
      f.Fail("rank_source", absl::StrFormat("unknown value \"%s\" (expected \"log header\", "
                                            "\"file name\", \"order given\" or \"--rank\")",
                                            source));
    } else {
      s.rank_source = *parsed;
    }
  }
  s.local_rank = f.Int32("local_rank");
  s.world_size = f.Int32("world_size");
  s.pp_size = f.Int32("pp_size");
  s.tp_size = f.Int32("tp_size");
  s.host = f.String("host");
  s.device = f.Int32("device");
  s.device_name = f.String("device_name");
  s.pid = f.Int("pid");
  s.start_wall_ns = f.Int("start_wall_ns");
  s.capacity_bytes = f.Uint("capacity_bytes");
  s.capacity_source = f.String("capacity_source");
  s.events = f.Uint("events");
  s.allocations = f.Uint("allocations");
  s.frees = f.Uint("frees");
  s.peak_allocated_bytes = f.Uint("peak_allocated_bytes");
  s.peak_active_bytes = f.Uint("peak_active_bytes");
  s.peak_reserved_bytes = f.Uint("peak_reserved_bytes");
  s.utilization = f.Double("utilization");
  s.outside_pytorch_bytes = f.OptionalUint("outside_pytorch_bytes");
  s.outside_source = f.String("outside_source");
  s.oom_count = f.Uint("oom_count");
  if (const nlohmann::json* causes = f.Object("oom_causes")) {
    JsonFields c(*causes, name, f.KeyPath("oom_causes"));
    for (const auto& [cause, count] : causes->items()) {
      s.oom_causes.emplace_back(cause, c.Uint(cause));
    }
    f.Merge(c);
  }
  if (!f.IsNull("first_oom") && f.status().ok()) {
    if (const nlohmann::json* oom = f.Object("first_oom")) {
      JsonFields o(*oom, name, f.KeyPath("first_oom"));
      OomBrief b;
      b.event_index = o.Uint("event_index");
      b.time_ns = o.Uint("time_ns");
      b.wall_ns = o.Int("wall_ns");
      b.in_trace = o.Bool("in_trace");
      b.cause = o.String("cause");
      b.rule = o.String("rule");
      b.phase = o.String("phase");
      b.requested_bytes = o.Uint("requested_bytes");
      b.headline = o.String("headline");
      ReadStrings(o, "evidence", kMaxEvidence, &b.evidence);
      f.Merge(o);
      s.first_oom = std::move(b);
    }
  }
  if (const nlohmann::json* phases = f.Array("phases", PhasePeakCollector::kMaxPhases)) {
    for (size_t i = 0; i < phases->size(); ++i) {
      JsonFields p((*phases)[i], name, absl::StrFormat("%s[%d]", f.KeyPath("phases"), i));
      s.phases.push_back(PhaseRise{p.String("phase"), p.Uint("reserved_rise_bytes"),
                                   p.Uint("allocated_rise_bytes")});
      f.Merge(p);
    }
  }
  ReadStrings(f, "warnings", RankSummary::kMaxWarnings, &s.warnings);
  s.warning_count = f.Uint("warning_count");
  s.replay_seconds = f.Double("replay_seconds");
  if (!f.status().ok()) return f.status();
  return s;
}

absl::StatusOr<RankSummary> ParseRankSummaryDocument(std::string_view text,
                                                     const std::string& name) {
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    // Say where: nlohmann's own message needs exceptions; find the spot with a SAX pass.
    struct Where : nlohmann::json_sax<nlohmann::json> {
      size_t byte = 0;
      std::string token;
      bool null() override { return true; }
      bool boolean(bool) override { return true; }
      bool number_integer(number_integer_t) override { return true; }
      bool number_unsigned(number_unsigned_t) override { return true; }
      bool number_float(number_float_t, const string_t&) override { return true; }
      bool string(string_t&) override { return true; }
      bool binary(binary_t&) override { return true; }
      bool start_object(std::size_t) override { return true; }
      bool key(string_t&) override { return true; }
      bool end_object() override { return true; }
      bool start_array(std::size_t) override { return true; }
      bool end_array() override { return true; }
      bool parse_error(std::size_t position, const std::string& last,
                       const nlohmann::detail::exception&) override {
        byte = position;
        token = last;
        return false;
      }
    } where;
    nlohmann::json::sax_parse(text, &where, nlohmann::json::input_format_t::json, false);
    return absl::InvalidArgumentError(absl::StrFormat("%s: not JSON (byte %d, near '%s')", name,
                                                      where.byte, where.token.substr(0, 20)));
  }
  JsonFields f(json, name);
  const std::string schema = f.String("schema");
  if (f.status().ok() && schema != kRankSummarySchema) {
    f.Fail("schema",
           absl::StrFormat("\"%s\", not a rank summary (\"%s\")", schema, kRankSummarySchema));
  }
  const int64_t version = f.Int("schema_version");
  if (f.status().ok() && (version < 1 || version > kRankSummarySchemaVersion)) {
    f.Fail("schema_version",
           absl::StrFormat("%d: this fragscope reads rank summaries of version 1 to %d", version,
                           kRankSummarySchemaVersion));
  }
  if (!f.status().ok()) return f.status();
  return RankSummaryFromJson(json, name);
}

absl::StatusOr<RankSummary> ReadRankSummaryFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrFormat("%s: cannot open the file", path));
  }
  // Read in pieces up to the bound (the size a directory entry claims may not be the size read).
  std::string text;
  char piece[16384];
  while (in.read(piece, sizeof(piece)) || in.gcount() > 0) {
    text.append(piece, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxRankSummaryFileBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: larger than %d bytes: not a rank summary", path, kMaxRankSummaryFileBytes));
    }
  }
  if (in.bad()) return absl::DataLossError(absl::StrFormat("%s: cannot read the file", path));
  return ParseRankSummaryDocument(text, path);
}

}  // namespace fragscope
