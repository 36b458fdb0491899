// precision_formats: the bit layout, range and precision of F32, F16 and BF16, of the FP8 formats E4M3
// and E5M2 and of the MX formats' E2M1 elements and E8M0 scales, and how any value rounds in each (round to
// nearest even, through halfgrad's own conversions: what a tensor of that dtype would hold; FP8 as .to()
// stores it, without saturation).
//   precision_formats [VALUE...] [--csv FILE] [--sum N X] [--dot K]
// VALUE is a decimal or hex float, inf, nan, or a power of two written 2^-24. Without values it decodes
// a few instructive ones. --csv FILE writes the decoded values (one row per value and format).
// The accumulation lesson (the paper's third idea, FP32 accumulation): --sum N X adds N addends, each
// X rounded to F16 (or, with X = uniform, N values drawn from U(0,1) and rounded to F16), in an F16, a
// BF16 and an F32 running sum, and shows where each stops growing; --dot K computes 1000 dot products
// of length K (inputs in [0,1) times weights of size 1/sqrt(K), all F16 as in an MLP's first layer)
// with an F16 and with an F32 accumulator. Either alone skips the format table and the default values.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "amp/inspect/formats.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/fp8.h"
#include "core/half.h"

using namespace hg;
namespace ins = hg::amp::inspect;

namespace {

struct Args {
  std::vector<double> values;
  std::vector<std::string> labels;  // as typed, for the headings
  std::string csv;
  int64_t sum_n = 0;  // --sum N X
  std::string sum_x;
  int64_t dot_k = 0;  // --dot K
};

// The shortest decimal that reads back as exactly this double; the value a format holds is a double
// exactly, so this prints it without inventing or hiding digits.
std::string shortest(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string sci(double v, int digits = 4) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*e", digits, v);
  return buf;
}

// v as 2^k when it is a power of two, for the range columns.
std::string with_pow2(double v) {
  int e = 0;
  const double m = std::frexp(v, &e);
  std::string s = sci(v);
  if (m == 0.5) s += " (2^" + std::to_string(e - 1) + ")";
  return s;
}

bool parse_value(const char* s, double& out) {
  if (const char* caret = std::strstr(s, "2^")) {  // [-]2^K
    const bool neg = s[0] == '-';
    if (caret != s + (neg ? 1 : 0)) return false;
    char* end = nullptr;
    const long k = std::strtol(caret + 2, &end, 10);
    if (end == caret + 2 || *end != '\0') return false;
    out = std::ldexp(neg ? -1.0 : 1.0, static_cast<int>(k));
    return true;
  }
  char* end = nullptr;
  out = std::strtod(s, &end);
  return end != s && *end == '\0';
}

void usage(FILE* to) {
  std::fprintf(to,
               "usage: precision_formats [VALUE...] [--csv FILE] [--sum N X] [--dot K]\n"
               "  VALUE   a decimal or hex float, inf, nan, or a power of two as 2^-24\n"
               "          (default: 0.1 1e-5 1e-8 3.14159 65504 70000 1e-40)\n"
               "  --csv   write the decoded values to FILE as CSV\n"
               "  --sum N X  add N copies of X (rounded to F16), or N draws from U(0,1) with X = uniform, in\n"
               "          F16, BF16 and F32 running sums, against the exact sum\n"
               "  --dot K    1000 dot products of length K with an F16 and with an F32 accumulator\n");
}

int64_t parse_count(const char* flag, const char* s) {
  char* end = nullptr;
  const long long n = std::strtoll(s, &end, 10);
  HG_CHECK(end != s && *end == '\0' && n >= 1 && n <= 100000000, "precision_formats: ", flag, " needs a count in ",
           "[1, 1e8]; got '", s, "'");
  return n;
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      std::exit(0);
    }
    if (arg == "--sum") {
      HG_CHECK(i + 2 < argc, "precision_formats: --sum needs a count and an addend; pass --sum 4096 0.1 or --sum "
               "10000 uniform");
      a.sum_n = parse_count("--sum", argv[++i]);
      a.sum_x = argv[++i];
      double unused = 0;
      HG_CHECK(a.sum_x == "uniform" || parse_value(a.sum_x.c_str(), unused), "precision_formats: --sum's addend '",
               a.sum_x, "' is neither a number nor 'uniform'; pass e.g. --sum 4096 0.1");
      continue;
    }
    if (arg == "--dot") {
      HG_CHECK(i + 1 < argc, "precision_formats: --dot needs a length; pass --dot 784");
      a.dot_k = parse_count("--dot", argv[++i]);
      continue;
    }
    if (arg == "--csv") {
      HG_CHECK(i + 1 < argc, "precision_formats: --csv needs a file name; pass --csv FILE");
      a.csv = argv[++i];
      continue;
    }
    double v = 0;
    HG_CHECK(parse_value(argv[i], v), "precision_formats: cannot read '", arg,
             "' as a number; give a decimal (0.1, 1e-8), inf, nan or a power of two (2^-24), or see --help");
    a.values.push_back(v);
    a.labels.push_back(arg);
  }
  HG_CHECK(a.csv.empty() || !a.values.empty() || (a.sum_n == 0 && a.dot_k == 0),
           "precision_formats: --csv writes the decoded VALUEs, and --sum/--dot alone decode none; add the values");
  if (a.values.empty() && a.sum_n == 0 && a.dot_k == 0) {
    for (const char* s : {"0.1", "1e-5", "1e-8", "3.14159", "65504", "70000", "1e-40"}) {
      a.values.push_back(std::strtod(s, nullptr));
      a.labels.push_back(s);
    }
  }
  return a;
}

