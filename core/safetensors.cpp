// safetensors reader and writer (format in core/safetensors.h), with the small JSON subset it needs.
#include "core/safetensors.h"

#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string_view>
#include <vector>

namespace hg {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; a big-endian host would need byte swaps");

namespace {

// safetensors' own reader refuses headers above 100 MB; a larger one is a corrupt length.
constexpr uint64_t kMaxHeader = 100ull << 20;

// --- JSON: just enough for a safetensors header -------------------------------------------------

struct JsonMember;

struct Json {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  size_t pos = 0;    // where the value starts in the header, for error messages
  std::string text;  // a string's contents or a number's digits
  std::vector<Json> items;
  std::vector<JsonMember> members;  // in file order, names unique
};

struct JsonMember {  // not a std::pair: a pair of an incomplete Json inside Json is not portable
  std::string name;
  Json value;
};

class JsonParser {
 public:
  JsonParser(const std::string& file, std::string_view s) : file_(file), s_(s) {}

  Json document() {
    skip_ws();
    Json v = value(0);
    skip_ws();
    if (i_ != s_.size()) fail("unexpected character after the header object");
    return v;
  }

 private:
  // Nesting deeper than a header ever needs is an attack on the recursion, not a header.
  static constexpr int kMaxDepth = 16;

  [[noreturn]] void fail(const std::string& what) const {
    HG_FAIL("load_safetensors: '", file_, "': JSON syntax error in the header at byte ", i_, ": ", what,
            "; the file is corrupt or not a safetensors file");
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void expect(char c) {
    if (peek() != c || i_ >= s_.size()) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }

  Json value(int depth) {
    if (depth > kMaxDepth) fail("values nested too deeply");
    Json v;
    v.pos = i_;
    const char c = peek();
    if (i_ >= s_.size()) fail("unexpected end of the header");
    if (c == '{') return object(depth, v);
    if (c == '[') return array(depth, v);
    if (c == '"') {
      v.kind = Json::Kind::String;
      v.text = string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Json::Kind::Number;
      v.text = number();
    } else if (literal("true") || literal("false")) {
      v.kind = Json::Kind::Bool;
    } else if (literal("null")) {
      v.kind = Json::Kind::Null;
    } else {
      fail(std::string("unexpected character '") + c + "'");
    }
    return v;
  }

  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  Json object(int depth, Json v) {
    v.kind = Json::Kind::Object;
    expect('{');
    skip_ws();
    if (peek() == '}' && i_ < s_.size()) {
      ++i_;
      return v;
    }
    std::set<std::string> names;
    for (;;) {
      skip_ws();
      const size_t at = i_;
      if (peek() != '"') fail("expected a quoted name");
      std::string name = string();
      HG_CHECK(names.insert(name).second, "load_safetensors: '", file_, "': the header names '", name,
               "' twice (second at byte ", at, "); every name must be unique");
      skip_ws();
      expect(':');
      skip_ws();
      v.members.push_back({std::move(name), value(depth + 1)});
      skip_ws();
      if (peek() == ',' && i_ < s_.size()) {
        ++i_;
        continue;
      }
      expect('}');
      return v;
    }
  }

  Json array(int depth, Json v) {
    v.kind = Json::Kind::Array;
    expect('[');
    skip_ws();
    if (peek() == ']' && i_ < s_.size()) {
      ++i_;
      return v;
    }
    for (;;) {
      skip_ws();
      v.items.push_back(value(depth + 1));
      skip_ws();
      if (peek() == ',' && i_ < s_.size()) {
        ++i_;
        continue;
      }
      expect(']');
      return v;
    }
  }

  // JSON's number grammar; the digits are kept as text and converted where a count is needed.
  std::string number() {
    const size_t start = i_;
    auto digits = [&] {
      const size_t d = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      if (i_ == d) fail("expected a digit");
    };
    if (peek() == '-') ++i_;
    if (peek() == '0' && i_ < s_.size()) ++i_;
    else digits();
    if (peek() == '.' && i_ < s_.size()) {
      ++i_;
      digits();
    }
    if ((peek() == 'e' || peek() == 'E') && i_ < s_.size()) {
      ++i_;
      if (peek() == '+' || peek() == '-') ++i_;
      digits();
    }
    return std::string(s_.substr(start, i_ - start));
  }

  uint32_t hex4() {
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k, ++i_) {
      const char c = peek();
      if (i_ >= s_.size()) fail("unexpected end inside a \\u escape");
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail("bad hex digit in a \\u escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }

  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  uint32_t escape_u() {
    uint32_t cp = hex4();
    if (cp >= 0xDC00 && cp <= 0xDFFF) fail("a low surrogate without a high one");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (!literal("\\u")) fail("a high surrogate without a low one");
      const uint32_t lo = hex4();
      if (lo < 0xDC00 || lo > 0xDFFF) fail("a high surrogate without a low one");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    return cp;
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) fail("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        --i_;  // point at the character
        fail("raw control character in a string");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      const char e = peek();
      if (i_++ >= s_.size()) fail("unterminated escape");
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': put_utf8(out, escape_u()); break;
        default:
          --i_;
          fail(std::string("unknown escape '\\") + e + "'");
      }
    }
  }

  const std::string& file_;
  std::string_view s_;
  size_t i_ = 0;
};

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

// --- header <-> tensor descriptions ---------------------------------------------------------------

struct Entry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
  size_t pos = 0;  // of its header entry
};

// The format's dtype strings: each dtype's row (core/dtype.h) holds its tag.
const char* safetensors_dtype(DType t) { return dtype_info(t).safetensors; }

bool dtype_from_name(const std::string& s, DType& out) {
  for (const DTypeInfo& d : kDTypeInfo)
    if (s == d.safetensors) return out = d.dtype, true;
  return false;
}

class HeaderReader {
 public:
  explicit HeaderReader(const std::string& file) : file_(file) {}

