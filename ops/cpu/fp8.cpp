// CPU kernels of FP8 scaling (ops/kernels/fp8.h): the scaled cast with its amax in one pass, the scaled
// decode, the recipes' one-thread scale update, and MX block scaling's quantize and decode.
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/blocks.h"
#include "ops/cpu/register.h"
#include "ops/kernels/fp8.h"

namespace hg::cpu {
namespace {

constexpr int64_t kPiece = 16384;     // elements per piece: one partial amax each
constexpr int64_t kParallel = 65536;  // elements below which one thread is faster

// max |x| over [begin, end) as amax_fold folds it: the largest |x| bit pattern (NaN's are above inf's), an
// integer max the compiler vectorizes.
template <class T>
float piece_amax(const T* x, int64_t begin, int64_t end) {
  uint32_t m = 0;
  for (int64_t i = begin; i < end; ++i) {
    const uint32_t b = detail::float_bits(static_cast<float>(load(x[i]))) & 0x7fffffffu;
    m = b > m ? b : m;
  }
  return detail::bits_float(m);
}

template <class T, class Q>
void quantize_as(const Fp8QuantizeArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  Q* q = static_cast<Q*>(a.q);
  const float scale = a.scale != nullptr ? *a.scale : 1.0f;
  const int64_t pieces = num_pieces(a.n, kPiece);
  std::vector<float> partial(static_cast<size_t>(pieces), 0.0f);
  parallel_for(pieces, a.n > kParallel, [&](int64_t p) {
    const int64_t begin = p * kPiece, end = std::min(a.n, begin + kPiece);
    if (a.amax != nullptr) partial[static_cast<size_t>(p)] = piece_amax(x, begin, end);
    if (q != nullptr)
      for (int64_t i = begin; i < end; ++i) q[i] = fp8_encode<Q>(static_cast<float>(load(x[i])) * scale, a.saturate);
  });
  if (a.amax == nullptr) return;
  float m = *a.amax;
  for (const float v : partial) m = amax_fold(m, v);
  *a.amax = m;
}

template <class T>
void quantize_kernel(const Fp8QuantizeArgs& a) {
  if (a.q_dtype == DType::F8E4M3) quantize_as<T, f8e4m3>(a);
  else quantize_as<T, f8e5m2>(a);
}

template <class T>
void dequantize_kernel(const Fp8DequantizeArgs& a) {
  const auto* q = static_cast<const uint8_t*>(a.q);
  T* y = static_cast<T*>(a.y);
  const float s = *a.scale_inv;
  const bool e4m3 = a.q_dtype == DType::F8E4M3;
  parallel_for(num_pieces(a.n, kPiece), a.n > kParallel, [&](int64_t p) {
    const int64_t begin = p * kPiece, end = std::min(a.n, begin + kPiece);
    for (int64_t i = begin; i < end; ++i)
      y[i] = store<T>((e4m3 ? f8e4m3_bits_to_float(q[i]) : f8e5m2_bits_to_float(q[i])) * s);
  });
}

void scale_kernel(const Fp8ScaleArgs& a) { fp8_scale_update(a); }

void mx_quantize_kernel(const MxQuantizeArgs& a) {
  const int64_t per_row = num_pieces(a.cols, a.block), blocks = a.rows * per_row;
  parallel_for(blocks, a.rows * a.cols > kParallel, [&](int64_t i) {
    const int64_t r = i / per_row, c0 = i % per_row * a.block, len = std::min(a.block, a.cols - c0);
    const int64_t off = r * a.cols + c0;
    mx_quantize_block(a.x + off, len, a.q + off, a.scale + i, a.format, a.rule);
  });
}

template <class T>
void mx_dequantize_kernel(const MxDequantizeArgs& a) {
  const int64_t per_row = num_pieces(a.cols, a.block);
  T* y = static_cast<T*>(a.y);
  parallel_for(a.rows, a.rows * a.cols > kParallel, [&](int64_t r) {
    for (int64_t c = 0; c < a.cols; ++c) {
      const uint8_t b = a.q[r * a.cols + c];
      const float v = a.e4m3 ? f8e4m3_bits_to_float(b) : f8e5m2_bits_to_float(b);
      y[r * a.cols + c] = store<T>(v * a.scale[r * per_row + c / a.block]);
    }
  });
}

}  // namespace

void register_fp8_quantize(DispatchTable<Fp8QuantizeKernel>& t) {
  t.set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &quantize_kernel<T>; });
}
void register_fp8_dequantize(DispatchTable<Fp8DequantizeKernel>& t) {
  t.set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &dequantize_kernel<T>; });
}
void register_fp8_scale(DispatchTable<Fp8ScaleKernel>& t) { t.set(DeviceType::CPU, DType::F32, &scale_kernel); }
void register_mx_quantize(DispatchTable<MxQuantizeKernel>& t) { t.set(DeviceType::CPU, DType::F32, &mx_quantize_kernel); }
void register_mx_dequantize(DispatchTable<MxDequantizeKernel>& t) {
  t.set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &mx_dequantize_kernel<T>; });
}

}  // namespace hg::cpu
