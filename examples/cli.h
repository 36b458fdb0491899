#pragma once
// The examples' and benchmarks' command lines, parsed strictly: a value is the whole string (no
// leading space, no trailing "abc"), a whole number fits the flag's type and has no sign where the
// type has none, a real number is finite, and each flag's range is checked. A bad value throws
// std::invalid_argument with the reason; parse_flags turns it into the usage message and exit status
// 2. guarded_main turns any exception out of a program's body into one line and exit status 1.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>

namespace example {

namespace detail {
template <class T>
std::string type_name() {
  if constexpr (std::is_floating_point_v<T>) return "a real number";
  else if constexpr (std::is_unsigned_v<T>) return "an unsigned " + std::to_string(8 * sizeof(T)) + "-bit number";
  else return "a " + std::to_string(8 * sizeof(T)) + "-bit integer";
}
template <class T>
std::string text(T v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
}  // namespace detail

// v as a T in [lo, hi]; throws std::invalid_argument saying what is wrong.
template <class T>
T parse_number(const std::string& v, T lo = std::numeric_limits<T>::lowest(), T hi = std::numeric_limits<T>::max()) {
  const char *first = v.data(), *last = v.data() + v.size();
  T x{};
  std::from_chars_result r{};
  if constexpr (std::is_floating_point_v<T>) r = std::from_chars(first, last, x, std::chars_format::general);
  else r = std::from_chars(first, last, x, 10);
  if (v.empty() || (v[0] == '-' && std::is_unsigned_v<T>))
    throw std::invalid_argument(std::is_unsigned_v<T> ? "expected a whole number without a sign"
                                                      : "expected " + detail::type_name<T>());
  if (r.ec == std::errc::result_out_of_range)
    throw std::invalid_argument("out of range for " + detail::type_name<T>() + " (" + detail::text(lo) + " to " +
                                detail::text(hi) + " here)");
  if (r.ec != std::errc() || r.ptr != last)
    throw std::invalid_argument("expected " + detail::type_name<T>() + ", the whole value" +
                                (r.ec == std::errc() ? " (it has '" + std::string(r.ptr, last) + "' after the number)" : ""));
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(x)) throw std::invalid_argument("it must be finite");
  }
  if (x < lo) throw std::invalid_argument("it must be at least " + detail::text(lo));
  if (x > hi) throw std::invalid_argument("it must be at most " + detail::text(hi));
  return x;
}

// A real number > 0 (learning rates, scales).
inline double parse_positive(const std::string& v) {
  const double x = parse_number<double>(v);
  if (!(x > 0)) throw std::invalid_argument("it must be > 0");
  return x;
}

// Prints "<name>: <problem>" and the usage line to stderr and exits with status 2; problem "help"
// prints only the usage, to stdout, and exits with 0. (A usage callback for parse_flags.)
[[noreturn]] inline void exit_with_usage(const char* name, const std::string& problem, const std::string& usage_line) {
  if (problem == "help") {
    std::fprintf(stdout, "usage: %s %s\n", name, usage_line.c_str());
    std::exit(0);
  }
  std::fprintf(stderr, "%s: %s\nusage: %s %s\n", name, problem.c_str(), name, usage_line.c_str());
  std::exit(2);
}

// The examples' command-line loop: value-less switches and "--flag VALUE" pairs. on_switch(f) and
// on_value(f, v) return false for a flag they do not know; on_value may throw std::logic_error for a bad
// value (parse_number does). Every problem goes to usage(problem), which must not return.
inline void parse_flags(int argc, char** argv, const std::function<bool(const std::string&)>& on_switch,
                        const std::function<bool(const std::string&, const std::string&)>& on_value,
                        const std::function<void(const std::string&)>& usage) {
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--help" || f == "-h") usage("help");
    if (on_switch(f)) continue;
    if (i + 1 >= argc) usage("flag " + f + " is unknown or needs a value");
    const std::string v = argv[++i];
    bool known = false;
    try {
      known = on_value(f, v);
    } catch (const std::logic_error& e) {
      usage("bad value '" + v + "' for " + f + ": " + e.what());
    }
    if (!known) usage("unknown flag " + f);
  }
}

// The exit status of body() for a program's main: any exception is printed as one line,
// "<name>: error: ...", with status 1 (bad flags already exited with 2 while parsing).
inline int guarded_main(const char* name, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: error: an unknown exception\n", name);
  }
  return 1;
}

}  // namespace example