  template <class... Args>
  [[noreturn]] void fail(const Args&... args) const {
    HG_FAIL("load_safetensors: '", file_, "': ", args..., "; the file is corrupt or was not written as safetensors");
  }

  // A JSON integer that is a count or an offset (0 .. 2^63-1).
  uint64_t count(const Json& v, const std::string& what) const {
    if (v.kind != Json::Kind::Number) fail(what, " is not a number (header byte ", v.pos, ")");
    const std::string& t = v.text;
    const bool digits = !t.empty() && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) fail(what, " is ", t, "; it must be a whole number >= 0");
    uint64_t r = 0;
    for (const char c : t) {
      const uint64_t d = static_cast<uint64_t>(c - '0');
      if (r > (uint64_t{INT64_MAX} - d) / 10) fail(what, " is ", t, ", too large for a 64-bit size");
      r = r * 10 + d;
    }
    return r;
  }

  std::vector<uint64_t> counts(const Json& v, const std::string& what) const {
    if (v.kind != Json::Kind::Array) fail(what, " is not an array (header byte ", v.pos, ")");
    std::vector<uint64_t> r;
    for (size_t k = 0; k < v.items.size(); ++k) r.push_back(count(v.items[k], what + "[" + std::to_string(k) + "]"));
    return r;
  }

  Entry entry(const std::string& name, const Json& v) const {
    const std::string tn = "tensor '" + name + "'";
    if (v.kind != Json::Kind::Object) fail(tn, " is not a JSON object (header byte ", v.pos, ")");
    const Json *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
    for (const auto& [k, m] : v.members) {
      if (k == "dtype") dtype = &m;
      if (k == "shape") shape = &m;
      if (k == "data_offsets") offsets = &m;
    }
    if (!dtype || !shape || !offsets) fail(tn, " lacks \"", !dtype ? "dtype" : !shape ? "shape" : "data_offsets", "\"");
    Entry e;
    e.name = name;
    e.pos = v.pos;
    if (dtype->kind != Json::Kind::String) fail(tn, "'s dtype is not a string");
    if (!dtype_from_name(dtype->text, e.dtype))
      fail(tn, " has dtype '", dtype->text, "', which halfgrad does not support (it reads F32, F16, BF16, F64, I64, F8_E4M3, F8_E5M2)");
    const std::vector<uint64_t> dims = counts(*shape, tn + "'s shape");
    const std::vector<uint64_t> off = counts(*offsets, tn + "'s data_offsets");
    if (off.size() != 2) fail(tn, "'s data_offsets has ", off.size(), " numbers; it must be [begin, end]");
    e.begin = off[0];
    e.end = off[1];
    uint64_t bytes = dtype_size(e.dtype);
    for (const uint64_t d : dims) {
      if (d != 0 && bytes > uint64_t{INT64_MAX} / d) fail(tn, "'s shape is too large for a 64-bit size");
      bytes *= d;
      e.shape.push_back(static_cast<int64_t>(d));
    }
    if (e.end < e.begin) fail(tn, "'s data_offsets [", e.begin, ", ", e.end, "] end before they begin");
    if (e.end - e.begin != bytes)
      fail(tn, " of dtype ", e.dtype, " and shape ", Shape(e.shape), " needs ", bytes, " bytes but its data_offsets [",
           e.begin, ", ", e.end, "] hold ", e.end - e.begin);
    return e;
  }

