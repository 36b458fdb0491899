#include "data/idx.h"

#include "core/atomic_file.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <type_traits>

namespace hg::data {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

std::vector<uint8_t> read_raw(const std::string& path, const char* op) {
  require_regular_file(op, path);  // a FIFO would block for ever, a device never end
  File f(std::fopen(path.c_str(), "rb"));
  HG_CHECK(f != nullptr, op, ": cannot open '", path, "': ", std::strerror(errno));
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  HG_CHECK(!ec, op, ": cannot stat '", path, "': ", ec.message());
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  const size_t got = bytes.empty() ? 0 : std::fread(bytes.data(), 1, bytes.size(), f.get());
  HG_CHECK(got == bytes.size(), op, ": read ", got, " of ", bytes.size(), " bytes of '", path, "'");
  return bytes;
}

bool is_gzip(const std::vector<uint8_t>& b) { return b.size() >= 2 && b[0] == 0x1f && b[1] == 0x8b; }

struct Inflater {
  z_stream zs{};
  Inflater() {
    // 16 + MAX_WBITS: gzip wrapper only (a zlib or raw deflate stream is an error)
    HG_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, "read_bytes: zlib inflateInit2 failed");
  }
  ~Inflater() { inflateEnd(&zs); }
};

// deflate's best case turns one compressed byte into at most 1032: more output than that from `in` is
// impossible, so a limit above it never binds.
size_t inflate_bound(size_t in) { return in * 1032 + 1024; }

// What gunzip found: the inflated bytes, at most `limit` of them, and whether the members hold more.
struct Gunzipped {
  std::vector<uint8_t> bytes;
  bool more = false;  // inflating stopped at limit + 1 bytes, so the rest of the file was not looked at
};

uint32_t le32(const uint8_t* p) {
  return p[0] | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

// Inflates a gzip file held in memory into at most `limit` bytes. Every member is inflated and the
// members are joined, as gzip -d and Python's gzip module do. zlib checks each member's trailer (CRC-32
// and ISIZE, the member's size mod 2^32) when the member ends; anything after the last member that is
// not another member is an error, zero padding included (gzip -d and Python skip zeros; a data file
// has no reason to carry any). Inflating stops as soon as the output passes the limit (`more`): the
// caller names the limit in its error, or keeps the first `limit` bytes (to read a header first).
// Output grows by doubling from the size the last member's trailer (ISIZE) announces, within the limit.
Gunzipped gunzip(const std::vector<uint8_t>& in, const std::string& path, const char* op, size_t limit) {
  size_t isize = 0;
  if (in.size() >= 18) isize = le32(in.data() + in.size() - 4);  // 10-byte header + 8-byte trailer at least
  // ISIZE of a damaged file can be anything: trust it only up to a ratio real data sets stay under
  isize = std::min(isize, 8 * in.size() + (size_t{1} << 20));
  const size_t cap = limit + 1;  // one byte past the limit tells "more"
  Gunzipped g;
  std::vector<uint8_t>& out = g.bytes;
  const auto grow = [&](size_t n) {
    try {
      out.resize(n);
    } catch (const std::bad_alloc&) {
      HG_FAIL(op, ": not enough memory to inflate '", path, "' (", n, " bytes)");
    }
  };
  grow(std::min(std::max<size_t>(isize, 1) + 1, cap));
  Inflater inf;
  z_stream& zs = inf.zs;
  zs.next_in = const_cast<Bytef*>(in.data());
  size_t consumed = 0, produced = 0;
  size_t member = 1, member_start = 0;  // the member being inflated, and where its output starts
  for (;;) {
    if (produced == out.size()) {
      if (produced == cap) break;
      grow(std::min(out.size() * 2, cap));
    }
    zs.avail_in = static_cast<uInt>(std::min<size_t>(in.size() - consumed, UINT_MAX));
    zs.next_out = out.data() + produced;
    zs.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - produced, UINT_MAX));
    const uInt avail_in = zs.avail_in, avail_out = zs.avail_out;
    const int rc = inflate(&zs, Z_NO_FLUSH);
    consumed += avail_in - zs.avail_in;
    produced += avail_out - zs.avail_out;
    if (rc == Z_STREAM_END) {  // the member's trailer matched its data
      const size_t rest = in.size() - consumed;
      if (rest == 0) break;
      HG_CHECK(rest >= 2 && in[consumed] == 0x1f && in[consumed + 1] == 0x8b, op, ": '", path, "' has ", rest,
               " bytes after the end of its gzip data (member ", member, " ends at compressed byte ", consumed,
               " of ", in.size(), ") that are not another gzip member; the file is corrupt or has something "
               "appended: re-download it");
      HG_CHECK(inflateReset(&zs) == Z_OK, op, ": zlib inflateReset failed on '", path, "'");
      ++member;
      member_start = produced;
      continue;
    }
    // zlib has just read the trailer's last 4 bytes, ISIZE, when it reports this
    const bool bad_length = rc == Z_DATA_ERROR && zs.msg != nullptr &&
                            std::strcmp(zs.msg, "incorrect length check") == 0 && consumed >= 4;
    HG_CHECK(!bad_length, op, ": '", path, "' is corrupt: gzip member ", member, " inflates to ",
             produced - member_start, " bytes but its trailer (ISIZE) declares ", le32(in.data() + consumed - 4),
             "; re-download the file");
    HG_CHECK(rc == Z_OK || rc == Z_BUF_ERROR, op, ": '", path, "' is not a valid gzip stream (zlib: ",
             zs.msg ? zs.msg : "error", " after ", consumed, " compressed bytes); re-download the file");
    HG_CHECK(!(rc == Z_BUF_ERROR && consumed == in.size()), op, ": '", path,
             "' is a truncated gzip stream: it ends after ", in.size(), " compressed bytes (", produced,
             " bytes inflated) before the end of the data; re-download the file");
  }
  // a member can end exactly one byte past the limit, with the buffer full: that too is "more"
  g.more = produced > limit;
  out.resize(std::min(produced, limit));
  return g;
}

