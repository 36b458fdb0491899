// data/'s file readers: IDX and CIFAR-10 on small files written here (raw and gzip), every error they
// report, raw and gzip held to the same verdict, plus the real Fashion-MNIST when it is installed. The
// datasets and the DataLoader are tests/data/test_dataloader.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "core/rng.h"
#include "core/tensor.h"
#include "data/cifar.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "test_util.h"

using namespace hg;
using namespace hg::data;
using Catch::Contains;
using hg::test::error_of;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;

// A fresh directory under the system temp dir, removed with its contents at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() / ("hg_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// Sets (or unsets, for nullptr) an environment variable for one scope.
struct EnvGuard {
  std::string name;
  std::string old;
  bool had;
  EnvGuard(const char* n, const char* value) : name(n), had(std::getenv(n) != nullptr) {
    if (had) old = std::getenv(n);
    if (value) setenv(n, value, 1);
    else unsetenv(n);
  }
  ~EnvGuard() {
    if (had) setenv(name.c_str(), old.c_str(), 1);
    else unsetenv(name.c_str());
  }
};

void put_be(Bytes& b, uint64_t v, int nbytes) {
  for (int i = nbytes - 1; i >= 0; --i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// An IDX file: magic 0x0000TTNN, big-endian dims, then the payload as given.
Bytes idx_file(uint8_t type, const std::vector<uint32_t>& dims, const Bytes& payload) {
  Bytes b = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) put_be(b, d, 4);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

uint8_t pixel(int64_t i) { return static_cast<uint8_t>((i * 37 + 5) % 256); }

Bytes image_payload(int64_t n) {
  Bytes p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = pixel(i);
  p[0] = 0;
  p[1] = 255;  // both ends of the range
  return p;
}

Bytes images_file(uint32_t n, uint32_t h, uint32_t w) { return idx_file(0x08, {n, h, w}, image_payload(n * h * w)); }

Bytes labels_file(const std::vector<uint8_t>& labels) {
  return idx_file(0x08, {static_cast<uint32_t>(labels.size())}, labels);
}

Bytes file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

std::vector<int64_t> values_i64(const Tensor& t) { return t.to_vector<int64_t>(); }

}  // namespace

// ------------------------------------------------------------------------------------------------
// IDX

TEST_CASE("idx: images and labels read back from raw and gzip files", "[data]") {
  TempDir dir;
  const Bytes img = images_file(3, 2, 4), lab = labels_file({7, 0, 9});
  // names lie on purpose: the gzip magic, not the suffix, decides
  write_bytes(dir / "raw.gz", img);
  write_bytes(dir / "packed", img, Compression::Gzip);
  write_bytes(dir / "labels.gz", lab, Compression::Gzip);
  const Bytes packed = file_bytes(dir / "packed");
  REQUIRE(packed.size() >= 2);
  CHECK((packed[0] == 0x1f && packed[1] == 0x8b));
  CHECK(packed != img);
  CHECK(read_bytes(dir / "packed") == img);

  for (const char* name : {"raw.gz", "packed"}) {
    INFO(name);
    const Tensor x = read_idx_images(dir / name);
    CHECK(x.shape() == Shape{3, 1, 2, 4});
    CHECK(x.dtype() == DType::F32);
    const std::vector<float> v = x.to_vector<float>();
    const Bytes want = image_payload(24);
    for (size_t i = 0; i < v.size(); ++i) CHECK(v[i] == Approx(want[i] / 255.0).margin(1e-7));
    CHECK(*std::min_element(v.begin(), v.end()) == 0.0f);
    CHECK(*std::max_element(v.begin(), v.end()) == 1.0f);
    const Tensor raw = read_idx(dir / name);  // as stored: (3,2,4) in [0,255]
    CHECK(raw.shape() == Shape{3, 2, 4});
    CHECK(raw.dtype() == DType::F32);
    const std::vector<double> r = raw.to_vector<double>();
    for (size_t i = 0; i < r.size(); ++i) CHECK(r[i] == want[i]);
  }
  const Tensor y = read_idx_labels(dir / "labels.gz");
  CHECK(y.dtype() == DType::I64);
  CHECK(values_i64(y) == std::vector<int64_t>{7, 0, 9});
}

TEST_CASE("idx: read_idx keeps every element type", "[data]") {
  TempDir dir;
  auto roundtrip = [&](uint8_t type, const Bytes& payload, uint32_t n) {
    write_bytes(dir / "t.idx", idx_file(type, {n}, payload));
    return read_idx(dir / "t.idx");
  };
  const Tensor i8 = roundtrip(0x09, {0xFD, 0x7F}, 2);
  CHECK(i8.dtype() == DType::F32);
  CHECK(i8.to_vector<double>() == std::vector<double>{-3, 127});
  Bytes p16;
  put_be(p16, static_cast<uint16_t>(-300), 2);
  put_be(p16, 1234, 2);
  CHECK(roundtrip(0x0B, p16, 2).to_vector<double>() == std::vector<double>{-300, 1234});
  Bytes p32;  // 2^30 + 1 is not representable in F32: i32 must come back as F64
  put_be(p32, static_cast<uint32_t>(-70000), 4);
  put_be(p32, (1u << 30) + 1, 4);
  const Tensor i32 = roundtrip(0x0C, p32, 2);
  CHECK(i32.dtype() == DType::F64);
  CHECK(i32.to_vector<double>() == std::vector<double>{-70000, 1073741825.0});
  Bytes pf;
  for (float f : {1.5f, -2.25f}) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    put_be(pf, u, 4);
  }
  CHECK(roundtrip(0x0D, pf, 2).to_vector<double>() == std::vector<double>{1.5, -2.25});
  Bytes pd;
  const double tenth = 0.1;
  uint64_t ud;
  std::memcpy(&ud, &tenth, 8);
  put_be(pd, ud, 8);
  const Tensor f64 = roundtrip(0x0E, pd, 1);
  CHECK(f64.dtype() == DType::F64);
  CHECK(f64.to_vector<double>() == std::vector<double>{0.1});
  // a 2-d file keeps its dims
  write_bytes(dir / "m.idx", idx_file(0x08, {2, 3}, {1, 2, 3, 4, 5, 6}));
  CHECK(read_idx(dir / "m.idx").shape() == Shape{2, 3});
}