  std::map<std::string, std::string> metadata(const Json& v) const {
    if (v.kind != Json::Kind::Object) fail("__metadata__ is not a JSON object (header byte ", v.pos, ")");
    std::map<std::string, std::string> r;
    for (const auto& [k, m] : v.members) {
      if (m.kind != Json::Kind::String) fail("__metadata__ entry '", k, "' is not a string (safetensors metadata is string to string)");
      r[k] = m.text;
    }
    return r;
  }

  // The tensors must tile the data buffer exactly: no overlap, no unowned bytes (safetensors' rule).
  void check_layout(std::vector<Entry> es, uint64_t buffer) const {
    for (const Entry& e : es)
      if (e.end > buffer)
        fail("tensor '", e.name, "' has data_offsets [", e.begin, ", ", e.end, "] past the end of the ", buffer,
             "-byte data buffer (truncated file?)");
    std::sort(es.begin(), es.end(), [](const Entry& a, const Entry& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t at = 0;
    const Entry* prev = nullptr;
    for (const Entry& e : es) {
      if (e.begin < at)
        fail("tensors '", prev->name, "' [", prev->begin, ", ", prev->end, "] and '", e.name, "' [", e.begin, ", ", e.end,
             "] overlap in the data buffer");
      if (e.begin > at) fail("bytes [", at, ", ", e.begin, ") of the data buffer belong to no tensor");
      at = e.end;
      prev = &e;
    }
    if (at != buffer) fail("bytes [", at, ", ", buffer, ") of the data buffer belong to no tensor");
  }

 private:
  const std::string& file_;
};

// --- files ----------------------------------------------------------------------------------------

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// The header must be UTF-8 (JSON, and the reference reader rejects anything else): no stray
// continuation byte, no overlong form, no surrogate, nothing above U+10FFFF.
void check_utf8(const std::string& path, const std::string& h) {
  const auto* b = reinterpret_cast<const unsigned char*>(h.data());
  const size_t n = h.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = b[i];
    size_t len = 0;
    uint32_t cp = 0, min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    }
    bool ok = len != 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      ok = (b[i + k] & 0xC0) == 0x80;
      cp = cp << 6 | (b[i + k] & 0x3F);
    }
    ok = ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (!ok) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02X", c);
      HG_FAIL("load_safetensors: '", path, "': the header is not valid UTF-8 (byte ", byte, " at header offset ", i,
              "); safetensors headers are UTF-8 JSON: the file is corrupt or was not written by a safetensors writer");
    }
    i += len;
  }
}

