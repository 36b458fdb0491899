// The emulated device's kernel executor: a grid runs block after block; a block's threads are fibers
// on the calling OS thread, each with its own stack, switched only where CUDA would make threads wait
// for each other (__syncthreads, warp shuffles). Between two __syncthreads each warp runs as far as
// it can before the next warp starts, its lanes one after another from barrier to barrier, in a fixed
// order: forward (warp 0, lane 0 first) or reverse (set_order, HG_EMU_ORDER=reverse). A kernel whose
// results differ between the two orders, or from the CPU's, has a race or a missing barrier.
//
// Barrier rules, stricter than the hardware: all threads of a block wait at the same __syncthreads
// before any goes on, a thread that exits while others wait there is an error (a divergent barrier),
// and a shuffle's mask must name every lane its warp has. A broken rule stops the kernel and makes the
// device's error sticky, as a fault does on a GPU.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/emulator/device.h"
#include "cuda/emulator/runtime.h"

// Switches stacks: saves the callee-saved registers, MXCSR and the x87 control word on the current
// stack, stores the stack pointer in *save, loads `next` and restores what the other side saved.
// A new fiber's stack is prepared (prepare_stack) so that the first switch "returns" into fiber_entry.
extern "C" void hg_emu_switch(void** save, void* next);
asm(R"(
  .text
  .p2align 4
  .globl hg_emu_switch
  .hidden hg_emu_switch
  .type hg_emu_switch,@function
hg_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size hg_emu_switch, .-hg_emu_switch
)");

namespace hg::emu {
namespace {

constexpr int kWarp = 32;
constexpr int kMaxThreads = 1024;
constexpr size_t kStackBytes = size_t{128} << 10;  // kernels keep little on the stack; ASan frames more
constexpr uint64_t kNoShuffle = ~uint64_t{0};

enum class Wait : uint8_t { Run, Block, Warp, Done };

struct Fiber {
  void* sp = nullptr;
  Wait wait = Wait::Run;
  ThreadCoords coords;
  unsigned mask = 0;  // the mask of the warp barrier it waits at
};

[[noreturn]] void fiber_entry();

// One per OS thread: the fibers' stacks (mapped once, a guard page below each), the block being run.
struct Scheduler {
  char* stacks = nullptr;
  size_t stride = 0;
  Fiber fibers[kMaxThreads];
  uint64_t exchange[kMaxThreads];  // shuffle values, one slot per thread
  void* host_sp = nullptr;
  int current = -1;
  int nthreads = 0;
  const std::function<void()>* body = nullptr;
  std::string failure;  // set when a rule is broken: the block stops

  Scheduler() {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    stride = kStackBytes + page;
    void* m = mmap(nullptr, stride * kMaxThreads, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) {
      std::fprintf(stderr, "halfgrad emulator: cannot map %zu bytes of fiber stacks\n", stride * kMaxThreads);
      std::abort();
    }
    stacks = static_cast<char*>(m);
    for (int i = 0; i < kMaxThreads; ++i) mprotect(stacks + i * stride, page, PROT_NONE);  // overflow faults
  }
  ~Scheduler() { munmap(stacks, stride * kMaxThreads); }

  // The first switch to fiber t enters fiber_entry with a call-aligned stack (rsp % 16 == 8).
  void prepare_stack(int t) {
    auto top = reinterpret_cast<uintptr_t>(stacks + t * stride + stride) & ~uintptr_t{15};
    auto* s = reinterpret_cast<uint64_t*>(top);
    *--s = 0;                                             // fiber_entry's return address: never used
    *--s = reinterpret_cast<uint64_t>(&fiber_entry);      // where hg_emu_switch's ret goes
    for (int r = 0; r < 6; ++r) *--s = 0;                 // rbp rbx r12 r13 r14 r15
    uint32_t mxcsr = 0;
    uint16_t fcw = 0;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fcw));
    *--s = static_cast<uint64_t>(mxcsr) | (static_cast<uint64_t>(fcw) << 32);
    fibers[t].sp = s;
  }

  void resume(int t) {
    current = t;
    hg_emu_switch(&host_sp, fibers[t].sp);
    current = -1;
  }

  // From inside fiber `current`: back to the scheduler until it is released.
  void yield() { hg_emu_switch(&fibers[current].sp, host_sp); }
};