void print_formats() {
  std::printf("Formats: value = (-1)^sign x 1.mantissa x 2^(exponent - bias); "
              "subnormals (exponent bits 0) 0.mantissa x 2^(1 - bias)\n\n");
  std::printf("%-6s %4s  %-13s %4s  %-10s %-10s  %-22s %-22s  %-22s %s\n", "", "bits", "sign|exp|mant", "bias",
              "exponents", "max finite", "smallest normal", "smallest subnormal", "epsilon (1 + eps)", "digits");
  std::vector<DType> formats(ins::kInspectedFormats.begin(), ins::kInspectedFormats.end());
  formats.insert(formats.end(), ins::kFp8Formats.begin(), ins::kFp8Formats.end());
  for (DType dt : formats) {
    const ins::FormatInfo& f = ins::format_info(dt);
    const std::string layout = "1|" + std::to_string(f.exponent_bits) + "|" + std::to_string(f.mantissa_bits);
    const std::string range = std::to_string(f.min_exponent) + ".." + std::to_string(f.max_exponent);
    std::printf("%-6s %4d  %-13s %4d  %-10s %-10s  %-22s %-22s  %-22s %.2f (%d..%d)\n", f.name, f.total_bits,
                layout.c_str(), f.exponent_bias, range.c_str(), sci(f.max_finite, 4).c_str(),
                with_pow2(f.min_normal).c_str(), with_pow2(f.min_subnormal).c_str(), with_pow2(f.epsilon).c_str(),
                f.decimal_digits, f.digits10, f.max_digits10);
  }
  std::printf("\ndigits: significand bits x log10(2); in parentheses the decimal digits that always survive\n"
              "        decimal -> format -> decimal, and those needed to print every value of the format uniquely.\n"
              "F16 trades range for precision: max 65504, nothing below 2^-24 but what rounds up to it (loss scaling\n"
              "  exists for this). BF16 keeps F32's normal range but only 8 significand bits: about 2.4 decimal digits\n"
              "  instead of 7.2.\n"
              "F8E4M3 (\"fn\": finite only) uses its top exponent for numbers up to %g, keeping only s.1111.111 for NaN;\n"
              "  it has no inf, so a non-saturating cast past %g gives NaN. F8E5M2 is F16's upper byte (max %g, inf, NaN).\n"
              "  FP8 training keeps a scale per tensor (or per block) so values land in these 5 to 6 binades of range.\n"
              "MX block formats (OCP Microscaling): E2M1 elements (MXFP4: 0, 0.5, 1, 1.5, 2, 3, 4, %g, no inf or NaN) and\n"
              "  E8M0 scales (2^-127 .. 2^127, powers of two only, 0xff = NaN), one scale per 32 elements.\n",
              kF8E4M3Max, kF8E4M3Max + 16.0 /* halfway to the next step, 480 */, kF8E5M2Max, e2m1_bits_to_float(0x7));
}