void read_exact(std::FILE* f, const std::string& path, uint64_t at, void* dst, uint64_t n) {
  if (n == 0) return;
  HG_CHECK(fseeko(f, static_cast<off_t>(at), SEEK_SET) == 0 && std::fread(dst, 1, n, f) == n, "load_safetensors: '",
           path, "': cannot read ", n, " bytes at offset ", at, " (", std::strerror(errno), "); the file changed or is unreadable");
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  require_regular_file("load_safetensors", path);  // a FIFO would block the reader for ever
  FilePtr f(std::fopen(path.c_str(), "rb"));
  HG_CHECK(f, "load_safetensors: cannot open '", path, "': ", std::strerror(errno), "; check the path");
  HG_CHECK(fseeko(f.get(), 0, SEEK_END) == 0, "load_safetensors: cannot seek in '", path, "'; it must be a regular file");
  const off_t end = ftello(f.get());
  HG_CHECK(end >= 0, "load_safetensors: cannot find the size of '", path, "'; it must be a regular file");
  const auto size = static_cast<uint64_t>(end);
  HG_CHECK(size >= 8, "load_safetensors: '", path, "' is ", size,
           " bytes; a safetensors file starts with an 8-byte header length");
  unsigned char len[8];
  read_exact(f.get(), path, 0, len, 8);
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | len[k];
  HG_CHECK(n <= size - 8, "load_safetensors: '", path, "': the header length is ", n, " bytes but only ", size - 8,
           " bytes follow it; the file is truncated or not a safetensors file");
  HG_CHECK(n <= kMaxHeader, "load_safetensors: '", path, "': the header length is ", n,
           " bytes, above safetensors' limit of ", kMaxHeader, "; the file is corrupt");
  std::string header(n, '\0');
  read_exact(f.get(), path, 8, header.data(), n);
  check_utf8(path, header);
  const Json root = JsonParser(path, header).document();
  const HeaderReader reader(path);
  if (root.kind != Json::Kind::Object) reader.fail("the header is not a JSON object");
  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& [name, v] : root.members) {
    if (name == "__metadata__") out.metadata = reader.metadata(v);
    else entries.push_back(reader.entry(name, v));
  }
  reader.check_layout(entries, size - 8 - n);
  for (const Entry& e : entries) {
    Tensor t = empty(Shape(e.shape), {.dtype = e.dtype});
    read_exact(f.get(), path, 8 + n + e.begin, t.data_ptr(), e.end - e.begin);
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

namespace {

struct Planned {
  const std::string* name;
  Tensor host;
  uint64_t begin = 0, end = 0;
};

// Lays the data out widest dtype first so each tensor starts at a multiple of its element size.
std::vector<Planned> plan(const std::map<std::string, Tensor>& tensors) {
  std::vector<Planned> ps;
  for (const auto& [name, t] : tensors) {
    HG_CHECK(name != "__metadata__", "save_safetensors: a tensor may not be named '__metadata__' (the format reserves it)");
    HG_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined; drop it or give it a value");
    ps.push_back({&name, t.detach().contiguous().to(Device::cpu())});  // a view is written as its elements
  }
  std::stable_sort(ps.begin(), ps.end(), [](const Planned& a, const Planned& b) {
    return dtype_size(a.host.dtype()) > dtype_size(b.host.dtype());
  });
  uint64_t at = 0;
  for (Planned& p : ps) {
    p.begin = at;
    at = p.end = at + p.host.nbytes();
  }
  return ps;
}

std::string header_json(const std::vector<Planned>& ps, const std::map<std::string, std::string>& metadata) {
  std::vector<const Planned*> by_name;
  for (const Planned& p : ps) by_name.push_back(&p);
  std::sort(by_name.begin(), by_name.end(), [](const Planned* a, const Planned* b) { return *a->name < *b->name; });
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) {
      if (h.back() != '{') h += ',';
      json_string(h, k);
      h += ':';
      json_string(h, v);
    }
    h += '}';
  }
  for (const Planned* p : by_name) {
    if (h.size() > 1) h += ',';
    json_string(h, *p->name);
    h += ":{\"dtype\":\"" + std::string(safetensors_dtype(p->host.dtype())) + "\",\"shape\":[";
    for (int64_t d = 0; d < p->host.ndim(); ++d) {
      if (d > 0) h += ',';
      h += std::to_string(p->host.size(d));
    }
    h += "],\"data_offsets\":[" + std::to_string(p->begin) + "," + std::to_string(p->end) + "]}";
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');  // the data buffer starts 8-byte aligned
  return h;
}

}  // namespace

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::vector<Planned> ps = plan(tensors);
  const std::string header = header_json(ps, metadata);
  unsigned char len[8];
  uint64_t n = header.size();
  for (unsigned char& b : len) b = static_cast<unsigned char>(n & 0xFF), n >>= 8;
  AtomicFile tmp("save_safetensors", path, detail::safetensors_fail_after_bytes);
  tmp.write(len, 8);
  tmp.write(header.data(), header.size());
  for (const Planned& p : ps) tmp.write(p.host.data_ptr(), p.host.nbytes());
  tmp.commit();
}

}  // namespace hg
