// safetensors: round trips of every dtype and shape, the exact bytes of a known file, interop with
// Python's safetensors when it is installed, atomic writes, and a named error for each malformed file.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <sys/stat.h>
#include <sys/wait.h>

#include "test_util.h"
#include "core/atomic_file.h"
#include "core/rng.h"
#include "core/safetensors.h"

using namespace hg;
namespace fs = std::filesystem;

namespace {

using test::TempDir;

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int k = 0; k < 8; ++k) s[static_cast<size_t>(k)] = static_cast<char>((n >> (8 * k)) & 0xFF);
  return s;
}

// A file made by hand: the length prefix, the header text as given, then the buffer.
std::string craft(const std::string& header, const std::string& buffer) { return le64(header.size()) + header + buffer; }

std::string tensor_bytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.data_ptr()), t.nbytes());
}

// Random bits for every element, so the round trip covers NaN payloads, infinities and subnormals.
Tensor random_bits(Shape s, DType dt, std::mt19937_64& rng) {
  Tensor t = empty(std::move(s), {.dtype = dt});
  auto* p = static_cast<unsigned char*>(t.data_ptr());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(rng());
  return t;
}

}  // namespace

TEST_CASE("safetensors round trip keeps every dtype, shape, bit and the metadata", "[safetensors][cpu]") {
  TempDir tmp("roundtrip");
  std::mt19937_64 rng(42);
  std::map<std::string, Tensor> ts;
  const std::vector<Shape> shapes = {Shape{}, Shape{0}, Shape{3}, Shape{2, 3}, Shape{2, 0, 4}, Shape{1, 1, 1, 5}};
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64})
    for (size_t s = 0; s < shapes.size(); ++s)
      ts[std::string(dtype_name(dt)) + "." + std::to_string(s)] = random_bits(shapes[s], dt, rng);
  ts["weird \"name\"\\\n\t\x01 \xc3\xa9"] = random_bits(Shape{2}, DType::F16, rng);  // escapes and UTF-8
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "a \"quoted\"\\ line\nnext \xe2\x82\xac"}};
  const std::string path = tmp / "all.safetensors";
  save_safetensors(path, ts, meta);
  const SafetensorsFile f = load_safetensors(path);
  CHECK(f.metadata == meta);
  REQUIRE(f.tensors.size() == ts.size());
  for (const auto& [name, t] : ts) {
    INFO(name);
    REQUIRE(f.tensors.count(name));
    const Tensor& u = f.tensors.at(name);
    CHECK(u.dtype() == t.dtype());
    CHECK(u.shape() == t.shape());
    CHECK(u.device().is_cpu());
    CHECK(tensor_bytes(u) == tensor_bytes(t));
  }
  // Data starts 8-byte aligned and each tensor at a multiple of its element size (widest first).
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(k)]);
  CHECK(n % 8 == 0);
  CHECK(bytes.find("\"F16.3\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[") != std::string::npos);
}

TEST_CASE("safetensors writes the bytes the format specifies", "[safetensors][cpu]") {
  TempDir tmp("bytes");
  const std::string path = tmp / "one.safetensors";
  save_safetensors(path, {{"a", from_vector(std::vector<float>{1.0f, 2.0f}, {1, 2})}});
  std::string header = R"({"a":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  const std::string data("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);  // 1.0f, 2.0f little-endian
  CHECK(read_bytes(path) == craft(header, data));

  save_safetensors(path, {{"b", from_vector(std::vector<int64_t>{-2}, Shape{}, {.dtype = DType::I64})},
                          {"a", from_vector(std::vector<float>{0.5f}, {1}, {.dtype = DType::F16})}},
                   {{"k", "v"}});
  header = R"({"__metadata__":{"k":"v"},"a":{"dtype":"F16","shape":[1],"data_offsets":[8,10]},)"
           R"("b":{"dtype":"I64","shape":[],"data_offsets":[0,8]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  CHECK(read_bytes(path) == craft(header, std::string("\xfe\xff\xff\xff\xff\xff\xff\xff\x00\x38", 10)));
}