uint32_t be32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
         static_cast<uint32_t>(p[2]) << 8 | p[3];
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

std::string dims_str(const std::vector<int64_t>& d) { return Shape(d).str(); }

// IDX element types: code -> bytes per element (0 when the code is not an IDX type).
size_t idx_type_size(uint8_t code) {
  switch (code) {
    case 0x08: case 0x09: return 1;
    case 0x0B: return 2;
    case 0x0C: case 0x0D: return 4;
    case 0x0E: return 8;
    default: return 0;
  }
}

struct IdxFile {
  std::vector<uint8_t> bytes;
  uint32_t magic = 0;
  uint8_t type = 0;
  std::vector<int64_t> dims;
  size_t header = 0;  // bytes before the elements
  int64_t numel = 1;
  const uint8_t* data() const { return bytes.data() + header; }
};

// The header of an IDX file from its first bytes b[0, n): magic, element type, dims, header size and
// numel (the elements are not looked at).
void parse_header(IdxFile& f, const uint8_t* b, size_t n, const std::string& path, const char* op) {
  HG_CHECK(n >= 4, op, ": '", path, "' is truncated: it has ", n, " bytes but an IDX header needs at least 4");
  f.magic = be32(b);
  f.type = b[2];
  const size_t nd = b[3];
  HG_CHECK(b[0] == 0 && b[1] == 0 && idx_type_size(f.type) != 0 && nd >= 1, op, ": '", path, "' has magic ",
           hex32(f.magic), " but an IDX file starts with 0x0000TTNN (TT = 08/09/0B/0C/0D/0E the element type, NN >= 1 "
           "the number of dims), e.g. 0x00000803 for images, 0x00000801 for labels; is it an IDX file?");
  f.header = 4 + 4 * nd;
  HG_CHECK(n >= f.header, op, ": '", path, "' is truncated: its header declares ", nd, " dims (", f.header,
           " bytes) but the file has only ", n, " bytes");
  for (size_t i = 0; i < nd; ++i) {
    f.dims.push_back(be32(b + 4 + 4 * i));
    // 2^40 elements is far beyond any IDX data set and keeps numel * 8 from overflowing
    HG_CHECK(f.numel <= (int64_t{1} << 40) / std::max<int64_t>(f.dims.back(), 1), op, ": '", path,
             "' header dims ", dims_str(f.dims), "... are inconsistent (too many elements)");
    f.numel *= f.dims.back();
  }
}

