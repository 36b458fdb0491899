#pragma once
// safetensors files (Hugging Face's format, read by torch, JAX, candle, ...):
//   8 bytes   N, the header length, a little-endian u64
//   N bytes   a JSON object: {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//             "__metadata__": {"<key>": "<value>", ...} (optional, strings only)}, padded with spaces
//   the rest  the data buffer: each tensor's bytes, contiguous, row-major, little-endian, at
//             [begin, end) counted from the buffer's start
// halfgrad reads and writes the dtypes it has: F32, F16, BF16, F64, I64, and FP8 as F8_E4M3 and F8_E5M2.
//
// Writes are atomic (core/atomic_file.h): the file goes to "<path>.hg-tmp.<pid>.<n>" beside path, is
// flushed to the disk, and is renamed over path, so a crash or an error leaves either the old file or
// the new one, never half of one. Only a regular file is replaced (a symlink is followed to one; a
// device, FIFO or directory is refused), and temp files of killed writers are removed by the next save. Loads check every byte count and offset before using it and throw hg::Error naming the file
// and the problem; a malformed file never crashes the reader or yields garbage.
#include <cstdint>
#include <map>
#include <string>

#include "core/tensor.h"

namespace hg {

// Tensors on any device are copied to the host for writing. Tensor data is laid out widest dtype
// first (then by name) so every tensor is aligned to its element size, as safetensors' own writer does;
// header entries are sorted by name. Throws hg::Error (and leaves any previous file at path intact)
// when the file cannot be written.
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;  // on the CPU
  std::map<std::string, std::string> metadata;
};

SafetensorsFile load_safetensors(const std::string& path);

namespace detail {
// Test-only: when >= 0, save_safetensors writes this many bytes of the temporary file and then fails
// as a full disk would. -1 (the default) turns it off.
inline int64_t safetensors_fail_after_bytes = -1;
}  // namespace detail

}  // namespace hg
