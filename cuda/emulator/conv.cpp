#include "cuda/emulator/conv.h"

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "cuda/emulator/runtime.h"

namespace hg::emu {
namespace {

using cuda::dnn::ConvDir;
using cuda::dnn::ConvPlanKey;

template <class T> using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// An input element; with tf32 an F32 one rounded to TF32 first.
template <class T>
acc_t<T> get(const void* p, bool tf32, int64_t i) {
  const T v = static_cast<const T*>(p)[i];
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) return to_float(v);
  else if constexpr (std::is_same_v<T, float>) return tf32 ? round_to_tf32(v) : v;
  else return v;
}

template <class T>
void put(const void* p, int64_t i, acc_t<T> v) {
  T* q = static_cast<T*>(const_cast<void*>(p)) + i;
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) *q = from_float<T>(v);
  else *q = v;
}

template <class T>
void run(const ConvPlanKey& k, bool tf32, const void* x, const void* w, const void* y) {
  using A = acc_t<T>;
  const int64_t G = k.groups, cg = k.c / G, kg = k.k / G;
  auto xi = [&](int64_t n, int64_t c, int64_t h, int64_t ww) { return ((n * k.c + c) * k.h + h) * k.w + ww; };
  auto wi = [&](int64_t o, int64_t c, int64_t r, int64_t s) { return ((o * cg + c) * k.r + r) * k.s + s; };
  auto yi = [&](int64_t n, int64_t o, int64_t h, int64_t ww) { return ((n * k.k + o) * k.oh + h) * k.ow + ww; };
  // the input row/column that output (oh, ow) reads through filter tap (r, s), or -1 outside
  auto in_h = [&](int64_t oh, int64_t r) { const int64_t h = oh * k.stride_h - k.pad_h + r * k.dil_h; return h >= 0 && h < k.h ? h : -1; };
  auto in_w = [&](int64_t ow, int64_t s) { const int64_t v = ow * k.stride_w - k.pad_w + s * k.dil_w; return v >= 0 && v < k.w ? v : -1; };
  switch (k.dir) {
    case ConvDir::Fprop:
      for (int64_t n = 0; n < k.n; ++n)
        for (int64_t o = 0; o < k.k; ++o)
          for (int64_t oh = 0; oh < k.oh; ++oh)
            for (int64_t ow = 0; ow < k.ow; ++ow) {
              A acc = 0;
              const int64_t g = o / kg;
              for (int64_t c = 0; c < cg; ++c)
                for (int64_t r = 0; r < k.r; ++r)
                  for (int64_t s = 0; s < k.s; ++s) {
                    const int64_t h = in_h(oh, r), v = in_w(ow, s);
                    if (h >= 0 && v >= 0) acc += get<T>(x, tf32, xi(n, g * cg + c, h, v)) * get<T>(w, tf32, wi(o, c, r, s));
                  }
              put<T>(y, yi(n, o, oh, ow), acc);
            }
      break;
    case ConvDir::Dgrad: {
      // dx[n, ci, h, v] = sum of dy[n, o, oh, ow] * w[o, c, r, s] over the (oh, ow, r, s) that read (h, v)
      const int64_t xn = k.n * k.c * k.h * k.w;
      std::vector<A> acc(static_cast<size_t>(xn), A(0));
      for (int64_t n = 0; n < k.n; ++n)
        for (int64_t o = 0; o < k.k; ++o)
          for (int64_t oh = 0; oh < k.oh; ++oh)
            for (int64_t ow = 0; ow < k.ow; ++ow) {
              const A dy = get<T>(y, tf32, yi(n, o, oh, ow));
              const int64_t g = o / kg;
              for (int64_t c = 0; c < cg; ++c)
                for (int64_t r = 0; r < k.r; ++r)
                  for (int64_t s = 0; s < k.s; ++s) {
                    const int64_t h = in_h(oh, r), v = in_w(ow, s);
                    if (h >= 0 && v >= 0) acc[static_cast<size_t>(xi(n, g * cg + c, h, v))] += dy * get<T>(w, tf32, wi(o, c, r, s));
                  }
            }
      for (int64_t i = 0; i < xn; ++i) put<T>(x, i, acc[static_cast<size_t>(i)]);
      break;
    }
    case ConvDir::Wgrad:
      for (int64_t o = 0; o < k.k; ++o)
        for (int64_t c = 0; c < cg; ++c)
          for (int64_t r = 0; r < k.r; ++r)
            for (int64_t s = 0; s < k.s; ++s) {
              A acc = 0;
              const int64_t g = o / kg;
              for (int64_t n = 0; n < k.n; ++n)
                for (int64_t oh = 0; oh < k.oh; ++oh)
                  for (int64_t ow = 0; ow < k.ow; ++ow) {
                    const int64_t h = in_h(oh, r), v = in_w(ow, s);
                    if (h >= 0 && v >= 0) acc += get<T>(y, tf32, yi(n, o, oh, ow)) * get<T>(x, tf32, xi(n, g * cg + c, h, v));
                  }
              put<T>(w, wi(o, c, r, s), acc);
            }
      break;
  }
}

}  // namespace

cudaError_t reference_conv(const ConvPlanKey& key, bool tensor_core, const void* x, const void* w, const void* y,
                           cudaStream_t s) {
  const int64_t xb = key.n * key.c * key.h * key.w, wb = key.k * (key.c / key.groups) * key.r * key.s,
                yb = key.n * key.k * key.oh * key.ow;
  const size_t es = dtype_size(key.dtype);
  const char* names[3] = {"x", "w", "y"};
  const void* ptrs[3] = {x, w, y};
  const int64_t elems[3] = {xb, wb, yb};
  for (int i = 0; i < 3; ++i) {
    if (!is_device_range(ptrs[i], static_cast<size_t>(elems[i]) * es)) {
      fail_sticky(std::string("cudnnBackendExecute (") + cuda::dnn::dir_name(key.dir) + "): " + names[i] +
                  " is not inside a live device allocation");
      return cudaErrorLaunchFailure;
    }
  }
  const bool tf32 = key.tf32 && tensor_core;
  return enqueue(s, "conv", [key, tf32, x, w, y] {
    switch (key.dtype) {
      case DType::F32: run<float>(key, tf32, x, w, y); break;
      case DType::F16: run<f16>(key, false, x, w, y); break;
      case DType::BF16: run<bf16>(key, false, x, w, y); break;
      case DType::F64: run<double>(key, false, x, w, y); break;
      default: fail_sticky("conv: dtype without a cuDNN type"); break;
    }
  });
}

}  // namespace hg::emu
