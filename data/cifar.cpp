#include "data/cifar.h"

#include <cstring>
#include <filesystem>

#include "data/idx.h"

namespace hg::data {
namespace {

constexpr int64_t kPixels = kCifarRecordBytes - 1;

std::vector<std::string> batch_names(Split split) {
  if (split == Split::Test) return {"test_batch.bin"};
  std::vector<std::string> names;
  for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  return names;
}

// The folder holding the batch files: dir itself, or the folder the archive unpacks to inside it.
std::filesystem::path batches_dir(const std::string& dir, const std::string& first) {
  const std::filesystem::path d(dir), nested = d / "cifar-10-batches-bin";
  return !std::filesystem::exists(d / first) && std::filesystem::exists(nested / first) ? nested : d;
}

// Checks a batch file's records and returns how many it holds.
int64_t check_records(const std::vector<uint8_t>& b, const std::string& path, const char* op) {
  HG_CHECK(!b.empty() && b.size() % kCifarRecordBytes == 0, op, ": '", path, "' has ", b.size(),
           " bytes, not a positive multiple of ", kCifarRecordBytes, " (1 label byte + 3072 pixels per record); ",
           "the file is truncated or not a CIFAR-10 binary batch");
  const int64_t n = static_cast<int64_t>(b.size()) / kCifarRecordBytes;
  for (int64_t r = 0; r < n; ++r) {
    const int label = b[static_cast<size_t>(r * kCifarRecordBytes)];
    HG_CHECK(label <= 9, op, ": label ", label, " of record ", r, " in '", path,
             "' is out of range [0, 10); is it a CIFAR-100 file (2 label bytes per record)?");
  }
  return n;
}

// Writes the records of one file at sample offset `at` of out.
void convert_records(const std::vector<uint8_t>& b, int64_t n, CifarSplit& out, int64_t at) {
  float* img = out.images.data<float>() + at * kPixels;
  int64_t* lab = out.labels.data<int64_t>() + at;
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* rec = b.data() + r * kCifarRecordBytes;
    lab[r] = rec[0];
    for (int64_t i = 0; i < kPixels; ++i) img[r * kPixels + i] = static_cast<float>(rec[1 + i]) / 255.0f;
  }
}

CifarSplit read_files(const std::vector<std::string>& paths, const char* op) {
  std::vector<std::vector<uint8_t>> files;
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (const std::string& p : paths) {
    files.push_back(read_bytes(p, op, size_t{60000} * kCifarRecordBytes));  // the whole train set in one file at most
    counts.push_back(check_records(files.back(), p, op));
    total += counts.back();
  }
  CifarSplit out{empty({total, 3, 32, 32}), empty({total}, {.dtype = DType::I64})};
  int64_t at = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    convert_records(files[f], counts[f], out, at);
    at += counts[f];
    files[f] = {};  // release each file's bytes as soon as it is converted
  }
  return out;
}

}  // namespace

CifarSplit read_cifar10_file(const std::string& path) { return read_files({path}, "read_cifar10_file"); }

CifarSplit load_cifar10(const std::string& dir, Split split) {
  const std::vector<std::string> names = batch_names(split);
  const std::filesystem::path d = batches_dir(dir, names.front());
  std::vector<std::string> paths;
  for (const std::string& name : names) {
    const std::filesystem::path p = d / name;
    HG_CHECK(std::filesystem::exists(p), "load_cifar10: missing file '", p.string(),
             "'; download the binary version (cifar-10-binary.tar.gz from "
             "https://www.cs.toronto.edu/~kriz/cifar.html), "
             "unpack it and pass the cifar-10-batches-bin directory");
    paths.push_back(p.string());
  }
  return read_files(paths, "load_cifar10");
}

}  // namespace hg::data
