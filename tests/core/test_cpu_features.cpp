// core/cpu_features.h: the SIMD tier never exceeds what the CPU has, and HG_CONVERT_ISA caps it (the
// isa_cap_* CTest runs repeat this suite under each cap).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "core/convert.h"
#include "core/cpu_features.h"

using namespace hg;

TEST_CASE("the SIMD tier is one this CPU can run, capped by HG_CONVERT_ISA", "[core][half]") {
  const CpuFeatures& f = cpu_features();
  const SimdTier t = simd_tier();
  INFO(cpu_summary());
  CHECK_FALSE(f.model.empty());
  CHECK(cpu_summary().find(f.model) == 0);
  CHECK(cpu_summary().find(std::string("halfgrad loops: ") + simd_tier_name(t)) != std::string::npos);
  if (t != SimdTier::Baseline) CHECK((f.avx2 && f.fma && f.f16c));
  if (t == SimdTier::AVX512) CHECK(f.avx512);
  if (f.avx512_bf16) CHECK(f.avx512);
  const char* cap = std::getenv("HG_CONVERT_ISA");
  const std::string want = cap ? cap : "";
  if (want == "scalar") CHECK(t == SimdTier::Baseline);
  if (want == "f16c") CHECK(t != SimdTier::AVX512);
  if (want.empty() && f.avx2 && f.fma && f.f16c) CHECK(t != SimdTier::Baseline);  // no cap: the best it has
  // the conversions follow the same cap
  if (t == SimdTier::AVX512) CHECK(std::string(convert_isa()) == "avx512");
  if (t == SimdTier::AVX2) CHECK(std::string(convert_isa()) == "f16c");
}
