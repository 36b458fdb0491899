// Fuzzing the file readers: load_safetensors and the IDX reader (raw and gzip). The contract under
// test: any bytes at all give a result or an hg::Error, never a crash, a hang, another exception type
// or a sanitizer report (CI builds this under ASan + UBSan too).
//
// Two ways to drive the same targets (fuzz_safetensors, fuzz_idx below):
//  * a seeded mutation driver (this file's main, built with any compiler): seeds made in-process by the
//    writers, structure-aware mutations (bit flips, interesting values, JSON tokens for the safetensors
//    header, IDX dims, truncation, splicing), a fixed PRNG seed and a time budget; it first replays
//    every regression file. Run: hg_fuzz safetensors|idx [--seconds S] [--seed N] [--regressions DIR]
//  * libFuzzer, when the whole build uses clang (HG_LIBFUZZER=ON): LLVMFuzzerTestOneInput is the entry.
// The IDX target is also differential: the same content raw and gzip'd must get the same verdict and
// the same tensor (TwinMismatch, a failure like a crash).
// The input currently running is kept in <work>/current-input (HG_FUZZ_WORK, default the temp folder):
// after a crash, copy it into tests/fuzz/regressions/<target>/ so that every later run replays it. A
// regression file named *.accepted.bin or *.refused.bin must also get that verdict.
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "data/idx.h"

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

namespace {

// Where the inputs are written (the readers take paths): $HG_FUZZ_WORK, else a folder of our own in
// the temp folder, removed after a clean run.
bool own_work_dir() { return std::getenv("HG_FUZZ_WORK") == nullptr; }

std::string work_dir() {
  static const std::string dir = [] {
    const fs::path d = own_work_dir() ? fs::temp_directory_path() / ("hg_fuzz_" + std::to_string(::getpid()))
                                      : fs::path(std::getenv("HG_FUZZ_WORK"));
    fs::create_directories(d);
    return d.string();
  }();
  return dir;
}

const std::string& input_path() {
  static const std::string p = work_dir() + "/current-input";
  return p;
}

void write_input(const uint8_t* data, size_t n) {
  std::ofstream f(input_path(), std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n));
}

Bytes read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// One run of a target: true when the reader accepted the bytes; an hg::Error is a refusal (fine);
// anything else escapes to the driver, which reports it and fails.
bool fuzz_safetensors(const uint8_t* data, size_t n) {
  write_input(data, n);
  try {
    const hg::SafetensorsFile f = hg::load_safetensors(input_path());
    for (const auto& [name, t] : f.tensors) (void)t.nbytes();
    return true;
  } catch (const hg::Error&) {
    return false;
  }
}

// Raw and gzip IDX files must accept exactly the same contents: a disagreement between an input and
// its twin (the same content stored the other way) fails the run like a crash.
struct TwinMismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct IdxOutcome {
  bool accepted = false;
  hg::Tensor t;
};

IdxOutcome read_idx_outcome(const std::string& path) {
  try {
    return {true, hg::data::read_idx(path)};
  } catch (const hg::Error&) {
    return {false, {}};
  }
}

bool same_tensor(const hg::Tensor& a, const hg::Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0);  // bits: NaN payloads too
}

bool is_gzip(const uint8_t* data, size_t n) { return n >= 2 && data[0] == 0x1f && data[1] == 0x8b; }

bool fuzz_idx(const uint8_t* data, size_t n) {
  write_input(data, n);
  const IdxOutcome in = read_idx_outcome(input_path());
  // the twin: a raw input gzip'd, or a valid gzip stream's content (up to 16 MiB) written raw; content
  // that itself starts with the gzip magic has no raw twin (the magic decides)
  const std::string twin = work_dir() + "/twin";
  if (!is_gzip(data, n)) {
    hg::data::write_bytes(twin, Bytes(data, data + n), hg::data::Compression::Gzip);
  } else {
    Bytes content;
    try {
      content = hg::data::read_bytes(input_path(), "fuzz twin", size_t{16} << 20);
    } catch (const hg::Error&) {
      return in.accepted;  // not a valid gzip stream (or a large one): no content to compare with
    }
    if (is_gzip(content.data(), content.size())) return in.accepted;
    hg::data::write_bytes(twin, content);
  }
  const IdxOutcome other = read_idx_outcome(twin);
  if (other.accepted != in.accepted || (in.accepted && !same_tensor(in.t, other.t)))
    throw TwinMismatch(std::string("the ") + (is_gzip(data, n) ? "gzip input" : "raw input") + " was " +
                       (in.accepted ? "accepted" : "refused") + " but the same content " +
                       (is_gzip(data, n) ? "raw" : "gzip'd") + " was " + (other.accepted ? "accepted" : "refused") +
                       (in.accepted && other.accepted ? " with other values" : ""));
  return in.accepted;
}

// ---- seeds: real files from the writers ----------------------------------------------------------