TEST_CASE("safetensors reads any valid layout: whitespace, key order, escapes, no padding", "[safetensors][cpu]") {
  TempDir tmp("reader");
  const std::string path = tmp / "hand.safetensors";
  const std::string header = " {\n \"z\" : {\"data_offsets\": [0, 2], \"shape\": [1], \"dtype\": \"BF16\"},\n"
                             " \"\\u00e9\\ud83d\\ude00\\/\": {\"shape\": [], \"dtype\": \"F64\", \"data_offsets\": [2, 10]},"
                             " \"__metadata__\": {\"x\": \"\\\"y\\\"\"} }\t";
  std::string buf("\x80\x3f", 2);  // bf16 1.0
  const double v = -3.25;
  buf.append(reinterpret_cast<const char*>(&v), 8);
  write_bytes(path, craft(header, buf));
  const SafetensorsFile f = load_safetensors(path);
  CHECK(f.metadata.at("x") == "\"y\"");
  REQUIRE(f.tensors.size() == 2);
  CHECK(f.tensors.at("z").to_vector<float>() == std::vector<float>{1.0f});
  const Tensor& e = f.tensors.at("\xc3\xa9\xf0\x9f\x98\x80/");
  CHECK(e.ndim() == 0);
  CHECK(e.item<double>() == v);
}

TEST_CASE("safetensors files are read by Python's safetensors and the other way round", "[safetensors][cpu]") {
  const char* env = std::getenv("HG_PYTHON");
  const std::string py = env ? env : "python3";
  if (std::system((py + " -c 'import safetensors' >/dev/null 2>&1").c_str()) != 0) {
    WARN("skipped: " << py << " with the safetensors package is not installed (pip install safetensors)");
    return;
  }
  TempDir tmp("interop");
  const std::string ours = tmp / "ours.safetensors", theirs = tmp / "theirs.safetensors", script = tmp / "check.py";
  save_safetensors(ours, {{"w", from_vector(std::vector<float>{1.5f, -2.0f, 3.0f, 0.25f, 8.0f, -0.5f}, {2, 3})},
                          {"h", from_vector(std::vector<float>{1.0f, -0.5f, 65504.0f}, {3}, {.dtype = DType::F16})},
                          {"i", from_vector(std::vector<int64_t>{7, -9}, {2}, {.dtype = DType::I64})}},
                   {{"format", "pt"}});
  // Uses the Rust core's serialize/deserialize (no numpy or torch needed); their calling convention
  // changed in safetensors 0.7 (TensorSpec with a pointer instead of a dict with bytes), so both.
  write_bytes(script, R"(import ctypes, struct, sys
import safetensors
from safetensors import deserialize, serialize
d = dict(deserialize(open(sys.argv[1], "rb").read()))
def dtype(v, short, long):
    assert v["dtype"] in (short, long), v
assert list(d["w"]["shape"]) == [2, 3], d["w"]
dtype(d["w"], "F32", "float32")
assert list(struct.unpack("<6f", bytes(d["w"]["data"]))) == [1.5, -2.0, 3.0, 0.25, 8.0, -0.5]
dtype(d["h"], "F16", "float16")
assert list(struct.unpack("<3e", bytes(d["h"]["data"]))) == [1.0, -0.5, 65504.0]
dtype(d["i"], "I64", "int64")
assert list(struct.unpack("<2q", bytes(d["i"]["data"]))) == [7, -9]
keep = []
def spec(dt, shape, data):
    if not hasattr(safetensors, "TensorSpec"):
        return {"dtype": dt, "shape": shape, "data": data}
    buf = ctypes.create_string_buffer(data, len(data))
    keep.append(buf)
    return safetensors.TensorSpec(dtype=dt, shape=shape, data_ptr=ctypes.addressof(buf), data_len=len(data))
out = serialize({"b": spec("bfloat16", [2], struct.pack("<2H", 0x3f80, 0xc000)),
                 "d": spec("float64", [1, 1], struct.pack("<d", 0.1))}, {"who": "python"})
open(sys.argv[2], "wb").write(out)
)");
  REQUIRE(std::system((py + " " + script + " " + ours + " " + theirs).c_str()) == 0);
  const SafetensorsFile f = load_safetensors(theirs);
  CHECK(f.metadata.at("who") == "python");
  CHECK(f.tensors.at("b").to_vector<float>() == std::vector<float>{1.0f, -2.0f});
  CHECK(f.tensors.at("d").shape() == Shape{1, 1});
  CHECK(f.tensors.at("d").item<double>() == 0.1);
}

