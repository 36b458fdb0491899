#pragma once
// What oneDNN does on this CPU, decided once per process for every CPU engine that uses it (GEMM,
// convolution) and reported by their engine names (cpu::gemm_engine, cpu::conv_engine).
#include <string>

#include "core/dtype.h"

#if HG_HAS_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace hg::cpu {

// The ISA oneDNN's kernels use here ("avx2", "avx512_core", "avx512_core_bf16", "avx512_core_amx",
// ...), after DNNL_MAX_CPU_ISA's cap; "none" in a build without oneDNN.
std::string onednn_isa();

// True when oneDNN multiplies dt without widening it first: F32 always (with oneDNN); BF16 only when
// oneDNN's ISA has BF16 dot products (AVX512_BF16 or AMX). Elsewhere oneDNN 2.6 has no BF16 matmul
// (AVX2) or emulates the BF16 dot product with F32 instructions (AVX-512 without BF16), so BF16 is
// widened to F32 and run by the F32 kernel: the same math, since a BF16 product is exact in F32.
bool onednn_native(DType dt);

// The name of an engine that widens F16/BF16 to F32 and runs `f32_engine`: "widen:<path>+<f32_engine>",
// where <path> is the conversion path in use (core/convert.h's convert_isa(): avx512, f16c, scalar).
std::string widened_engine(const std::string& f32_engine);

#if HG_HAS_ONEDNN
const dnnl::engine& onednn_engine();  // the CPU engine every halfgrad primitive is created on
#endif

}  // namespace hg::cpu
