#pragma once
// CIFAR-10, binary version (www.cs.toronto.edu/~kriz/cifar.html, cifar-10-binary.tar.gz): each
// record is 1 label byte (0..9) then 3072 pixel bytes, the 1024 red, 1024 green and 1024 blue
// values of a 32x32 image in row-major order (so already CHW).
#include <array>
#include <string>

#include "data/dataset.h"

namespace hg::data {

// Per-channel (R, G, B) mean and std of the CIFAR-10 training images scaled to [0,1].
inline constexpr std::array<float, 3> kCifar10Mean = {0.4914f, 0.4822f, 0.4465f};
inline constexpr std::array<float, 3> kCifar10Std = {0.2470f, 0.2435f, 0.2616f};

inline constexpr int64_t kCifarRecordBytes = 1 + 3 * 32 * 32;

// Train: data_batch_1.bin .. data_batch_5.bin; Test: test_batch.bin, from dir or, when dir holds
// none of them, from dir/cifar-10-batches-bin (the folder the archive unpacks to). Files may be
// gzip-compressed. Images F32 (N,3,32,32) in [0,1], labels I64 (N) in 0..9.
CifarSplit load_cifar10(const std::string& dir, Split split);

// One batch file of any number of records.
CifarSplit read_cifar10_file(const std::string& path);

}  // namespace hg::data