thread_local Scheduler* t_sched = nullptr;
Order g_order = [] {
  const char* e = std::getenv("HG_EMU_ORDER");
  return e != nullptr && std::strcmp(e, "reverse") == 0 ? Order::Reverse : Order::Forward;
}();

Scheduler& sched() {
  if (t_sched == nullptr) t_sched = new Scheduler;  // lives as long as the thread's kernels may run
  return *t_sched;
}

Scheduler& in_kernel(const char* what) {
  Scheduler* s = t_sched;
  if (s == nullptr || s->current < 0) {
    std::fprintf(stderr, "halfgrad emulator: %s called outside a kernel\n", what);
    std::abort();
  }
  return *s;
}

[[noreturn]] void fiber_entry() {
  Scheduler& s = *t_sched;
  (*s.body)();
  s.fibers[s.current].wait = Wait::Done;
  s.yield();
  std::abort();  // a finished fiber is never resumed
}

std::string coords_str(const ThreadCoords& c) {
  return "block (" + std::to_string(c.block_idx.x) + "," + std::to_string(c.block_idx.y) + "," +
         std::to_string(c.block_idx.z) + ") thread (" + std::to_string(c.thread_idx.x) + "," +
         std::to_string(c.thread_idx.y) + "," + std::to_string(c.thread_idx.z) + ")";
}

// The lanes warp w has: 32, or fewer in a block whose size is not a multiple of 32.
unsigned warp_lanes_mask(int w, int nthreads) {
  const int lanes = nthreads - w * kWarp < kWarp ? nthreads - w * kWarp : kWarp;
  return lanes == kWarp ? 0xffffffffu : (1u << lanes) - 1u;
}

// Warp w's lanes go on past a shuffle once every lane waits at one, with the mask that names them
// all. Returns false with s.failure set when that can never happen (a lane has exited).
bool release_warp(Scheduler& s, int w, bool& released) {
  released = false;
  const int first = w * kWarp, last = first + kWarp < s.nthreads ? first + kWarp : s.nthreads;
  int waiting = 0;
  for (int t = first; t < last; ++t) waiting += s.fibers[t].wait == Wait::Warp;
  if (waiting == 0) return true;
  if (waiting != last - first) {
    for (int t = first; t < last; ++t) {
      if (s.fibers[t].wait == Wait::Done) {
        s.failure = "a warp shuffle waits for lane " + std::to_string(t - first) + " of warp " + std::to_string(w) +
                    ", which has exited (" + coords_str(s.fibers[t].coords) + ")";
        return false;
      }
    }
    s.failure = "lanes of warp " + std::to_string(w) + " wait at a shuffle while others wait at a __syncthreads";
    return false;
  }
  const unsigned want = warp_lanes_mask(w, s.nthreads);
  for (int t = first; t < last; ++t) {
    if (s.fibers[t].mask != want) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "a warp shuffle with mask 0x%08x in a warp whose lanes are 0x%08x (",
                    s.fibers[t].mask, want);
      s.failure = buf + coords_str(s.fibers[t].coords) + ")";
      return false;
    }
    s.fibers[t].wait = Wait::Run;
  }
  released = true;
  return true;
}

// Once every warp has stopped at a __syncthreads (or ended): releases the barrier. False when the
// block is done, or with s.failure set when some threads exited while others wait there.
bool release_block(Scheduler& s) {
  const int n = s.nthreads;
  int done = 0, at_block = 0;
  for (int t = 0; t < n; ++t) {
    done += s.fibers[t].wait == Wait::Done;
    at_block += s.fibers[t].wait == Wait::Block;
  }
  if (done == n) return false;
  if (at_block == n) {
    for (int t = 0; t < n; ++t) s.fibers[t].wait = Wait::Run;
    return true;
  }
  for (int t = 0; t < n; ++t) {
    if (s.fibers[t].wait == Wait::Done) {
      s.failure = "divergent __syncthreads: " + coords_str(s.fibers[t].coords) + " exited while " +
                  std::to_string(at_block) + " of the block's " + std::to_string(n) + " threads wait at the barrier";
      return false;
    }
  }
  s.failure = "threads of a block wait at different barriers: deadlock";
  return false;
}

