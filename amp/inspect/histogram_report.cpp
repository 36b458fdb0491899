// GradientHistogram's CSV and JSON reports (the layout is described in amp/inspect/histogram.h).
#include <algorithm>
#include <cmath>
#include <sstream>

#include "amp/inspect/histogram.h"
#include "amp/inspect/text_file.h"
#include "core/atomic_file.h"

namespace hg::amp::inspect {

namespace {

void csv_row(std::ostringstream& os, const std::string& prefix, const std::string& bin, const std::string& lower,
             const std::string& upper, int64_t count) {
  os << prefix << bin << ',' << lower << ',' << upper << ',' << count << '\n';
}

void csv_entry(std::ostringstream& os, const std::string& name, Kind kind, const LayerStats& s) {
  const std::string prefix = csv_field(name) + ',' + kind_name(kind) + ',';
  csv_row(os, prefix, "zero", "0", "0", s.zeros);
  csv_row(os, prefix, "below_range", "0", json_number(std::ldexp(1.0, kMinExponent)), s.below_range);
  for (int e = kMinExponent; e <= kMaxExponent; ++e)
    csv_row(os, prefix, std::to_string(e), json_number(std::ldexp(1.0, e)), json_number(std::ldexp(1.0, e + 1)),
            s.bin(e));
  csv_row(os, prefix, "above_range", json_number(std::ldexp(1.0, kMaxExponent + 1)), "", s.above_range);
  csv_row(os, prefix, "inf", "", "", s.infs);
  csv_row(os, prefix, "nan", "", "", s.nans);
  if (kind != Kind::Update || s.ulp_bins.empty()) return;
  const std::string ulp = csv_field(name) + ",update_ulp16,";
  for (int e = kMinExponent; e <= kMaxExponent; ++e)
    csv_row(os, ulp, std::to_string(e), json_number(std::ldexp(1.0, e)), json_number(std::ldexp(1.0, e + 1)),
            s.ulp_bin(e));
}

// "key": value pairs joined by commas.
class JsonObject {
 public:
  JsonObject& add(const std::string& key, const std::string& raw_value) {
    text_ += (text_.empty() ? "" : ", ") + json_string(key) + ": " + raw_value;
    return *this;
  }
  JsonObject& num(const std::string& key, double v) { return add(key, json_number(v)); }
  JsonObject& count(const std::string& key, int64_t v) { return add(key, std::to_string(v)); }
  std::string str() const { return "{" + text_ + "}"; }

 private:
  std::string text_;
};

std::string marker(double v) { return JsonObject().num("value", v).num("log2", std::log2(v)).str(); }

std::string markers_json() {
  return JsonObject()
      .add("f16_min_subnormal", marker(kF16MinSubnormal))
      .add("f16_min_normal", marker(kF16MinNormal))
      .add("f16_max", marker(kF16Max))
      .add("f16_flush_max", marker(kF16FlushMax))
      .add("f16_overflow_min", marker(kF16OverflowMin))
      .add("bf16_min_subnormal", marker(kBF16MinSubnormal))
      .add("bf16_min_normal", marker(kBF16MinNormal))
      .add("bf16_max", marker(kBF16Max))
      .add("bf16_flush_max", marker(kBF16FlushMax))
      .add("bf16_overflow_min", marker(kBF16OverflowMin))
      .add("e4m3_min_subnormal", marker(kE4M3MinSubnormal))
      .add("e4m3_min_normal", marker(kE4M3MinNormal))
      .add("e4m3_max", marker(kE4M3Max))
      .add("e5m2_min_subnormal", marker(kE5M2MinSubnormal))
      .add("e5m2_min_normal", marker(kE5M2MinNormal))
      .add("e5m2_max", marker(kE5M2Max))
      .str();
}

std::string format_json(const LayerStats& s, const FormatCounts& c) {
  return JsonObject()
      .count("flush", c.flush)
      .num("flush_fraction", s.fraction(c.flush))
      .count("below_min_subnormal", c.below_min_subnormal)
      .num("below_min_subnormal_fraction", s.fraction(c.below_min_subnormal))
      .count("subnormal", c.subnormal)
      .num("subnormal_fraction", s.fraction(c.subnormal))
      .count("overflow", c.overflow)
      .num("overflow_fraction", s.fraction(c.overflow))
      .str();
}

// The smallest and largest occupied exponent bins, or null.
std::pair<std::string, std::string> exponent_span(const LayerStats& s) {
  int lo = kMaxExponent + 1, hi = kMinExponent - 1;
  for (int e = kMinExponent; e <= kMaxExponent; ++e) {
    if (s.bin(e) == 0) continue;
    lo = std::min(lo, e);
    hi = std::max(hi, e);
  }
  if (lo > hi) return {"null", "null"};
  return {std::to_string(lo), std::to_string(hi)};
}

// {"e": count} over the occupied bins of |u| / ulp16(w).
std::string ulp_bins_json(const LayerStats& s) {
  JsonObject o;
  for (int e = kMinExponent; e <= kMaxExponent; ++e)
    if (s.ulp_bin(e) > 0) o.count(std::to_string(e), s.ulp_bin(e));
  return o.str();
}

std::string entry_json(const std::string& name, Kind kind, const LayerStats& s) {
  const auto [lo, hi] = exponent_span(s);
  JsonObject o;
  o.add("layer", json_string(name)).add("kind", json_string(kind_name(kind))).num("loss_scale", s.loss_scale);
  o.count("count", s.count).count("zeros", s.zeros).count("nonzero", s.nonzero()).count("infs", s.infs);
  o.count("nans", s.nans).count("below_range", s.below_range).count("above_range", s.above_range);
  o.add("min_exponent", lo).add("max_exponent", hi);
  o.add("f16", format_json(s, s.f16)).add("bf16", format_json(s, s.bf16));
  o.add("e4m3", format_json(s, s.e4m3)).add("e5m2", format_json(s, s.e5m2));
  if (kind == Kind::Update) {
    o.add("swamping", JsonObject()
                          .count("updates", s.updates)
                          .count("f16_swamped", s.f16_swamped)
                          .num("f16_swamped_fraction", s.swamped_fraction(s.f16_swamped))
                          .count("f16_swamped_rule_of_thumb", s.f16_swamped_rule)
                          .num("f16_swamped_rule_of_thumb_fraction", s.swamped_fraction(s.f16_swamped_rule))
                          .add("ulp16_ratio_bins", ulp_bins_json(s))
                          .str());
  }
  return o.str();
}

}  // namespace

void GradientHistogram::write_csv(const std::string& path) const {
  std::ostringstream os;
  os << "layer,kind,bin,lower,upper,count\n";
  for (const auto& [name, kind] : keys()) csv_entry(os, name, kind, at(name, kind));
  write_file_atomic("GradientHistogram::write_csv", path, os.str());
}

void GradientHistogram::write_json(const std::string& path) const {
  std::string entries;
  for (const auto& [name, kind] : keys())
    entries += std::string(entries.empty() ? "\n    " : ",\n    ") + entry_json(name, kind, at(name, kind));
  const std::string bins = JsonObject().count("min_exponent", kMinExponent).count("max_exponent", kMaxExponent).str();
  std::string text = "{\n  \"format\": \"halfgrad.gradient_histogram\",\n  \"version\": 1,\n";
  text += "  \"bins\": " + bins + ",\n  \"markers\": " + markers_json() + ",\n";
  text += "  \"entries\": [" + entries + (entries.empty() ? "]\n}\n" : "\n  ]\n}\n");
  write_file_atomic("GradientHistogram::write_json", path, text);
}

}  // namespace hg::amp::inspect