// Reads and validates an IDX file: a known magic and exactly header + numel * element size bytes. A
// gzip file is inflated twice over its bytes in memory: the header alone first, then no more than the
// size the header declares, so a gzip bomb stops at that size (or at once, with a bad header). Raw and
// gzip take exactly the same contents: the inflated members must end where the header says, as the
// raw file must, and the errors use the same words ("the file has N bytes" / "inflates to N bytes").
IdxFile parse_idx(const std::string& path, const char* op) {
  IdxFile f;
  std::vector<uint8_t> raw = read_raw(path, op);
  const bool gz = is_gzip(raw);
  if (gz) {
    const std::vector<uint8_t> head = gunzip(raw, path, op, 4 + 4 * 255).bytes;
    parse_header(f, head.data(), head.size(), path, op);
  } else {
    parse_header(f, raw.data(), raw.size(), path, op);
  }
  const size_t want = f.header + static_cast<size_t>(f.numel) * idx_type_size(f.type);
  bool more = false;  // gzip only: the members hold more than `want` bytes (not counted past that)
  if (gz) {
    HG_CHECK(want <= inflate_bound(raw.size()), op, ": '", path, "' header dims ", dims_str(f.dims), " need ", want,
             " bytes but ", raw.size(), " bytes of gzip cannot inflate to more than ", inflate_bound(raw.size()),
             "; the file is truncated or corrupt: re-download it");
    Gunzipped g = gunzip(raw, path, op, want);
    f.bytes = std::move(g.bytes);
    more = g.more;
  } else {
    f.bytes = std::move(raw);
  }
  const size_t got = f.bytes.size();
  const std::string found = !gz ? "has " + std::to_string(got) + " bytes"
                            : more ? "inflates to more than " + std::to_string(want) + " bytes"
                                   : "inflates to " + std::to_string(got) + " bytes";
  HG_CHECK(more || got >= want, op, ": '", path, "' is truncated: header dims ", dims_str(f.dims), " need ", want,
           " bytes but the file ", found, "; re-download it");
  HG_CHECK(!more && got == want, op, ": '", path, "' header dims ", dims_str(f.dims),
           " are inconsistent with its size: they account for ", want, " bytes (the size its IDX header declares) "
           "but the file ", found, "; a corrupt file or data appended to it (with gzip, maybe a bomb): re-download it");
  return f;
}

void check_magic(const IdxFile& f, uint32_t want, const char* what, const std::string& path, const char* op) {
  HG_CHECK(f.magic == want, op, ": '", path, "' has magic ", hex32(f.magic), " but ", what, " need ", hex32(want),
           " (unsigned bytes, ", want & 0xFF, " dims); is it the right file?");
}

template <class Int>
double load_be(const uint8_t* p) {
  std::make_unsigned_t<Int> v = 0;
  for (size_t i = 0; i < sizeof(Int); ++i) v = static_cast<std::make_unsigned_t<Int>>(v << 8 | p[i]);
  return static_cast<double>(static_cast<Int>(v));  // two's complement (C++20)
}

double load_element(uint8_t type, const uint8_t* p) {
  switch (type) {
    case 0x08: return p[0];
    case 0x09: return static_cast<int8_t>(p[0]);
    case 0x0B: return load_be<int16_t>(p);
    case 0x0C: return load_be<int32_t>(p);
    case 0x0D: {
      const uint32_t u = be32(p);
      float v;
      std::memcpy(&v, &u, 4);
      return v;
    }
    default: {
      const uint64_t u = static_cast<uint64_t>(be32(p)) << 32 | be32(p + 4);
      double v;
      std::memcpy(&v, &u, 8);
      return v;
    }
  }
}

std::string join(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

// dir/name, else dir/name.gz; a missing file names both and how to get the data.
std::string find_file(const std::string& dir, const std::string& name, const char* op, const std::string& hint) {
  for (const std::string& p : {join(dir, name), join(dir, name + ".gz")})
    if (std::filesystem::exists(p)) return p;
  HG_FAIL(op, ": missing file '", join(dir, name), "' (nor '", name, ".gz' there); ", hint);
}

MnistSplit load_split(const std::string& dir, Split split, int64_t num_classes, const char* op,
                      const std::string& hint) {
  const std::string prefix = split == Split::Train ? "train" : "t10k";
  const std::string ipath = find_file(dir, prefix + "-images-idx3-ubyte", op, hint);
  const std::string lpath = find_file(dir, prefix + "-labels-idx1-ubyte", op, hint);
  MnistSplit s{read_idx_images(ipath), read_idx_labels(lpath)};
  const int64_t ni = s.images.size(0), nl = s.labels.size(0);
  HG_CHECK(ni == nl, op, ": count mismatch: '", ipath, "' has ", ni, " images but '", lpath, "' has ", nl,
           " labels; the files belong to different sets");
  // an empty split is a valid pair of IDX files, but training on it runs no step and "evaluates" nothing
  HG_CHECK(ni > 0, op, ": empty data set: '", ipath, "' has ", ni, " images and '", lpath, "' has ", nl,
           " labels; the files are truncated or corrupt: re-download them");
  const int64_t* l = s.labels.data<int64_t>();
  for (int64_t i = 0; i < s.labels.numel(); ++i)
    HG_CHECK(l[i] >= 0 && l[i] < num_classes, op, ": label ", l[i], " at index ", i, " of '", lpath,
             "' is out of range [0, ", num_classes, "); the file is corrupt or not this data set");
  return s;
}

}  // namespace

