#pragma once
// Bulk dtype conversion on the CPU. f16<->f32 uses F16C/AVX-512 vector code and f32->bf16 an
// integer round-to-nearest-even that the compiler vectorises (the AVX512_BF16 instruction flushes
// subnormals, so it is not used); the vector path is chosen at run time from CPUID, with a scalar
// fallback. All paths are bit-identical to the scalar functions in core/half.h.
#include <cstdint>

#include "core/dtype.h"
#include "core/half.h"

namespace hg {

void convert_f16_to_f32(const f16* src, float* dst, int64_t n);
void convert_f32_to_f16(const float* src, f16* dst, int64_t n);
void convert_bf16_to_f32(const bf16* src, float* dst, int64_t n);
void convert_f32_to_bf16(const float* src, bf16* dst, int64_t n);

// FP8 (dt F8E4M3 or F8E5M2) from and to F32: decoding is exact (a table of the 256 values); encoding rounds
// to nearest even, non-saturating (as .to(dtype)) or saturating to the largest finite value (core/fp8.h).
// The 256 F32 values of an FP8 dtype's bit patterns (index: the byte), built once.
const float* fp8_decode_table(DType dt);
void convert_f8_to_f32(const uint8_t* src, DType dt, float* dst, int64_t n);
void convert_f32_to_f8(const float* src, uint8_t* dst, DType dt, int64_t n, bool saturate = false);

// Any dtype to any dtype (single-threaded; callers split the range across threads).
// FP8 is non-saturating here, as PyTorch's .to(torch.float8_*); F64 and I64 reach FP8 and the 16-bit formats
// through F32 (PyTorch's double rounding). Float to I64 truncates toward zero like a C cast; NaN gives 0 and values beyond the int64 range
// saturate to its limits (a C cast would be undefined behaviour).
void convert_any(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);

// Which vector path the bulk conversions use on this CPU ("avx512", "f16c" or "scalar").
const char* convert_isa();

// Force the scalar fallback (for tests comparing the two paths); returns the previous setting.
bool convert_force_scalar(bool on);

}  // namespace hg