TEST_CASE("save_safetensors is atomic: a failed write leaves the previous file and no temporary", "[safetensors][cpu]") {
  TempDir tmp("atomic");
  const std::string path = tmp / "ckpt.safetensors";
  save_safetensors(path, {{"a", from_vector(std::vector<float>{1, 2, 3}, {3})}});
  const std::string before = read_bytes(path);
  const std::map<std::string, Tensor> bigger = {{"a", zeros({100})}, {"b", ones({50})}};
  auto only_the_file = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(tmp.dir)) names.push_back(e.path().filename().string());
    CHECK(names == std::vector<std::string>{"ckpt.safetensors"});
  };
  for (int64_t fail_at : {0, 5, 8, 40, 300}) {
    INFO("fail after " << fail_at << " bytes");
    detail::safetensors_fail_after_bytes = fail_at;
    CHECK_THROWS_WITH(save_safetensors(path, bigger), Catch::Contains("previous file (if any) is unchanged"));
    detail::safetensors_fail_after_bytes = -1;
    CHECK(read_bytes(path) == before);
    only_the_file();
  }
  // The target is a directory: refused before anything is written.
  fs::create_directories(tmp.dir / "sub.safetensors" / "x");
  CHECK_THROWS_WITH(save_safetensors(tmp / "sub.safetensors", bigger), Catch::Contains("is a directory"));
  CHECK(fs::is_directory(tmp.dir / "sub.safetensors" / "x"));
  fs::remove_all(tmp.dir / "sub.safetensors");
  CHECK_THROWS_WITH(save_safetensors(tmp / "no/such/dir/x.safetensors", bigger), Catch::Contains("cannot create"));
  save_safetensors(path, bigger);  // and a good write replaces it
  CHECK(load_safetensors(path).tensors.size() == 2);
  only_the_file();
  CHECK_THROWS_WITH(save_safetensors(path, {{"__metadata__", zeros({1})}}), Catch::Contains("reserves"));
  CHECK_THROWS_WITH(save_safetensors(path, {{"u", Tensor()}}), Catch::Contains("'u' is undefined"));
}

