#pragma once
// Text helpers of the inspectors' CSV/JSON reports (written with core/atomic_file.h's
// write_file_atomic, so a reader such as scripts/plot.py never sees half a file).
#include <string>
#include <vector>

namespace hg::amp::inspect {

// A CSV field: quoted (with "" for ") when it holds a comma, quote or newline (RFC 4180).
std::string csv_field(const std::string& s);
// A JSON string literal, quotes included, with control characters escaped.
std::string json_string(const std::string& s);
// A double as the shortest text that reads back to the same value (std::to_chars); JSON has no
// inf/NaN, so those become null.
std::string json_number(double v);
// items separated by sep: a JSON array's or object's body, a CSV line.
std::string join(const std::vector<std::string>& items, const std::string& sep);

}  // namespace hg::amp::inspect
