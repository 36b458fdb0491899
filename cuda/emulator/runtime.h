#pragma once
// The emulated CUDA device's internal interface (HG_CUDA=EMULATE builds only): what the emulated
// runtime (runtime.cpp), the cuBLAS stand-in (cublas.cpp) and the kernel executor (executor.cpp) share.
// Nothing outside cuda/emulator/ and cuda/launch.h includes it.
//
// The device is one emulated Hopper GPU (the properties of the H200 measured on a lent machine) whose
// memory is host memory. Work enqueued on a stream runs at once,
// on the calling thread, in the order it was enqueued (an in-order stream whose host never gets ahead
// of it is a legal schedule); while a stream is being captured it is recorded into the graph instead
// and runs at each cudaGraphLaunch.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace hg::emu {

// Runs `work` in s's order: now, or recorded when s is capturing. Returns cudaSuccess, or the sticky
// error of an earlier failed kernel (then `work` does not run). `what` names the work in errors.
cudaError_t enqueue(cudaStream_t s, const char* what, std::function<void()> work);

// Holds s: the work enqueued on s from now on waits until ready() returns true (polled in order with s's other held
// work, by cudaEventQuery, cudaStreamSynchronize and the enqueues behind it; an event recorded on s completes, and a
// stream told to wait for it goes on, only then). For work that waits on other processes (cuda/emulator/nccl.cpp).
// Refused during a capture (cudaErrorStreamCaptureUnsupported). Call from the thread that uses s.
cudaError_t hold(cudaStream_t s, std::function<bool()> ready);

// Whether [p, p + bytes) lies inside one live allocation of the emulated device (bytes 0: p is inside
// or one past the end of one).
bool is_device_range(const void* p, size_t bytes);

// Whether [p, p + bytes) lies inside one block of pinned host memory (cudaHostAlloc).
bool is_pinned(const void* p, size_t bytes);

// How many times the host has waited for a whole stream or the device (cudaStreamSynchronize,
// cudaDeviceSynchronize) in this process: tests count the hidden syncs of a piece of work with it.
long stream_syncs();

// Makes the device's error sticky (as a fault inside a kernel does on a GPU) and prints `why` on
// stderr: every later runtime call returns cudaErrorLaunchFailure.
void fail_sticky(const std::string& why);

// For the emulator's own tests only: forgets a sticky fault they caused on purpose (a real GPU needs a
// new process).
void clear_fault();

// Whether a stream is being captured right now (any stream: halfgrad captures in global mode).
bool capturing();

// ---- shared by the emulated cuBLAS and cuBLASLt (cublas.cpp) ----
// "0x7f..." for a pointer, in messages.
std::string hex(const void* p);
// Whether batch b's [p + b*stride, + extent) elements of `elem` bytes lie in emulated device memory for
// every b; on failure the device faults (fail_sticky) with a message naming the call `fn`, the matrix,
// the pointer and the extent (`extent_formula` says how it was computed).
bool check_matrix(const char* fn, const char* name, const void* p, size_t elem, int64_t extent,
                  const char* extent_formula, long long stride, int64_t batch);

// ---- the kernel executor (executor.cpp) ----
// Runs the grid: every block, every thread of a block as a fiber, `body` once per thread. Checks the
// launch configuration as the driver does (returns cudaErrorInvalidConfiguration and runs nothing).
cudaError_t check_launch(dim3 grid, dim3 block, size_t shared_bytes);
void run_grid(dim3 grid, dim3 block, const std::function<void()>& body);

// Thread and block order inside the executor: forward (thread 0 first) or reverse. A kernel whose
// results differ between the two has a race or a missing barrier. Default: HG_EMU_ORDER, else forward.
enum class Order { Forward, Reverse };
void set_order(Order o);
Order order();

}  // namespace hg::emu