const std::array<const char*, 10>& fashion_mnist_classes() {
  static const std::array<const char*, 10> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

std::vector<uint8_t> read_bytes(const std::string& path, const char* op, size_t max_bytes) {
  std::vector<uint8_t> bytes = read_raw(path, op);
  if (!is_gzip(bytes)) {
    HG_CHECK(bytes.size() <= max_bytes, op, ": '", path, "' has ", bytes.size(), " bytes, more than the ", max_bytes,
             " this reader takes; is it the right file?");
    return bytes;
  }
  const size_t limit = std::min(max_bytes, inflate_bound(bytes.size()));
  Gunzipped g = gunzip(bytes, path, op, limit);
  HG_CHECK(!g.more, op, ": '", path, "' inflates to more than ", limit, " bytes (the most this reader takes); a gzip "
           "bomb or a corrupt file: re-download it");
  return std::move(g.bytes);
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes, Compression compression) {
  if (compression == Compression::None) {
    File f(std::fopen(path.c_str(), "wb"));
    HG_CHECK(f != nullptr, "write_bytes: cannot create '", path, "': ", std::strerror(errno));
    const bool written = bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f.get()) == bytes.size();
    HG_CHECK(written, "write_bytes: short write to '", path, "': ", std::strerror(errno));
    HG_CHECK(std::fclose(f.release()) == 0, "write_bytes: cannot close '", path, "': ", std::strerror(errno));
    return;
  }
  gzFile gz = gzopen(path.c_str(), "wb");
  HG_CHECK(gz != nullptr, "write_bytes: cannot create '", path, "': ", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const unsigned n = static_cast<unsigned>(std::min<size_t>(bytes.size() - done, 1u << 30));
    if (gzwrite(gz, bytes.data() + done, n) != static_cast<int>(n)) break;
    done += n;
  }
  const int rc = gzclose(gz);
  HG_CHECK(done == bytes.size() && rc == Z_OK, "write_bytes: writing gzip '", path, "' failed after ", done, " of ",
           bytes.size(), " bytes");
}

Tensor read_idx(const std::string& path) {
  const IdxFile f = parse_idx(path, "read_idx");
  const bool wide = f.type == 0x0C || f.type == 0x0E;  // i32 and f64 are exact only in F64
  Tensor t = empty(Shape(f.dims), {.dtype = wide ? DType::F64 : DType::F32});
  const size_t es = idx_type_size(f.type);
  if (wide) {
    double* d = t.data<double>();
    for (int64_t i = 0; i < f.numel; ++i) d[i] = load_element(f.type, f.data() + i * es);
  } else {
    float* d = t.data<float>();
    for (int64_t i = 0; i < f.numel; ++i) d[i] = static_cast<float>(load_element(f.type, f.data() + i * es));
  }
  return t;
}

Tensor read_idx_images(const std::string& path) {
  const IdxFile f = parse_idx(path, "read_idx_images");
  check_magic(f, 0x00000803, "images", path, "read_idx_images");
  HG_CHECK(f.dims[1] > 0 && f.dims[2] > 0, "read_idx_images: '", path, "' header dims ", dims_str(f.dims),
           " are inconsistent: an image needs height and width >= 1");
  Tensor t = empty({f.dims[0], 1, f.dims[1], f.dims[2]});
  float* d = t.data<float>();
  const uint8_t* s = f.data();
  for (int64_t i = 0; i < f.numel; ++i) d[i] = static_cast<float>(s[i]) / 255.0f;
  return t;
}

Tensor read_idx_labels(const std::string& path) {
  const IdxFile f = parse_idx(path, "read_idx_labels");
  check_magic(f, 0x00000801, "labels", path, "read_idx_labels");
  Tensor t = empty({f.dims[0]}, {.dtype = DType::I64});
  int64_t* d = t.data<int64_t>();
  for (int64_t i = 0; i < f.numel; ++i) d[i] = f.data()[i];
  return t;
}

MnistSplit load_mnist_format(const std::string& dir, Split split, int64_t num_classes) {
  return load_split(dir, split, num_classes, "load_mnist_format", "check the directory");
}

std::string fashion_mnist_dir() {
  const char* env = std::getenv("HG_FASHION_MNIST_DIR");
  return env != nullptr && env[0] != '\0' ? env : "/usr/share/datasets/fashion-mnist";
}

MnistSplit load_fashion_mnist(const std::string& dir, Split split) {
  return load_split(dir, split, 10, "load_fashion_mnist",
                    "install it with `apt-get install dataset-fashion-mnist` or set HG_FASHION_MNIST_DIR to the "
                    "directory holding the Fashion-MNIST files");
}

MnistSplit load_fashion_mnist(Split split) { return load_fashion_mnist(fashion_mnist_dir(), split); }

}  // namespace hg::data
