#pragma once
// Counter-based Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
// Element i of a draw uses counter (offset + i/4, ...) and lane i%4, so the numbers depend only on
// (seed, offset, i): the same on any thread count and, later, on the GPU.
#include <cstdint>
#include <utility>
#include <vector>

#include "core/device.h"

#include "core/macros.h"

namespace hg {

struct Philox4x32 {
  static constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  static constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

  // Returns the 4 random words for counter (c0, c1, c2, c3) under key (k0, k1).
  HG_HD static void block(uint32_t c[4], uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; ++r) {
      const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
      const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
      const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
      const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
      const uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
      c[0] = n0;
      c[1] = lo1;
      c[2] = n2;
      c[3] = lo0;
      k0 += kW0;
      k1 += kW1;
    }
  }
  // The 4 words of block `idx` for a stream (seed, offset): counter = offset + idx (64-bit).
  HG_HD static void words(uint64_t seed, uint64_t offset, uint64_t idx, uint32_t out[4]) {
    const uint64_t ctr = offset + idx;
    out[0] = static_cast<uint32_t>(ctr);
    out[1] = static_cast<uint32_t>(ctr >> 32);
    out[2] = 0;
    out[3] = 0;
    block(out, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  }
  // f(i, word) for the elements of block b of a stream that draws one word per element (elements 4b .. 4b+3,
  // those below n): dropout's and stochastic rounding's draw, the same on the CPU and the GPU.
  template <class F>
  HG_HD static void for_block(uint64_t seed, uint64_t offset, int64_t b, int64_t n, F&& f) {
    uint32_t w[4];
    words(seed, offset, static_cast<uint64_t>(b), w);
    for (int l = 0; l < 4; ++l)
      if (4 * b + l < n) f(4 * b + l, w[l]);
  }
  // 24 random bits to a float in [0, 1).
  HG_HD static float uniform(uint32_t w) { return static_cast<float>(w >> 8) * (1.0f / 16777216.0f); }
  // 53 random bits (two words) to a double in [0, 1).
  HG_HD static double uniform_double(uint32_t a, uint32_t b) {
    const uint64_t v = (static_cast<uint64_t>(a) << 21) ^ (b >> 11);
    return static_cast<double>(v & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
  }
};

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // Philox blocks consumed so far
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x853c49e6748fea9bull) : state_{seed, 0} {}
  void manual_seed(uint64_t seed) { state_ = {seed, 0}; }
  uint64_t seed() const { return state_.seed; }
  GeneratorState state() const { return state_; }
  void set_state(GeneratorState s) { state_ = s; }
  // Reserves `blocks` Philox blocks and returns the offset of the first one.
  uint64_t advance(uint64_t blocks) {
    const uint64_t o = state_.offset;
    state_.offset += blocks;
    return o;
  }

 private:
  GeneratorState state_;
};

Generator& default_generator();
void manual_seed(uint64_t seed);

// Reserves `blocks` Philox blocks of g's stream and returns (seed, first offset) as one locked step:
// a generator may be shared by threads (the default one always is), and two draws at one offset
// would repeat their numbers. Every op that draws random numbers (rand, randn, dropout) uses it.
std::pair<uint64_t, uint64_t> reserve_blocks(Generator& g, uint64_t blocks);

// Where a kernel's draw lies in its Philox stream: (seed, offset), or, for a draw recorded by a CUDA graph
// capture, `offset` blocks past a base that the graph reads from device memory (state_at: {seed, base}),
// which every replay fills first (cuda/graph.h). So each replay draws new numbers, the ones the same eager
// step would have drawn.
struct PhiloxDraw {
  uint64_t seed = 0, offset = 0;
  const uint64_t* state_at = nullptr;
  HG_HD uint64_t seed_now() const { return state_at != nullptr ? state_at[0] : seed; }
  HG_HD uint64_t offset_now() const { return state_at != nullptr ? state_at[1] + offset : offset; }
};

// reserve_blocks for a kernel running on device `dev`: while a graph capture of that CUDA device is open on
// this thread, the blocks are counted against the capture (rng_capture below) and g's stream is not
// advanced; otherwise it is reserve_blocks.
PhiloxDraw reserve_draw(Generator& g, uint64_t blocks, Device dev);

// What cuda::Graph::capture (cuda/api/graph.cpp) does with the draws of the body it records.
namespace rng_capture {
inline constexpr int kMaxGenerators = 8;  // generators one captured body may draw from
struct Use {
  Generator* generator;  // must outlive the graph (the default generator always does)
  uint64_t blocks;       // what one replay draws from it
};
// Opens a session on this thread for a capture of CUDA device `device`: state_at is device memory of
// 2 * kMaxGenerators words, slot k = {seed, base offset} of the k-th generator drawn from.
void begin(int device, uint64_t* state_at);
// Closes it: the generators drawn from, in slot order.
std::vector<Use> end();
}  // namespace rng_capture

}  // namespace hg