TEST_CASE("load_safetensors names what is wrong with a malformed file", "[safetensors][cpu]") {
  TempDir tmp("bad");
  const std::string path = tmp / "bad.safetensors";
  auto expect = [&](const std::string& bytes, const std::string& what) {
    write_bytes(path, bytes);
    REQUIRE_THROWS_WITH(load_safetensors(path), Catch::Contains(what) && Catch::Contains(path));
  };
  const std::string f32x2 = std::string(8, '\0');
  auto one = [](const std::string& entry) { return "{\"a\":" + entry + "}"; };
  expect("abcd", "is 4 bytes; a safetensors file starts with an 8-byte header length");
  expect(le64(1000) + "{}", "header length is 1000 bytes but only 2 bytes follow");
  expect(le64(uint64_t{1} << 62) + "{}", "header length is 4611686018427387904");
  expect(craft("{\"a\" 1}", ""), "JSON syntax error in the header at byte 5: expected ':'");
  expect(craft(R"({"a":{"dtype":"F32",)", ""), "JSON syntax error in the header at byte 20");
  expect(craft("{} x", ""), "at byte 3: unexpected character after the header object");
  expect(craft(R"({"a\q":1})", ""), "unknown escape");
  expect(craft(std::string(100, '[') + std::string(100, ']'), ""), "nested too deeply");
  expect(craft("[1]", ""), "the header is not a JSON object");
  // names (and the whole header) must be UTF-8, as the reference reader requires
  const std::string entry = R"(":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  expect(craft("{\"a\xFF" + entry, f32x2), "not valid UTF-8 (byte 0xFF at header offset 3)");
  expect(craft("{\"\xC0\xAF" + entry, f32x2), "not valid UTF-8 (byte 0xC0");       // overlong '/'
  expect(craft("{\"\xED\xA0\x80" + entry, f32x2), "not valid UTF-8 (byte 0xED");  // a surrogate
  expect(craft("{\"\xF4\x90\x80\x80" + entry, f32x2), "not valid UTF-8");       // above U+10FFFF
  expect(craft("{\"ab\xE2\x82" + entry, f32x2), "not valid UTF-8 (byte 0xE2");    // cut short
  write_bytes(path, craft("{\"caf\xC3\xA9 \xF0\x9F\x98\x80" + entry, f32x2));  // é and an emoji: fine
  CHECK(load_safetensors(path).tensors.count("caf\xC3\xA9 \xF0\x9F\x98\x80") == 1);
  const std::string fifo = tmp / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  REQUIRE_THROWS_WITH(load_safetensors(fifo), Catch::Contains("is a FIFO") && Catch::Contains("regular files"));
  REQUIRE_THROWS_WITH(load_safetensors(tmp.dir.string()), Catch::Contains("is a directory"));
  expect(craft(one(R"({"dtype":"I32","shape":[2],"data_offsets":[0,8]})"), f32x2), "has dtype 'I32'");
  expect(craft(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})"), f32x2.substr(4)),
         "tensor 'a' of dtype F32 and shape [2] needs 8 bytes but its data_offsets [0, 4] hold 4");
  expect(craft(one(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), f32x2), "shape[0] is -2");
  expect(craft(one(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,8]})"), f32x2), "whole number");
  expect(craft(one(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})"), f32x2), "too large");
  expect(craft(one(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"), f32x2), "end before they begin");
  expect(craft(one(R"({"dtype":"F32","shape":[2],"data_offsets":[8,16]})"), f32x2), "past the end of the 8-byte");
  expect(craft(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"), f32x2), "must be [begin, end]");
  expect(craft(one(R"({"dtype":"F32","shape":[2]})"), f32x2), "tensor 'a' lacks \"data_offsets\"");
  expect(craft(one("[]"), f32x2), "tensor 'a' is not a JSON object");
  expect(craft(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
               std::string(12, '\0')),
         "tensors 'a' [0, 8] and 'b' [4, 12] overlap");
  expect(craft(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
               std::string(12, '\0')),
         "bytes [4, 8) of the data buffer belong to no tensor");
  expect(craft(one(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})"), f32x2), "bytes [4, 8) of the data buffer");
  expect(craft(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
               f32x2),
         "names 'a' twice");
  expect(craft(R"({"__metadata__":{"k":1}})", ""), "__metadata__ entry 'k' is not a string");
  REQUIRE_THROWS_WITH(load_safetensors(tmp / "missing.safetensors"), Catch::Contains("cannot open"));
}

TEST_CASE("load_safetensors survives every truncation and random corruption of a file", "[safetensors][cpu]") {
  TempDir tmp("fuzz");
  const std::string good = tmp / "good.safetensors", bad = tmp / "bad.safetensors";
  save_safetensors(good, {{"w", ones({2, 3})}, {"b", zeros({3}, {.dtype = DType::BF16})}}, {{"m", "x"}});
  const std::string bytes = read_bytes(good);
  for (size_t len = 0; len < bytes.size(); ++len) {
    write_bytes(bad, bytes.substr(0, len));
    INFO("truncated to " << len);
    CHECK_THROWS_AS(load_safetensors(bad), hg::Error);
  }
  std::mt19937 rng(3);
  int loaded = 0, rejected = 0;
  for (int trial = 0; trial < 500; ++trial) {
    std::string b = bytes;
    const size_t at = rng() % b.size();
    b[at] = static_cast<char>(rng());
    write_bytes(bad, b);
    try {
      load_safetensors(bad);
      ++loaded;  // a data byte, or a header change that is still consistent
    } catch (const hg::Error&) {
      ++rejected;
    }
  }
  CHECK(loaded + rejected == 500);
  CHECK(rejected > 0);
}

TEST_CASE("checkpoint writes replace only regular files, follow symlinks and clear dead writers' temp files",
          "[safetensors][cpu]") {
  TempDir tmp("targets");
  const std::map<std::string, Tensor> t = {{"a", ones({4})}};
  // a device node and a FIFO are refused before anything is written, and stay what they were
  CHECK_THROWS_WITH(save_safetensors("/dev/null", t), Catch::Contains("'/dev/null' is a character device") &&
                                                          Catch::Contains("only replaces regular files"));
  struct stat st {};
  REQUIRE(::stat("/dev/null", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  const std::string fifo = tmp / "pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(save_safetensors(fifo, t), Catch::Contains("is a FIFO"));
  CHECK(fs::is_fifo(fifo));
  // a symlink is followed: the file it leads to is replaced, the link stays a link
  const std::string real = tmp / "real.safetensors", link = tmp / "link.safetensors";
  save_safetensors(real, {{"old", zeros({1})}});
  fs::create_symlink("real.safetensors", link);  // relative, resolved against the link's folder
  save_safetensors(link, t);
  CHECK(fs::is_symlink(link));
  CHECK(load_safetensors(real).tensors.count("a") == 1);
  // a dangling link creates its target; a link to a FIFO is refused and names the link
  const std::string dangling = tmp / "dangling.safetensors";
  fs::create_symlink(tmp / "made.safetensors", dangling);
  save_safetensors(dangling, t);
  CHECK(fs::is_regular_file(tmp / "made.safetensors"));
  CHECK(fs::is_symlink(dangling));
  fs::create_symlink(fifo, tmp / "to_pipe");
  CHECK_THROWS_WITH(save_safetensors(tmp / "to_pipe", t), Catch::Contains("is a FIFO") &&
                                                             Catch::Contains("through the symlink"));
  // temp files of a writer that died are removed by the next save in the folder; a live one's stay
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  ::waitpid(child, nullptr, 0);  // its pid is free now
  const std::string dead = tmp / ("x.safetensors.hg-tmp." + std::to_string(child) + ".0");
  const std::string alive = tmp / ("y.safetensors.hg-tmp." + std::to_string(::getppid()) + ".3");
  const std::string unrelated = tmp / "notes.tmp.123";
  for (const std::string& f : {dead, alive, unrelated}) std::ofstream(f) << "partial";
  save_safetensors(tmp / "z.safetensors", t);
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(alive));
  CHECK(fs::exists(unrelated));
  // check_writable: the same refusals up front, and nothing left behind when it passes
  CHECK_THROWS_WITH(check_writable("--save", tmp.dir.string()), Catch::Contains("--save") &&
                                                                  Catch::Contains("is a directory"));
  CHECK_THROWS_WITH(check_writable("--save", tmp / "no/such/dir/c.safetensors"), Catch::Contains("cannot create"));
  const auto before = std::distance(fs::directory_iterator(tmp.dir), fs::directory_iterator());
  check_writable("--save", tmp / "fresh.safetensors");
  CHECK_FALSE(fs::exists(tmp / "fresh.safetensors"));
  CHECK(std::distance(fs::directory_iterator(tmp.dir), fs::directory_iterator()) == before);
}
