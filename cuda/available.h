#pragma once
// Whether CUDA can be used, in every build (cuda/api/loader.cpp, in libhalfgrad); no CUDA headers. The
// first call loads the CUDA backend (libhalfgrad_cuda.so, next to libhalfgrad or at $HG_CUDA_LIBRARY) and
// with it the CUDA libraries; a program that never asks for CUDA loads none of them.
#include <string>

namespace hg::cuda {

// True when the backend loads and finds a GPU; never throws.
bool is_available();
int device_count();
// Why is_available() is false: the build has no CUDA backend, the backend or a CUDA library could not be
// loaded (the dynamic loader's message), or the runtime found no usable driver or device. "" when available.
std::string unavailable_reason();
// The CUDA runtime, driver, cuBLAS and cuDNN versions the backend runs with, or why there is no backend.
std::string version_info();

}  // namespace hg::cuda
