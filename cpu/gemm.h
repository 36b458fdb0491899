#pragma once
// The CPU GEMM (cpu/gemm.cpp), with the contract of GemmArgs in ops/kernels/gemm.h.
#include <string>

#include "ops/kernels/gemm.h"

namespace hg {

namespace cpu {
// Validates args (hg::Error naming the bad field) and runs on the CPU: oneDNN matmul for F32, and for
// BF16 where this CPU has BF16 dot products (primitives cached per shape/dtype/layout); F16, and BF16
// elsewhere, converted to F32, run as an F32 GEMM and rounded once; Eigen for F64 and for everything
// when built with HG_ONEDNN=OFF.
void gemm(const GemmArgs& args);
// The engine gemm() uses for a dtype on this CPU: "onednn:<isa>" (e.g. onednn:avx2,
// onednn:avx512_core_bf16), "eigen", or "widen:<conversion path>+<F32 engine>" (widen:f16c+onednn:avx2).
std::string gemm_engine(DType dt);
// How many tiles gemm() cuts this GEMM into on this CPU (pieces of C, each one thread's GEMM over the whole K,
// chosen by the shape alone so that every thread count gives the same bits): the most threads it can keep busy.
// Reads only the sizes, flags and dtype of args.
int64_t gemm_tiles(const GemmArgs& args);
// The slow, obviously correct reference (double accumulation) every fast path is tested against.
void gemm_reference(const GemmArgs& args);
}  // namespace cpu

}  // namespace hg