TEST_CASE("idx: bad files give errors naming the problem", "[data]") {
  TempDir dir;
  const Bytes img = images_file(4, 3, 3);
  write_bytes(dir / "labels", labels_file({1, 2}));
  CHECK_THAT(error_of([&] { read_idx_images(dir / "nope"); }), Contains("cannot open") && Contains("nope"));
  CHECK_THAT(error_of([&] { read_idx_images(dir / "labels"); }),
             Contains("magic 0x00000801") && Contains("need 0x00000803"));
  write_bytes(dir / "images", img);
  CHECK_THAT(error_of([&] { read_idx_labels(dir / "images"); }),
             Contains("magic 0x00000803") && Contains("need 0x00000801"));
  write_bytes(dir / "text", {'H', 'E', 'L', 'L', 'O', ' ', 'W', 'O', 'R', 'L', 'D', '!'});
  CHECK_THAT(error_of([&] { read_idx(dir / "text"); }), Contains("magic 0x48454C4C") && Contains("IDX"));
  // truncated: the data, the header, the magic
  write_bytes(dir / "short", Bytes(img.begin(), img.end() - 5));
  CHECK_THAT(error_of([&] { read_idx_images(dir / "short"); }),
             Contains("truncated") && Contains(std::to_string(img.size()) + " bytes but the file has " +
                                               std::to_string(img.size() - 5)));
  write_bytes(dir / "header", Bytes(img.begin(), img.begin() + 10));
  CHECK_THAT(error_of([&] { read_idx_images(dir / "header"); }), Contains("truncated") && Contains("3 dims"));
  write_bytes(dir / "tiny", {0, 0});
  CHECK_THAT(error_of([&] { read_idx(dir / "tiny"); }), Contains("truncated"));
  // more bytes than the dims account for
  Bytes longer = img;
  longer.push_back(0);
  write_bytes(dir / "long", longer);
  CHECK_THAT(error_of([&] { read_idx_images(dir / "long"); }), Contains("inconsistent") && Contains("[4, 3, 3]"));
  write_bytes(dir / "flat", idx_file(0x08, {2, 0, 5}, {}));
  CHECK_THAT(error_of([&] { read_idx_images(dir / "flat"); }), Contains("inconsistent") && Contains("height"));
  write_bytes(dir / "huge", idx_file(0x08, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, {}));
  CHECK_THAT(error_of([&] { read_idx(dir / "huge"); }), Contains("inconsistent"));
  // gzip cut short, and gzip with damaged data
  write_bytes(dir / "gz", img, Compression::Gzip);
  const Bytes gz = file_bytes(dir / "gz");
  write_bytes(dir / "gz_short", Bytes(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2)));
  CHECK_THAT(error_of([&] { read_idx_images(dir / "gz_short"); }), Contains("truncated gzip"));
  Bytes bad = gz;
  for (size_t i = 12; i < bad.size() - 8; ++i) bad[i] ^= 0x5A;
  write_bytes(dir / "gz_bad", bad);
  CHECK_THAT(error_of([&] { read_idx_images(dir / "gz_bad"); }), Contains("not a valid gzip"));
}

