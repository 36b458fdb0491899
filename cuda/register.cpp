// The CUDA backend's entry point: ops/dispatch.cpp's ensure_backend() calls register_backend() once,
// the first time a CUDA tensor reaches a table (or .to(Device::cuda()) is called), so CPU-only
// programs never load the driver.
#include "core/allocator.h"
#include "core/error.h"
#include "cuda/blas.h"
#include "cuda/context.h"
#include "cuda/kernels/kernels.h"
#include "ops/dispatch.h"

namespace hg::cuda {

void register_backend();
void register_amp();  // cuda/kernels/amp.cu: the grad scaler's unscale-and-check (amp/scaler_math.h)
void register_dnn();  // cuda/dnn.cpp: the conv2d tables
void register_loss();  // cuda/kernels/loss.cu: cross-entropy, dropout and embedding tables
void register_optim();  // cuda/kernels/optim.cu: optimizer updates and clipping (optim/update.h)
void register_norm();  // cuda/kernels/norm.cu: batch_norm and layer_norm (ops/norm_math.h)
void register_pool();  // cuda/kernels/pool.cu: the pooling tables

void register_backend() {
  HG_CHECK(is_available(), "cuda: no CUDA device is available (", unavailable_reason(), "); use Device::cpu()");
  set_allocator(DeviceType::CUDA, &allocator());
  set_floating<EwKernel>(ew_kernels(), &elementwise<float>, &elementwise<f16>, &elementwise<bf16>,
                         &elementwise<double>);
  cast_kernels().set(DeviceType::CUDA, DType::F32, &cast);          // slot F32 = any dtype pair
  copy_kernels().set(DeviceType::CUDA, DType::F32, &strided_copy);  // slot F32 = any element size
  gemm_kernels().set_all_floating(DeviceType::CUDA, &gemm);
  set_floating<ReduceKernel>(reduce_kernels(), &reduce<float>, &reduce<f16>, &reduce<bf16>, &reduce<double>);
  set_floating<SoftmaxKernel>(softmax_kernels(), &softmax<float>, &softmax<f16>, &softmax<bf16>, &softmax<double>);
  set_floating<SoftmaxBackwardKernel>(softmax_backward_kernels(), &softmax_backward<float>, &softmax_backward<f16>,
                                      &softmax_backward<bf16>, &softmax_backward<double>);
  register_amp();
  register_dnn();
  register_loss();
  register_norm();
  register_optim();
  register_pool();
}

}  // namespace hg::cuda