std::vector<Bytes> safetensors_seeds() {
  using namespace hg;
  const std::string p = work_dir() + "/seed.safetensors";
  std::vector<Bytes> seeds;
  const std::vector<std::map<std::string, Tensor>> sets = {
      {{"w", ones({2, 3})}},
      {{"a", arange(int64_t{6}, {.dtype = DType::I64})}, {"b", zeros({4}, {.dtype = DType::F16})}},
      {{"x", full({3}, 1.5, {.dtype = DType::BF16})}, {"y", full(Shape{}, 2.0, {.dtype = DType::F64})},
       {"z", zeros({0, 2})}},
  };
  for (const auto& s : sets) {
    save_safetensors(p, s);
    seeds.push_back(read_file(p));
  }
  save_safetensors(p, {{"m", ones({2})}}, {{"format", "pt"}, {"note", "caf\xC3\xA9"}});
  seeds.push_back(read_file(p));
  return seeds;
}

Bytes idx_bytes(uint8_t type, const std::vector<uint32_t>& dims, size_t elem) {
  Bytes b = {0, 0, type, static_cast<uint8_t>(dims.size())};
  size_t n = 1;
  for (uint32_t d : dims) {
    for (int k = 3; k >= 0; --k) b.push_back(static_cast<uint8_t>(d >> (8 * k)));
    n *= d;
  }
  for (size_t i = 0; i < n * elem; ++i) b.push_back(static_cast<uint8_t>(i * 37 + 11));
  return b;
}

std::vector<Bytes> idx_seeds() {
  std::vector<Bytes> seeds = {idx_bytes(0x08, {3, 4, 4}, 1), idx_bytes(0x08, {5}, 1), idx_bytes(0x0B, {2, 3}, 2),
                              idx_bytes(0x0C, {2, 2}, 4), idx_bytes(0x0D, {3}, 4), idx_bytes(0x0E, {2}, 8),
                              idx_bytes(0x09, {1, 1, 1, 1}, 1)};
  const std::string p = work_dir() + "/seed.idx.gz";
  for (size_t i = 0; i < 3; ++i) {  // gzip'd copies: the inflater is fuzzed too
    hg::data::write_bytes(p, seeds[i], hg::data::Compression::Gzip);
    seeds.push_back(read_file(p));
  }
  return seeds;
}

// ---- mutations -------------------------------------------------------------------------------------

const char* const kJsonTokens[] = {"\"", "{", "}", "[", "]", ",", ":", "0", "-1", "1e999", "4294967296",
                                   "18446744073709551616", "9007199254740993", "\\u0000", "\\ud800", "\\\"",
                                   "F16", "BF16", "I64", "F64", "U8", "dtype", "shape", "data_offsets",
                                   "__metadata__", "null", "true", "\xFF", "\xC0\xAF", "\xED\xA0\x80"};
const uint64_t kInteresting[] = {0, 1, 2, 7, 8, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF,
                                 0x100000000ull, 0x7FFFFFFFFFFFFFFFull, 0xFFFFFFFFFFFFFFFFull, 100000000};

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng_() % n); }

  Bytes mutate(const std::vector<Bytes>& seeds, bool json, bool idx) {
    Bytes b = seeds[below(seeds.size())];
    const size_t rounds = 1 + below(4);
    for (size_t r = 0; r < rounds; ++r) step(b, seeds, json, idx);
    return b;
  }

 private:
  void step(Bytes& b, const std::vector<Bytes>& seeds, bool json, bool idx) {
    switch (below(9)) {
      case 0:  // flip bits
        if (!b.empty()) b[below(b.size())] ^= static_cast<uint8_t>(1u << below(8));
        break;
      case 1:  // an interesting byte
        if (!b.empty()) b[below(b.size())] = static_cast<uint8_t>(kInteresting[below(std::size(kInteresting))]);
        break;
      case 2:  // truncate
        b.resize(below(b.size() + 1));
        break;
      case 3: {  // insert random bytes
        const size_t at = below(b.size() + 1), n = 1 + below(16);
        Bytes ins(n);
        for (auto& x : ins) x = static_cast<uint8_t>(rng_());
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), ins.begin(), ins.end());
        break;
      }
      case 4: {  // delete a range
        if (b.empty()) break;
        const size_t at = below(b.size()), n = 1 + below(std::min<size_t>(32, b.size() - at));
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + n));
        break;
      }
      case 5: {  // splice with another seed
        const Bytes& o = seeds[below(seeds.size())];
        const size_t cut = below(b.size() + 1), from = below(o.size() + 1);
        b.resize(cut);
        b.insert(b.end(), o.begin() + static_cast<std::ptrdiff_t>(from), o.end());
        break;
      }
      case 6: {  // an interesting little- (safetensors length) or big-endian (IDX dims) number
        if (b.size() < 8) break;
        const uint64_t v = kInteresting[below(std::size(kInteresting))];
        const size_t at = idx ? 4 * below(std::min<size_t>(b.size() / 4, 8)) : (below(2) ? 0 : below(b.size() - 7));
        const size_t width = idx ? 4 : 8;
        for (size_t k = 0; k < width && at + k < b.size(); ++k)
          b[at + k] = static_cast<uint8_t>(idx ? v >> (8 * (width - 1 - k)) : v >> (8 * k));
        break;
      }
      case 7: {  // a JSON token into the header (safetensors)
        if (!json || b.size() < 10) break;
        const size_t at = 8 + below(b.size() - 8);
        const std::string tok = kJsonTokens[below(std::size(kJsonTokens))];
        if (below(2)) b.erase(b.begin() + static_cast<std::ptrdiff_t>(at),
                              b.begin() + static_cast<std::ptrdiff_t>(std::min(b.size(), at + tok.size())));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), tok.begin(), tok.end());
        break;
      }
      default: {  // duplicate a range
        if (b.empty()) break;
        const size_t at = below(b.size()), n = 1 + below(std::min<size_t>(64, b.size() - at));
        const Bytes dup(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + n));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), dup.begin(), dup.end());
        break;
      }
    }
    if (b.size() > (1u << 20)) b.resize(1u << 20);
  }

  std::mt19937_64 rng_;
};