// What happened to the value, in words.
std::string note(const ins::Decoded& d) {
  const bool finite_in = std::isfinite(d.input);
  if (std::isnan(d.input)) return "NaN stays NaN";
  if (d.value_class == ins::ValueClass::Inf && finite_in) return "overflow: above max finite";
  if (d.value_class == ins::ValueClass::NaN && finite_in) return "overflow: NaN (no inf in this format)";
  if (d.value_class == ins::ValueClass::NaN && !std::isnan(d.input)) return "inf becomes NaN (no inf in this format)";
  if (d.value_class == ins::ValueClass::Zero && d.input != 0) return "underflow: flushed to zero";
  std::string s = d.abs_error == 0 ? "exact" : "rounded";
  if (d.value_class == ins::ValueClass::Subnormal) {
    int bits = 0;
    for (uint32_t m = d.bits & ((1u << ins::format_info(d.dtype).mantissa_bits) - 1u); m; m >>= 1) ++bits;
    s += ", subnormal: " + std::to_string(bits) + (bits == 1 ? " significant bit" : " significant bits");
  }
  return s;
}

// `value` in every format shown: the AMP formats, then FP8.
std::vector<ins::Decoded> decode_all(double value) {
  std::vector<ins::Decoded> ds;
  for (const ins::Decoded& d : ins::decode(value)) ds.push_back(d);
  for (DType dt : ins::kFp8Formats) ds.push_back(ins::decode(value, dt));
  return ds;
}

void print_decoded(const std::string& label, const std::vector<ins::Decoded>& ds) {
  std::printf("\n%s  (as a double: %s)\n", label.c_str(), shortest(ds[0].input).c_str());
  std::printf("  %-6s %-35s %-11s %-10s %5s  %-24s %-11s %-11s %s\n", "", "sign|exponent|mantissa", "hex", "class",
              "exp", "stored value", "abs error", "rel error", "spacing");
  for (const ins::Decoded& d : ds) {
    std::printf("  %-6s %-35s %-11s %-10s %5d  %-24s %-11s %-11s %-11s %s\n", dtype_name(d.dtype), d.bit_string.c_str(),
                ins::bits_hex(d.dtype, d.bits).c_str(), ins::value_class_name(d.value_class), d.exponent,
                shortest(d.value).c_str(), sci(d.abs_error, 3).c_str(), sci(d.rel_error, 3).c_str(),
                sci(d.spacing, 3).c_str(), note(d).c_str());
  }
}

// Written atomically (core/atomic_file.h): a failed write leaves an existing FILE as it was.
void write_csv(const std::string& path, const Args& a) {
  std::ostringstream os;
  os << "input,format,value,bits,hex,class,exponent,abs_error,rel_error,spacing\n";
  for (size_t i = 0; i < a.values.size(); ++i) {
    for (const ins::Decoded& d : decode_all(a.values[i])) {
      os << shortest(d.input) << ',' << dtype_name(d.dtype) << ',' << shortest(d.value) << ',' << d.bit_string << ','
         << ins::bits_hex(d.dtype, d.bits) << ',' << ins::value_class_name(d.value_class) << ',' << d.exponent << ','
         << shortest(d.abs_error) << ',' << shortest(d.rel_error) << ',' << shortest(d.spacing) << '\n';
    }
  }
  hg::write_file_atomic("precision_formats", path, os.str());
  std::printf("\nwrote %zu rows to %s\n", a.values.size() * decode_all(0.0).size(), path.c_str());
}


// ---- FP32 accumulation ------------------------------------------------------------------------

// A running sum kept in format T (float: F32): every partial sum is rounded to T. last_change: the last
// step that changed the sum; after it every addend was lost.
template <class T>
struct Accumulator {
  float sum = 0;
  int64_t last_change = -1;
  void add(float x, int64_t step) {
    float next;
    if constexpr (std::is_same_v<T, float>) next = sum + x;
    else next = to_float(from_float<T>(sum + x));
    if (next != sum) last_change = step;
    sum = next;
  }
};

// U[0,1) from the top 53 bits of a fixed generator: the same draws on every machine.
struct Uniform {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  double next() {  // splitmix64
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1p-53;
  }
};

float f16_round(double v) { return to_float(from_float<f16>(static_cast<float>(v))); }

template <class T>
void print_accumulator(const char* name, const Accumulator<T>& acc, double exact, int64_t n) {
  char stop[96] = "still growing at the end";
  if (acc.last_change < n - 1)
    std::snprintf(stop, sizeof stop, "after step %lld of %lld", static_cast<long long>(acc.last_change + 1),
                  static_cast<long long>(n));
  std::printf("  %-6s %18s %12.3e   %s\n", name, shortest(acc.sum).c_str(), std::fabs(acc.sum - exact) / exact, stop);
}

