#include "core/cpu_features.h"

#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define HG_X86 1
#endif

namespace hg {
namespace {

#if HG_X86
std::string brand_string() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000004u) return "unknown x86-64";
  char text[49] = {};
  for (unsigned leaf = 0; leaf < 3; ++leaf) {
    unsigned r[4] = {};
    __get_cpuid(0x80000002u + leaf, &r[0], &r[1], &r[2], &r[3]);
    std::memcpy(text + 16 * leaf, r, 16);
  }
  std::string s(text);
  const size_t first = s.find_first_not_of(' '), last = s.find_last_not_of(' ');
  return first == std::string::npos ? "unknown x86-64" : s.substr(first, last - first + 1);
}

CpuFeatures detect() {
  CpuFeatures f;
  f.model = brand_string();
  // __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 register state. F16C is
  // read from CPUID leaf 1 because clang < 15 rejects "f16c" there.
  __builtin_cpu_init();
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool leaf1 = __get_cpuid(1, &a, &b, &c, &d);  // F16C and OSXSAVE, in ECX
  f.f16c = __builtin_cpu_supports("avx") && leaf1 && (c & bit_F16C);
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
  // AMX-BF16 from CPUID (leaf 7, EDX bit 22) and the OS's tile state in XCR0 (bits 17, 18): clang < 15
  // rejects "amx-bf16" in __builtin_cpu_supports.
  unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0;
  bool tiles_saved = false;
  if (leaf1 && (c & bit_OSXSAVE)) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    tiles_saved = (lo & (3u << 17)) == (3u << 17);
  }
  f.amx_bf16 = tiles_saved && __get_cpuid_count(7, 0, &a7, &b7, &c7, &d7) && (d7 & (1u << 22));
  return f;
}
#else
CpuFeatures detect() { return {.model = "unknown (not x86)"}; }
#endif

SimdTier detect_tier() {
  const CpuFeatures& f = cpu_features();
  const char* cap = std::getenv("HG_CONVERT_ISA");
  const std::string_view want = cap ? cap : "";
  const bool avx2_tier = f.avx2 && f.fma && f.f16c;
  if (want != "scalar" && want != "f16c" && avx2_tier && f.avx512) return SimdTier::AVX512;
  if (want != "scalar" && avx2_tier) return SimdTier::AVX2;
  return SimdTier::Baseline;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();  // thread-safe initialisation, CPUID once
  return f;
}

SimdTier simd_tier() {
  static const SimdTier t = detect_tier();
  return t;
}

const char* simd_tier_name(SimdTier t) {
  switch (t) {
    case SimdTier::AVX512: return "avx512";
    case SimdTier::AVX2: return "avx2";
    default: return "baseline";
  }
}

std::string cpu_summary() {
  const CpuFeatures& f = cpu_features();
  std::string flags;
  for (auto [on, name] : {std::pair{f.avx2, "avx2"}, {f.fma, "fma"}, {f.f16c, "f16c"}, {f.avx512, "avx512"},
                          {f.avx512_bf16, "avx512_bf16"}, {f.amx_bf16, "amx_bf16"}})
    if (on) {
      if (!flags.empty()) flags += ' ';
      flags += name;
    }
  return f.model + " (" + (flags.empty() ? "no AVX" : flags) + "; halfgrad loops: " + simd_tier_name(simd_tier()) + ")";
}

}  // namespace hg
