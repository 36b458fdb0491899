#pragma once
// What this CPU offers, read once from CPUID, and the SIMD tier halfgrad's own loops run at.
//
// The library is built for the x86-64 baseline (no -march), so code that needs more is compiled per
// function with target attributes and chosen here at run time: the same binary runs on an AVX2-only
// EPYC, an AVX-512 Xeon and a Zen 4 with AVX512_BF16. HG_CONVERT_ISA caps the tier, so one machine
// can prove the lower paths:
//   HG_CONVERT_ISA=avx512 (no cap), =f16c (the AVX2 tier: F16C conversions, AVX2+FMA loops),
//   =scalar (baseline loops, scalar conversions).
// oneDNN has its own cap, DNNL_MAX_CPU_ISA (cpu/onednn.h reports what it runs).
#include <string>

namespace hg {

struct CpuFeatures {
  std::string model;  // CPUID brand string, e.g. "AMD EPYC 7B13 64-Core Processor"; "unknown" elsewhere
  // Each true only when the OS also saves the registers it needs (XGETBV), as __builtin_cpu_supports checks.
  bool avx2 = false, fma = false, f16c = false;
  bool avx512 = false;       // AVX512 F+BW+VL+DQ (every AVX-512 CPU since Skylake-SP)
  bool avx512_bf16 = false;  // VDPBF16PS, VCVTNEPS2BF16 (Cooper Lake, Sapphire Rapids, Zen 4)
  bool amx_bf16 = false;     // AMX tiles with BF16 (Sapphire Rapids and later)
};

// The features of this CPU (CPUID once; no cap applied).
const CpuFeatures& cpu_features();

// The tier of halfgrad's vectorised loops and conversions, highest first.
enum class SimdTier { AVX512, AVX2, Baseline };

// The tier in use: the best this CPU has, capped by HG_CONVERT_ISA (read once). AVX2 needs AVX2, FMA
// and F16C; AVX512 also needs the AVX2 tier's features.
SimdTier simd_tier();
const char* simd_tier_name(SimdTier t);  // "avx512", "avx2", "baseline"

// One line for benchmark and log headers: "AMD EPYC 7B13 (avx2 fma f16c; halfgrad loops: avx2)".
std::string cpu_summary();

}  // namespace hg