void run_sum(const Args& a) {
  const bool uniform = a.sum_x == "uniform";
  double x = 0;
  if (!uniform) parse_value(a.sum_x.c_str(), x);
  std::printf("== running sums of %lld addends: %s, each rounded to F16 ==\n", static_cast<long long>(a.sum_n),
              uniform ? "draws from U(0,1)" : ("fl16(" + a.sum_x + ") = " + shortest(f16_round(x))).c_str());
  Accumulator<f16> h;
  Accumulator<bf16> b;
  Accumulator<float> f;
  double exact = 0;
  Uniform u;
  for (int64_t i = 0; i < a.sum_n; ++i) {
    const float v = f16_round(uniform ? u.next() : x);
    exact += v;
    h.add(v, i);
    b.add(v, i);
    f.add(v, i);
  }
  std::printf("  exact sum %s\n", shortest(exact).c_str());
  std::printf("  %-6s %18s %12s   %s\n", "sum in", "final", "rel error", "stopped growing");
  print_accumulator("F16", h, exact, a.sum_n);
  print_accumulator("BF16", b, exact, a.sum_n);
  print_accumulator("F32", f, exact, a.sum_n);
  std::printf("An addend is lost when it is below half the spacing of the sum: for a format with p significand\n"
              "bits, once |sum| is 2^p to 2^(p+1) times |addend|, depending on where the sum sits in its binade\n"
              "(F16 2048-4096, BF16 256-512, F32 2^24-2^25), the same rule as a weight swamping its update. An\n"
              "addend just above that limit is rounded up to the spacing instead: the sum then grows faster than\n"
              "it should before it stops.\n");
}

void run_dot(const Args& a) {
  const int64_t k = a.dot_k, rows = 1000;
  std::printf("\n== %lld dot products of length %lld: x in [0,1), w in (-1,1)/sqrt(K), all F16; products exact in F32 ==\n",
              static_cast<long long>(rows), static_cast<long long>(k));
  Uniform u;
  double worst16 = 0, worst32 = 0, mean16 = 0, mean32 = 0;
  const double scale = 1.0 / std::sqrt(static_cast<double>(k));
  for (int64_t r = 0; r < rows; ++r) {
    float acc16 = 0, acc32 = 0;
    double exact = 0, l1 = 0;
    for (int64_t i = 0; i < k; ++i) {
      const float xi = f16_round(u.next()), wi = f16_round((2 * u.next() - 1) * scale);
      const float p = xi * wi;  // exact: 11 + 11 significand bits fit in F32's 24
      exact += static_cast<double>(p);
      l1 += std::fabs(static_cast<double>(p));
      acc16 = to_float(from_float<f16>(acc16 + p));
      acc32 += p;
    }
    const double e16 = std::fabs(acc16 - exact) / l1, e32 = std::fabs(acc32 - exact) / l1;
    worst16 = std::max(worst16, e16), worst32 = std::max(worst32, e32);
    mean16 += e16 / rows, mean32 += e32 / rows;
  }
  std::printf("  %-12s %14s %14s\n", "accumulator", "mean error", "worst error");
  std::printf("  %-12s %14.3e %14.3e\n", "F16", mean16, worst16);
  std::printf("  %-12s %14.3e %14.3e\n", "F32", mean32, worst32);
  std::printf("(error: |sum - exact| / sum of |x_i w_i|, the scale of the terms added.) The F32 accumulator's\n"
              "error is %.0fx smaller: what Tensor Cores and halfgrad's GEMMs do with F16 inputs.\n",
              mean32 > 0 ? mean16 / mean32 : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse_args(argc, argv);
    if (!a.values.empty()) {
      print_formats();
      for (size_t i = 0; i < a.values.size(); ++i) print_decoded(a.labels[i], decode_all(a.values[i]));
      if (!a.csv.empty()) write_csv(a.csv, a);
    }
    if (a.sum_n > 0) run_sum(a);
    if (a.dot_k > 0) run_dot(a);
  } catch (const hg::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    usage(stderr);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "precision_formats: error: %s\n", e.what());
    return 1;
  } catch (...) {
    std::fprintf(stderr, "precision_formats: error: an unknown exception\n");
    return 1;
  }
  return 0;
}