// One block to its end; false (s.failure set) when it broke a rule. Between two __syncthreads each
// warp runs as far as it can (through its shuffles) before the next warp starts: the schedule that
// most often shows a warp reading shared memory another warp has not written yet, or has already
// overwritten.
bool run_block(Scheduler& s, dim3 grid, dim3 block, uint3 bid) {
  const int n = static_cast<int>(block.x * block.y * block.z);
  s.nthreads = n;
  for (int t = 0; t < n; ++t) {
    Fiber& f = s.fibers[t];
    f.wait = Wait::Run;
    f.mask = 0;
    f.coords.grid_dim = grid;
    f.coords.block_dim = block;
    f.coords.block_idx = bid;
    f.coords.thread_idx = uint3{static_cast<unsigned>(t) % block.x, static_cast<unsigned>(t) / block.x % block.y,
                                static_cast<unsigned>(t) / (block.x * block.y)};
    s.prepare_stack(t);
  }
  const bool reverse = g_order == Order::Reverse;
  const int warps = (n + kWarp - 1) / kWarp;
  for (;;) {
    for (int i = 0; i < warps; ++i) {
      const int w = reverse ? warps - 1 - i : i;
      const int first = w * kWarp, lanes = first + kWarp < n ? kWarp : n - first;
      for (bool released = true; released;) {
        for (int l = 0; l < lanes; ++l) {
          const int t = first + (reverse ? lanes - 1 - l : l);
          if (s.fibers[t].wait == Wait::Run) s.resume(t);
        }
        if (!release_warp(s, w, released)) return false;
      }
    }
    if (!release_block(s)) return s.failure.empty();
  }
}

}  // namespace

// ---- what kernels call (device.h) ----

const ThreadCoords& current_coords() {
  Scheduler& s = in_kernel("threadIdx/blockIdx");
  return s.fibers[s.current].coords;
}

void syncthreads() {
  Scheduler& s = in_kernel("__syncthreads");
  s.fibers[s.current].wait = Wait::Block;
  s.yield();
}

uint64_t shuffle_xor_bits(unsigned mask, uint64_t bits, int lane_mask, int width) {
  Scheduler& s = in_kernel("__shfl_xor_sync");
  const int t = s.current;
  s.exchange[t] = bits;
  s.fibers[t].mask = mask;
  s.fibers[t].wait = Wait::Warp;
  s.yield();  // every lane has written its value
  const int lane = t % kWarp, base = t - lane;
  // CUDA: the source lane is lane ^ lane_mask within the lane's group of `width`; outside it, its own.
  const int group = lane / width * width;
  const int src = lane ^ lane_mask;
  const uint64_t got = src >= group && src < group + width && base + src < s.nthreads ? s.exchange[base + src]
                                                                                      : bits;
  s.fibers[t].mask = mask;
  s.fibers[t].wait = Wait::Warp;
  s.yield();  // every lane has read: the slots may be written again
  return got;
}

// ---- the executor (runtime.h) ----

cudaError_t check_launch(dim3 grid, dim3 block, size_t shared_bytes) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  // Hopper's limits: 1024 threads per block, block dims 1024 x 1024 x 64, grid 2^31-1 x 65535 x 65535,
  // 48 KiB of static shared memory.
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0 || threads > kMaxThreads || block.x > 1024 ||
      block.y > 1024 || block.z > 64 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
    return cudaErrorInvalidConfiguration;
  }
  if (shared_bytes > (size_t{48} << 10)) return cudaErrorInvalidValue;
  return cudaSuccess;
}

void run_grid(dim3 grid, dim3 block, const std::function<void()>& body) {
  Scheduler& s = sched();
  if (s.current >= 0) {
    std::fprintf(stderr, "halfgrad emulator: a kernel launched from inside a kernel\n");
    std::abort();
  }
  s.body = &body;
  s.failure.clear();
  const uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
  const bool reverse = g_order == Order::Reverse;
  for (uint64_t i = 0; i < blocks; ++i) {
    const uint64_t b = reverse ? blocks - 1 - i : i;
    const uint3 bid{static_cast<unsigned>(b % grid.x), static_cast<unsigned>(b / grid.x % grid.y),
                    static_cast<unsigned>(b / (uint64_t{grid.x} * grid.y))};
    if (!run_block(s, grid, block, bid)) {
      fail_sticky("kernel <<<(" + std::to_string(grid.x) + "," + std::to_string(grid.y) + "," + std::to_string(grid.z) +
                  "), (" + std::to_string(block.x) + "," + std::to_string(block.y) + "," + std::to_string(block.z) +
                  ")>>>: " + s.failure);
      break;
    }
  }
  s.body = nullptr;
}

void set_order(Order o) { g_order = o; }
Order order() { return g_order; }

}  // namespace hg::emu