int usage() {
  std::fprintf(stderr, "usage: hg_fuzz safetensors|idx [--seconds S] [--seed N] [--regressions DIR]\n");
  return 2;
}

}  // namespace

#ifdef HG_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool idx = std::getenv("HG_FUZZ_TARGET") && std::strcmp(std::getenv("HG_FUZZ_TARGET"), "idx") == 0;
  idx ? fuzz_idx(data, size) : fuzz_safetensors(data, size);
  return 0;
}
#else
int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string target = argv[1];
  if (target != "safetensors" && target != "idx") return usage();
  double seconds = 10;
  uint64_t seed = 1;
  std::string regressions;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--seconds") seconds = std::stod(v);
    else if (f == "--seed") seed = std::stoull(v);
    else if (f == "--regressions") regressions = v;
    else return usage();
  }
  const bool idx = target == "idx";
  auto run = idx ? fuzz_idx : fuzz_safetensors;
  int64_t replayed = 0, runs = 0, accepted = 0;
  try {
    if (!regressions.empty() && fs::is_directory(regressions)) {
      for (const auto& e : fs::directory_iterator(regressions)) {
        if (!e.is_regular_file()) continue;
        const Bytes b = read_file(e.path().string());
        const std::string name = e.path().filename().string();
        const bool got = run(b.data(), b.size());
        std::printf("replay %s (%zu bytes): %s\n", name.c_str(), b.size(), got ? "accepted" : "refused");
        // a name ending in .accepted.bin or .refused.bin holds the reader to that verdict
        const auto ends_with = [&](const std::string& tail) {
          return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
        };
        if ((ends_with(".accepted.bin") && !got) || (ends_with(".refused.bin") && got)) {
          std::printf("fuzz %s: FAILED: regression file %s was %s, against the verdict its name states\n",
                      target.c_str(), name.c_str(), got ? "accepted" : "refused");
          return 1;
        }
        ++replayed;
      }
    }
    const std::vector<Bytes> seeds = idx ? idx_seeds() : safetensors_seeds();
    for (const Bytes& s : seeds) accepted += run(s.data(), s.size()) ? 1 : 0;  // every seed must load
    if (accepted != static_cast<int64_t>(seeds.size())) {
      std::printf("fuzz %s: FAILED: %lld of %zu seeds did not load\n", target.c_str(),
                  static_cast<long long>(seeds.size() - accepted), seeds.size());
      return 1;
    }
    accepted = 0;
    Mutator m(seed);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      for (int k = 0; k < 64; ++k, ++runs) {
        const Bytes b = m.mutate(seeds, !idx, idx);
        accepted += run(b.data(), b.size()) ? 1 : 0;
      }
    }
  } catch (const TwinMismatch& e) {
    std::printf("fuzz %s: FAILED after %lld runs: raw and gzip disagree: %s\nthe input is in %s: copy it into "
                "tests/fuzz/regressions/%s/\n",
                target.c_str(), static_cast<long long>(runs), e.what(), input_path().c_str(), target.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::printf("fuzz %s: FAILED after %lld runs: %s escaped (not an hg::Error): %s\nthe input is in %s: copy it "
                "into tests/fuzz/regressions/%s/\n",
                target.c_str(), static_cast<long long>(runs), typeid(e).name(), e.what(), input_path().c_str(),
                target.c_str());
    return 1;
  }
  std::printf("fuzz %s: %lld runs in %.0f s (seed %llu), %lld accepted, %lld refused with an hg::Error, "
              "%lld regression files replayed, no crash\n",
              target.c_str(), static_cast<long long>(runs), seconds, static_cast<unsigned long long>(seed),
              static_cast<long long>(accepted), static_cast<long long>(runs - accepted),
              static_cast<long long>(replayed));
  if (own_work_dir()) fs::remove_all(work_dir());
  return 0;
}
#endif
