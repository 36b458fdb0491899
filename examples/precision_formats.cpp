// precision_formats: the bit layout, range and precision of F32, F16 and BF16, and how any value
// rounds in each (round to nearest even, through halfgrad's own conversions: what a tensor of that
// dtype would hold).
//   precision_formats [VALUE...] [--csv FILE]
// VALUE is a decimal or hex float, inf, nan, or a power of two written 2^-24. Without values it decodes
// a few instructive ones. --csv FILE writes the decoded values (one row per value and format).
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "amp/inspect/formats.h"
#include "core/error.h"

using namespace hg;
namespace ins = hg::amp::inspect;

namespace {

struct Args {
  std::vector<double> values;
  std::vector<std::string> labels;  // as typed, for the headings
  std::string csv;
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
               "usage: precision_formats [VALUE...] [--csv FILE]\n"
               "  VALUE   a decimal or hex float, inf, nan, or a power of two as 2^-24\n"
               "          (default: 0.1 1e-5 1e-8 3.14159 65504 70000 1e-40)\n"
               "  --csv   write the decoded values to FILE as CSV\n");
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      std::exit(0);
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
  if (a.values.empty()) {
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
  std::printf("%-5s %4s  %-13s %4s  %-10s %-10s  %-22s %-22s  %-22s %s\n", "", "bits", "sign|exp|mant", "bias",
              "exponents", "max finite", "smallest normal", "smallest subnormal", "epsilon (1 + eps)", "digits");
  for (DType dt : ins::kInspectedFormats) {
    const ins::FormatInfo& f = ins::format_info(dt);
    const std::string layout = "1|" + std::to_string(f.exponent_bits) + "|" + std::to_string(f.mantissa_bits);
    const std::string range = std::to_string(f.min_exponent) + ".." + std::to_string(f.max_exponent);
    std::printf("%-5s %4d  %-13s %4d  %-10s %-10s  %-22s %-22s  %-22s %.2f (%d..%d)\n", f.name, f.total_bits,
                layout.c_str(), f.exponent_bias, range.c_str(), sci(f.max_finite, 4).c_str(),
                with_pow2(f.min_normal).c_str(), with_pow2(f.min_subnormal).c_str(), with_pow2(f.epsilon).c_str(),
                f.decimal_digits, f.digits10, f.max_digits10);
  }
  std::printf("\ndigits: significand bits x log10(2); in parentheses the decimal digits that always survive\n"
              "        decimal -> format -> decimal, and those needed to print every value of the format uniquely.\n"
              "F16 trades range for precision: max 65504, nothing below 2^-24 (loss scaling exists for this).\n"
              "BF16 keeps F32's range but only 8 significand bits: about 2.4 decimal digits instead of 7.2.\n");
}

// What happened to the value, in words.
std::string note(const ins::Decoded& d) {
  const bool finite_in = std::isfinite(d.input);
  if (std::isnan(d.input)) return "NaN stays NaN";
  if (d.value_class == ins::ValueClass::Inf && finite_in) return "overflow: above max finite";
  if (d.value_class == ins::ValueClass::Zero && d.input != 0) return "underflow: flushed to zero";
  std::string s = d.abs_error == 0 ? "exact" : "rounded";
  if (d.value_class == ins::ValueClass::Subnormal) {
    int bits = 0;
    for (uint32_t m = d.bits & ((1u << ins::format_info(d.dtype).mantissa_bits) - 1u); m; m >>= 1) ++bits;
    s += ", subnormal: " + std::to_string(bits) + (bits == 1 ? " significant bit" : " significant bits");
  }
  return s;
}

void print_decoded(const std::string& label, const std::array<ins::Decoded, 3>& ds) {
  std::printf("\n%s  (as a double: %s)\n", label.c_str(), shortest(ds[0].input).c_str());
  std::printf("  %-5s %-35s %-11s %-10s %5s  %-24s %-11s %-11s %s\n", "", "sign|exponent|mantissa", "hex", "class",
              "exp", "stored value", "abs error", "rel error", "spacing");
  for (const ins::Decoded& d : ds) {
    std::printf("  %-5s %-35s %-11s %-10s %5d  %-24s %-11s %-11s %-11s %s\n", dtype_name(d.dtype), d.bit_string.c_str(),
                ins::bits_hex(d.dtype, d.bits).c_str(), ins::value_class_name(d.value_class), d.exponent,
                shortest(d.value).c_str(), sci(d.abs_error, 3).c_str(), sci(d.rel_error, 3).c_str(),
                sci(d.spacing, 3).c_str(), note(d).c_str());
  }
}

void write_csv(const std::string& path, const Args& a) {
  FILE* f = std::fopen(path.c_str(), "w");
  HG_CHECK(f != nullptr, "precision_formats: cannot open '", path, "' for writing: ", std::strerror(errno),
           "; choose a writable path for --csv");
  std::fprintf(f, "input,format,value,bits,hex,class,exponent,abs_error,rel_error,spacing\n");
  for (size_t i = 0; i < a.values.size(); ++i) {
    for (const ins::Decoded& d : ins::decode(a.values[i])) {
      std::fprintf(f, "%s,%s,%s,%s,%s,%s,%d,%s,%s,%s\n", shortest(d.input).c_str(), dtype_name(d.dtype),
                   shortest(d.value).c_str(), d.bit_string.c_str(), ins::bits_hex(d.dtype, d.bits).c_str(),
                   ins::value_class_name(d.value_class), d.exponent, shortest(d.abs_error).c_str(),
                   shortest(d.rel_error).c_str(), shortest(d.spacing).c_str());
    }
  }
  const bool ok = std::fclose(f) == 0;
  HG_CHECK(ok, "precision_formats: writing '", path, "' failed; check the disk and the path");
  std::printf("\nwrote %zu rows to %s\n", a.values.size() * ins::kInspectedFormats.size(), path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse_args(argc, argv);
    print_formats();
    for (size_t i = 0; i < a.values.size(); ++i) print_decoded(a.labels[i], ins::decode(a.values[i]));
    if (!a.csv.empty()) write_csv(a.csv, a);
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
