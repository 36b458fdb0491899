#pragma once
// IDX files (MNIST, Fashion-MNIST, KMNIST), raw or gzip-compressed (told apart by the gzip magic
// 1f 8b, never by the file name). Format (yann.lecun.com/exdb/mnist): a big-endian magic 0x0000TTNN
// (TT element type, NN number of dims), NN big-endian uint32 dims, then the elements, big-endian,
// row-major.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace hg::data {

// Per-pixel statistics of the Fashion-MNIST training images scaled to [0,1] (checked against the
// real files by the [data] tests): pass to normalize_ as {kFashionMnistMean}, {kFashionMnistStd}.
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

// Class names of Fashion-MNIST labels 0..9.
const std::array<const char*, 10>& fashion_mnist_classes();

// --- files --------------------------------------------------------------------------------------
// The bytes of a file, inflated when it starts with the gzip magic. Concatenated gzip members are all
// inflated and joined, as gzip -d and Python's gzip module do (`cat a.gz b.gz` is a valid file); each
// member's trailer (CRC-32 and ISIZE) must match its data, and nothing but members may follow the
// first: trailing bytes, zero padding included, are an error. Throws naming op and path when the file
// is missing, not a regular file, unreadable, truncated or corrupt, or holds (once inflated) more than
// max_bytes: inflating stops there, so a gzip bomb costs at most max_bytes of memory. The IDX readers
// bound it by the size their header declares.
std::vector<uint8_t> read_bytes(const std::string& path, const char* op = "read_bytes",
                                size_t max_bytes = size_t{1} << 32);

enum class Compression { None, Gzip };
// Writes bytes to path (gzip-compressed on request): for caching subsets and for the tests.
void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes,
                 Compression compression = Compression::None);

// --- IDX ----------------------------------------------------------------------------------------
// A file must be exactly its header plus the elements the header's dims declare, raw or gzip alike: a
// gzip file's members (see read_bytes) must together inflate to exactly that size, so raw and gzip
// accept the same contents, and the errors name the path, the declared size and the size found.
// Any IDX file as stored: elements of type u8, i8, i16 and f32 come back as F32, i32 and f64 as F64
// (both exact), shaped by the header dims.
Tensor read_idx(const std::string& path);
// An idx3 image file (magic 0x00000803, u8 (N,H,W)) as F32 (N,1,H,W) scaled to [0,1].
Tensor read_idx_images(const std::string& path);
// An idx1 label file (magic 0x00000801, u8 (N)) as I64 (N).
Tensor read_idx_labels(const std::string& path);

// One split of an MNIST-format data set from dir: train-{images-idx3,labels-idx1}-ubyte or
// t10k-..., each with or without .gz. Checks the image and label counts agree and are not zero (an
// empty split is an error naming both counts), and every label is in [0, num_classes).
MnistSplit load_mnist_format(const std::string& dir, Split split, int64_t num_classes = 10);

// $HG_FASHION_MNIST_DIR when set and non-empty, else /usr/share/datasets/fashion-mnist (Debian's
// dataset-fashion-mnist package).
std::string fashion_mnist_dir();
// Fashion-MNIST: 60000 train / 10000 test images (N,1,28,28) in [0,1] and labels 0..9. A missing
// file's error names the path and how to get the data.
MnistSplit load_fashion_mnist(const std::string& dir, Split split);
MnistSplit load_fashion_mnist(Split split);  // from fashion_mnist_dir()

}  // namespace hg::data