TEST_CASE("idx: a gzip bomb stops at the size its header declares, non-regular files are refused at once",
          "[data]") {
  TempDir dir;
  // a valid header for 100 images of 28x28 (78,416 bytes) followed by 64 MB of zeros, gzip'd to ~64 KB
  Bytes bomb = images_file(100, 28, 28);
  bomb.resize(size_t{64} << 20, 0);
  write_bytes(dir / "bomb.gz", bomb, Compression::Gzip);
  bomb = {};
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THAT(error_of([&] { read_idx_images(dir / "bomb.gz"); }),
             Contains("inflates to more than 78416 bytes") && Contains("the size its IDX header declares"));
  // the header claims far more than the compressed bytes can hold
  Bytes claims = idx_file(0x08, {60000, 28, 28}, {});
  write_bytes(dir / "claims.gz", claims, Compression::Gzip);
  CHECK_THAT(error_of([&] { read_idx_images(dir / "claims.gz"); }), Contains("cannot inflate to more than"));
  // zeros from the first byte: the header is wrong and nothing past it is inflated
  write_bytes(dir / "zeros.gz", Bytes(size_t{64} << 20, 0), Compression::Gzip);
  CHECK_THAT(error_of([&] { read_idx_images(dir / "zeros.gz"); }), Contains("magic 0x00000000"));
  INFO("three bombs took " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s");
  // read_bytes takes a bound of its own
  write_bytes(dir / "plain.gz", Bytes(5000, 7), Compression::Gzip);
  CHECK(read_bytes(dir / "plain.gz").size() == 5000);
  CHECK_THAT(error_of([&] { read_bytes(dir / "plain.gz", "reader", 4096); }),
             Contains("reader") && Contains("inflates to more than 4096 bytes"));
  write_bytes(dir / "plain", Bytes(5000, 7));
  CHECK_THAT(error_of([&] { read_bytes(dir / "plain", "reader", 4096); }), Contains("has 5000 bytes, more than the 4096"));
  // a FIFO (which would block the reader for ever) and a directory: refused before any read
  const std::string fifo = dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THAT(error_of([&] { read_idx_images(fifo); }), Contains("is a FIFO") && Contains("regular files"));
  CHECK_THAT(error_of([&] { read_bytes(fifo); }), Contains("is a FIFO"));
  CHECK_THAT(error_of([&] { read_cifar10_file(fifo); }), Contains("read_cifar10_file") && Contains("is a FIFO"));
  CHECK_THAT(error_of([&] { read_idx_labels(dir.path.string()); }), Contains("is a directory"));
  CHECK_THAT(error_of([&] { read_idx_labels("/dev/zero"); }), Contains("is a character device"));
}

TEST_CASE("idx: concatenated gzip members read as one stream", "[data]") {
  TempDir dir;
  const Bytes a = images_file(2, 2, 2), b = {1, 2, 3, 4, 5};
  write_bytes(dir / "a", a, Compression::Gzip);
  write_bytes(dir / "b", b, Compression::Gzip);
  Bytes both = file_bytes(dir / "a");
  const Bytes gb = file_bytes(dir / "b");
  both.insert(both.end(), gb.begin(), gb.end());
  write_bytes(dir / "ab", both);
  Bytes want = a;
  want.insert(want.end(), b.begin(), b.end());
  CHECK(read_bytes(dir / "ab") == want);
  // a large stream (bigger than its compressed size by far) inflates in full
  const Bytes big(3'000'000, 7);
  write_bytes(dir / "big", big, Compression::Gzip);
  CHECK(fs::file_size(dir / "big") < 100'000);
  CHECK(read_bytes(dir / "big") == big);
}

// ------------------------------------------------------------------------------------------------
// Raw and gzip accept exactly the same contents

namespace {

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Bytes first(const Bytes& b, size_t n) { return Bytes(b.begin(), b.begin() + static_cast<long>(std::min(n, b.size()))); }
Bytes from(const Bytes& b, size_t n) { return Bytes(b.begin() + static_cast<long>(std::min(n, b.size())), b.end()); }

// One gzip member per part, concatenated (an empty part makes an empty member: header and trailer).
Bytes gzip_members(const TempDir& dir, const std::vector<Bytes>& parts) {
  Bytes out;
  for (const Bytes& p : parts) {
    write_bytes(dir / "member.gz", p, Compression::Gzip);
    out = cat(std::move(out), file_bytes(dir / "member.gz"));
  }
  return out;
}

// The ways of storing a content gzip'd, each of which must read as the content itself. `intact` is the
// size of the uncorrupted file: split there, what a corruption appended is a member of its own.
struct Framing {
  const char* name;
  std::vector<Bytes> (*parts)(const Bytes& content, size_t intact);
};
const Framing kFramings[] = {
    {"one member", [](const Bytes& c, size_t) { return std::vector<Bytes>{c}; }},
    {"two members split inside the header", [](const Bytes& c, size_t) { return std::vector<Bytes>{first(c, 3), from(c, 3)}; }},
    {"two members split at the intact size", [](const Bytes& c, size_t n) { return std::vector<Bytes>{first(c, n), from(c, n)}; }},
    {"an empty member after", [](const Bytes& c, size_t) { return std::vector<Bytes>{c, {}}; }},
    {"an empty member before", [](const Bytes& c, size_t) { return std::vector<Bytes>{{}, c}; }},
};

struct Verdict {
  bool accepted = false;
  std::string error;
  MnistSplit split;
};

Verdict load_verdict(const std::string& dir) {
  try {
    return {true, "", load_mnist_format(dir, Split::Train)};
  } catch (const hg::Error& e) {
    return {false, e.what(), {}};
  }
}

}  // namespace

TEST_CASE("idx: raw and gzip give the same verdict on the same content, in one member or several", "[data]") {
  TempDir dir;
  const std::string raw_dir = dir / "raw", gz_dir = dir / "gz";
  fs::create_directories(raw_dir);
  fs::create_directories(gz_dir);
  const std::string images = "train-images-idx3-ubyte", labels = "train-labels-idx1-ubyte";
  // images past the 1020 bytes the header pass inflates, so their verdicts come from the full pass
  const Bytes img = images_file(3, 20, 20), lab = labels_file({1, 2, 0});
  REQUIRE(img.size() > 4 + 4 * 255);
  const auto str = [](size_t v) { return std::to_string(v); };
  enum class Bad { None, Images, Labels, Both };
  struct Case {
    const char* name;
    Bytes images, labels;
    std::vector<std::string> expect;  // substrings of the error; none: the split loads
    Bad names;                        // the file(s) the error must name
    bool sized;                       // the error says the bad file's size: "has N bytes" / "inflates to"
  };
  const std::string img_dims = "header dims [3, 20, 20]", lab_dims = "header dims [3]";
  const Case cases[] = {
      {"intact", img, lab, {}, Bad::None, false},
      {"a byte appended to the labels", img, cat(lab, {0}),
       {lab_dims + " are inconsistent with its size: they account for " + str(lab.size()) +
        " bytes (the size its IDX header declares) but the file "},
       Bad::Labels, true},
      {"a byte appended to the images", cat(img, {7}), lab,
       {img_dims + " are inconsistent with its size: they account for " + str(img.size()) + " bytes"}, Bad::Images,
       true},
      {"an image appended, the header unchanged", cat(img, image_payload(400)), lab,
       {img_dims + " are inconsistent with its size: they account for " + str(img.size()) + " bytes"}, Bad::Images,
       true},
      {"the labels cut by a byte", img, first(lab, lab.size() - 1),
       {"is truncated: " + lab_dims + " need " + str(lab.size()) + " bytes but the file "}, Bad::Labels, true},
      {"the images cut by a row", first(img, img.size() - 20), lab,
       {"is truncated: " + img_dims + " need " + str(img.size()) + " bytes but the file "}, Bad::Images, true},
      {"the images cut inside the header", first(img, 10), lab,
       {"is truncated: its header declares 3 dims (" + str(4 + 4 * 3) + " bytes) but the file has only 10 bytes"},
       Bad::Images, false},
      {"the header declares a label more", img, idx_file(0x08, {4}, {1, 2, 0}),
       {"is truncated: header dims [4] need " + str(lab.size() + 1) + " bytes"}, Bad::Labels, true},
      {"the header declares a label fewer", img, idx_file(0x08, {2}, {1, 2, 0}),
       {"header dims [2] are inconsistent with its size: they account for " + str(lab.size() - 1) + " bytes"},
       Bad::Labels, true},
      {"zero items in both files", idx_file(0x08, {0, 20, 20}, {}), idx_file(0x08, {0}, {}),
       {"empty data set", "has 0 images", "has 0 labels"}, Bad::Both, false},
      {"zero labels for three images", img, idx_file(0x08, {0}, {}),
       {"count mismatch", "has 3 images", "has 0 labels"}, Bad::Both, false},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    // the error of one verdict names the right file(s), the values and the file's size as the path found it
    const auto check_error = [&](const Verdict& v, const std::string& d, const std::string& suffix) {
      for (const std::string& s : c.expect) CHECK_THAT(v.error, Contains(s));
      const std::string ipath = d + "/" + images + suffix + "'", lpath = d + "/" + labels + suffix + "'";
      if (c.names == Bad::Images || c.names == Bad::Both) CHECK_THAT(v.error, Contains(ipath));
      if (c.names == Bad::Labels || c.names == Bad::Both) CHECK_THAT(v.error, Contains(lpath));
      if (c.names == Bad::Images) CHECK_THAT(v.error, !Contains(lpath));
      if (c.names == Bad::Labels) CHECK_THAT(v.error, !Contains(ipath));
    };
    write_bytes(raw_dir + "/" + images, c.images);
    write_bytes(raw_dir + "/" + labels, c.labels);
    const Verdict raw = load_verdict(raw_dir);
    CHECK(raw.accepted == c.expect.empty());
    if (!raw.accepted) check_error(raw, raw_dir, "");
    const size_t bad_size = c.names == Bad::Images ? c.images.size() : c.labels.size();
    if (c.sized) CHECK_THAT(raw.error, Contains("the file has " + str(bad_size) + " bytes"));
    for (const Framing& fr : kFramings) {
      INFO(fr.name);
      write_bytes(gz_dir + "/" + images + ".gz", gzip_members(dir, fr.parts(c.images, img.size())));
      write_bytes(gz_dir + "/" + labels + ".gz", gzip_members(dir, fr.parts(c.labels, lab.size())));
      const Verdict gz = load_verdict(gz_dir);
      CHECK(gz.accepted == raw.accepted);
      if (raw.accepted && gz.accepted) {
        CHECK(gz.split.images.to_vector<float>() == raw.split.images.to_vector<float>());
        CHECK(values_i64(gz.split.labels) == values_i64(raw.split.labels));
      }
      if (!gz.accepted) check_error(gz, gz_dir, ".gz");
      if (c.sized) CHECK_THAT(gz.error, Contains("the file inflates to "));
    }
  }
}

TEST_CASE("idx: a gzip file is refused unless its members account for every byte", "[data]") {
  TempDir dir;
  // past the 1020 bytes the header pass inflates, so the full pass is the one that must refuse
  const Bytes img = images_file(4, 16, 16);
  REQUIRE(img.size() > 4 + 4 * 255);
  write_bytes(dir / "raw", img);
  REQUIRE(read_idx_images(dir / "raw").size(0) == 4);  // the content is fine: only its gzip framing is at fault
  const size_t cut = img.size() / 3;
  const Bytes one = gzip_members(dir, {img}), two = gzip_members(dir, {first(img, cut), from(img, cut)});
  const size_t end1 = gzip_members(dir, {first(img, cut)}).size();  // where the first of two members ends
  const auto isize = [](Bytes b, size_t member_end, uint32_t v) {  // a member's trailer ends with ISIZE
    for (size_t k = 0; k < 4; ++k) b[member_end - 4 + k] = static_cast<uint8_t>(v >> (8 * k));
    return b;
  };
  const auto flip = [](Bytes b, size_t at) {
    b[at] ^= 0x01;
    return b;
  };
  const auto str = [](size_t v) { return std::to_string(v); };
  struct Case {
    const char* name;
    Bytes file;
    std::vector<std::string> expect;
  };
  const std::string after = " bytes after the end of its gzip data (member ";
  const Case cases[] = {
      {"a zero byte after the member", cat(one, {0}), {"has 1" + after + "1 ends at compressed byte " + str(one.size())}},
      {"zero padding after the member", cat(one, Bytes(8, 0)), {"has 8" + after + "1 ends"}},
      {"text after the second member", cat(two, {'m', 'o', 'r', 'e'}), {"has 4" + after + "2 ends"}},
      {"half a gzip magic after the member", cat(one, {0x1f}), {"has 1" + after + "1 ends", "not another gzip member"}},
      {"ISIZE one more than the member", isize(one, one.size(), static_cast<uint32_t>(img.size() + 1)),
       {"gzip member 1 inflates to " + str(img.size()) + " bytes but its trailer (ISIZE) declares " +
        str(img.size() + 1)}},
      {"ISIZE of the first of two members zero", isize(two, end1, 0),
       {"gzip member 1 inflates to " + str(cut) + " bytes but its trailer (ISIZE) declares 0"}},
      {"ISIZE of the second member one less", isize(two, two.size(), static_cast<uint32_t>(img.size() - cut - 1)),
       {"gzip member 2 inflates to " + str(img.size() - cut) + " bytes but its trailer (ISIZE) declares " +
        str(img.size() - cut - 1)}},
      {"a CRC-32 bit flipped", flip(one, one.size() - 8), {"not a valid gzip stream", "incorrect data check"}},
      {"the trailer's last byte missing", first(one, one.size() - 1), {"truncated gzip stream"}},
      {"the second member cut short", first(two, two.size() - 10), {"truncated gzip stream"}},
      {"garbage where a second member starts", cat(one, {0x1f, 0x8b, 'x', 'y'}), {"not a valid gzip stream"}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const std::string path = dir / "images.gz";
    write_bytes(path, c.file);
    for (const std::string& err : {error_of([&] { read_idx_images(path); }), error_of([&] { read_bytes(path); })}) {
      for (const std::string& s : c.expect) CHECK_THAT(err, Contains(s));
      CHECK_THAT(err, Contains("'" + path + "'") && Contains("re-download"));
    }
  }
  // the framing the cases damage is itself fine
  write_bytes(dir / "one.gz", one);
  write_bytes(dir / "two.gz", two);
  CHECK(read_bytes(dir / "one.gz") == img);
  CHECK(read_bytes(dir / "two.gz") == img);
  CHECK(read_idx_images(dir / "two.gz").to_vector<float>() == read_idx_images(dir / "raw").to_vector<float>());
}

TEST_CASE("load_mnist_format: a split from a directory, with and without .gz", "[data]") {
  TempDir dir;
  write_bytes(dir / "train-images-idx3-ubyte.gz", images_file(5, 4, 4), Compression::Gzip);
  write_bytes(dir / "train-labels-idx1-ubyte", labels_file({3, 1, 4, 1, 5}));
  write_bytes(dir / "t10k-images-idx3-ubyte", images_file(2, 4, 4));
  write_bytes(dir / "t10k-labels-idx1-ubyte.gz", labels_file({9, 2}), Compression::Gzip);
  const MnistSplit train = load_mnist_format(dir.path.string(), Split::Train);
  CHECK(train.images.shape() == Shape{5, 1, 4, 4});
  CHECK(values_i64(train.labels) == std::vector<int64_t>{3, 1, 4, 1, 5});
  const MnistSplit test = load_mnist_format(dir.path.string(), Split::Test);
  CHECK(test.images.shape() == Shape{2, 1, 4, 4});
  CHECK(values_i64(test.labels) == std::vector<int64_t>{9, 2});
  // fewer classes than a label needs
  CHECK_THAT(error_of([&] { load_mnist_format(dir.path.string(), Split::Train, 5); }),
             Contains("label 5 at index 4") && Contains("out of range [0, 5)"));
  write_bytes(dir / "t10k-labels-idx1-ubyte", labels_file({9, 2, 2}));  // the raw file wins over .gz
  CHECK_THAT(error_of([&] { load_mnist_format(dir.path.string(), Split::Test); }),
             Contains("count mismatch") && Contains("2 images") && Contains("3 labels"));
  write_bytes(dir / "t10k-labels-idx1-ubyte", labels_file({9, 12}));
  CHECK_THAT(error_of([&] { load_mnist_format(dir.path.string(), Split::Test); }),
             Contains("label 12 at index 1") && Contains("out of range [0, 10)"));
  fs::remove(dir / "train-images-idx3-ubyte.gz");
  CHECK_THAT(error_of([&] { load_mnist_format(dir.path.string(), Split::Train); }),
             Contains("missing file") && Contains("train-images-idx3-ubyte"));
}

TEST_CASE("load_fashion_mnist: HG_FASHION_MNIST_DIR picks the dir, a missing file says how to get it", "[data]") {
  TempDir dir;
  {
    EnvGuard env("HG_FASHION_MNIST_DIR", nullptr);
    CHECK(fashion_mnist_dir() == "/usr/share/datasets/fashion-mnist");
  }
  EnvGuard env("HG_FASHION_MNIST_DIR", dir.path.c_str());
  CHECK(fashion_mnist_dir() == dir.path.string());
  const std::string msg = error_of([] { load_fashion_mnist(Split::Test); });
  CHECK_THAT(msg, Contains("missing file") && Contains(dir / "t10k-images-idx3-ubyte") &&
                      Contains("apt-get install dataset-fashion-mnist") && Contains("HG_FASHION_MNIST_DIR"));
  write_bytes(dir / "t10k-images-idx3-ubyte.gz", images_file(3, 28, 28), Compression::Gzip);
  write_bytes(dir / "t10k-labels-idx1-ubyte.gz", labels_file({0, 9, 4}), Compression::Gzip);
  const MnistSplit s = load_fashion_mnist(Split::Test);
  CHECK(s.images.shape() == Shape{3, 1, 28, 28});
  CHECK(values_i64(s.labels) == std::vector<int64_t>{0, 9, 4});
  CHECK(std::string(fashion_mnist_classes()[9]) == "Ankle boot");
}

TEST_CASE("load_fashion_mnist: the real data set when it is installed", "[data]") {
  const std::string dir = fashion_mnist_dir();
  const fs::path images = fs::path(dir) / "train-images-idx3-ubyte";
  if (!fs::exists(images) && !fs::exists(images.string() + ".gz")) {
    WARN("Fashion-MNIST not found in " << dir << " (apt-get install dataset-fashion-mnist or set "
         "HG_FASHION_MNIST_DIR): real-data checks not run; the synthetic [data] tests cover the readers");
    SUCCEED();
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const MnistSplit train = load_fashion_mnist(dir, Split::Train);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  WARN("Fashion-MNIST train (60000x784, gzip) loaded in " << secs << " s");
  const MnistSplit test = load_fashion_mnist(dir, Split::Test);
  CHECK(train.images.shape() == Shape{60000, 1, 28, 28});
  CHECK(test.images.shape() == Shape{10000, 1, 28, 28});
  for (const auto& [split, per_class] : {std::pair{&train, 6000}, std::pair{&test, 1000}}) {
    std::map<int64_t, int64_t> counts;
    for (int64_t l : values_i64(split->labels)) ++counts[l];
    CHECK(counts.size() == 10);
    for (const auto& [label, count] : counts) {
      INFO("label " << label);
      CHECK(label >= 0);
      CHECK(label <= 9);
      CHECK(count == per_class);
    }
  }
  // the normalisation constants are the statistics of the training pixels
  const float* p = train.images.data<float>();
  double sum = 0, sq = 0;
  float lo = 1, hi = 0;
  for (int64_t i = 0; i < train.images.numel(); ++i) {
    sum += p[i];
    sq += static_cast<double>(p[i]) * p[i];
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  const double n = static_cast<double>(train.images.numel()), mean = sum / n;
  CHECK(lo == 0.0f);
  CHECK(hi == 1.0f);
  CHECK(mean == Approx(kFashionMnistMean).margin(5e-4));
  CHECK(std::sqrt(sq / n - mean * mean) == Approx(kFashionMnistStd).margin(5e-4));
}

// ------------------------------------------------------------------------------------------------
// CIFAR-10

namespace {

// n records; record r of file f has label (f + r) % 10 and pixel i = (f * 7 + r * 3 + i) % 256.
Bytes cifar_file(int f, int n) {
  Bytes b;
  for (int r = 0; r < n; ++r) {
    b.push_back(static_cast<uint8_t>((f + r) % 10));
    for (int i = 0; i < 3072; ++i) b.push_back(static_cast<uint8_t>((f * 7 + r * 3 + i) % 256));
  }
  return b;
}

void check_cifar_records(const CifarSplit& s, int64_t at, int f, int n) {
  const std::vector<int64_t> labels = values_i64(s.labels);
  const float* img = s.images.data<float>();
  for (int r = 0; r < n; ++r) {
    INFO("file " << f << " record " << r);
    CHECK(labels[static_cast<size_t>(at + r)] == (f + r) % 10);
    for (int c = 0; c < 3; ++c)  // a few pixels per channel, at (c, y, x) of the CHW image
      for (int yx : {0, 33, 1023}) {
        const int i = c * 1024 + yx;
        CHECK(img[(at + r) * 3072 + i] == Approx(((f * 7 + r * 3 + i) % 256) / 255.0).margin(1e-7));
      }
  }
}

}  // namespace

TEST_CASE("load_cifar10: train batches and the test batch", "[data]") {
  TempDir dir;
  const fs::path nested = dir.path / "cifar-10-batches-bin";
  fs::create_directories(nested);
  const int counts[] = {2, 1, 3, 1, 2};
  for (int f = 1; f <= 5; ++f)
    write_bytes((nested / ("data_batch_" + std::to_string(f) + ".bin")).string(), cifar_file(f, counts[f - 1]),
                f == 3 ? Compression::Gzip : Compression::None);
  write_bytes((nested / "test_batch.bin").string(), cifar_file(0, 4));
  const CifarSplit train = load_cifar10(dir.path.string(), Split::Train);  // finds the nested folder
  CHECK(train.images.shape() == Shape{9, 3, 32, 32});
  CHECK(train.labels.shape() == Shape{9});
  int64_t at = 0;
  for (int f = 1; f <= 5; ++f) {
    check_cifar_records(train, at, f, counts[f - 1]);
    at += counts[f - 1];
  }
  const CifarSplit test = load_cifar10(nested.string(), Split::Test);
  CHECK(test.images.shape() == Shape{4, 3, 32, 32});
  check_cifar_records(test, 0, 0, 4);
}

TEST_CASE("load_cifar10: missing files, wrong sizes and bad labels are errors", "[data]") {
  TempDir dir;
  for (int f = 1; f <= 5; ++f)
    if (f != 3) write_bytes(dir / ("data_batch_" + std::to_string(f) + ".bin"), cifar_file(f, 1));
  CHECK_THAT(error_of([&] { load_cifar10(dir.path.string(), Split::Train); }),
             Contains("missing file") && Contains("data_batch_3.bin") && Contains("cifar-10-binary"));
  Bytes cut = cifar_file(0, 2);
  cut.pop_back();
  write_bytes(dir / "test_batch.bin", cut);
  CHECK_THAT(error_of([&] { load_cifar10(dir.path.string(), Split::Test); }),
             Contains(std::to_string(cut.size()) + " bytes") && Contains("multiple of 3073"));
  write_bytes(dir / "test_batch.bin", {});
  CHECK_THAT(error_of([&] { load_cifar10(dir.path.string(), Split::Test); }), Contains("multiple of 3073"));
  Bytes bad = cifar_file(0, 3);
  bad[2 * 3073] = 10;
  write_bytes(dir / "test_batch.bin", bad);
  CHECK_THAT(error_of([&] { read_cifar10_file(dir / "test_batch.bin"); }),
             Contains("label 10 of record 2") && Contains("out of range"));
}
