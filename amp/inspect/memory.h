#pragma once
// MemoryLedger: the bytes one device's allocator holds, split by role and dtype -- parameters (F32 or
// F16/BF16), FP32 masters, gradients, optimizer state, module buffers, the autocast cast cache, the
// activations a forward pass keeps for backward, and the rest -- to see where mixed precision saves memory
// (activations, halved) and where it does not (F32 parameters and gradients, the weight copies in the
// cast cache, masters and moments). Micikevicius et al. 2018, sec. 1: "halving memory" is about
// activations; the weights' footprint grows with masters.
//
//   hg::amp::inspect::MemoryLedger ledger({.model = &net, .optimizer = &opt, .device = dev});
//   ledger.begin_forward();                            // what lives now is not an activation
//   {
//     hg::amp::Autocast ac(dev, hg::DType::BF16);
//     loss = hg::mse_loss(net.forward(x), target);
//     after_forward = ledger.snapshot("BF16 forward");  // inside the region: the cache still holds its casts
//   }
//   loss.backward();
//   after_backward = ledger.snapshot("BF16 backward");  // gradients; the graph's activations are gone
//   hg::amp::inspect::print_ledgers(std::cout, {f32_forward, after_forward});  // side by side, with ratios
//
// How each role is counted (a storage shared by two tensors is counted once, under its first role):
//  * params / grads: the parameters of the model and of the optimizer, and their .grad(), by dtype.
//  * masters: Optimizer::master(i) (F32 copies of F16/BF16 parameters, made at their first step).
//  * optimizer_state: Optimizer::state_buffers(i) (momentum, Adam's moments) and the device step counters
//    of the scaler's device path (8-byte I64 tensors); host step counters are integers, not tensor memory,
//    and are only counted (step_counters).
//  * buffers: the model's buffers (BatchNorm running statistics).
//  * extra_state: the modules' extra state (nn::Module::extra_state): an FP8 Linear's amax histories, scales
//    and inverse scales (F32, 3 roles x (history length + 2) values per layer under delayed scaling).
//  * cast_cache: amp::cast_cache_bytes(dtype) -- the process-wide cache, so use one device at a time.
//  * activations: bytes that are in none of the roles above and were allocated since begin_forward() and
//    are still alive: what the graph saved for backward, plus the output and the loss. After the autocast
//    region exits the cache is cleared, and the weight casts the graph saved count here instead. Zero
//    without begin_forward(). The allocator's counts are the process's, so tensors another thread allocates
//    in between (a DataLoader's next batch, gathered on its prefetch thread by default) count here too: make the
//    loader with .prefetch = false for an inspected step, as the examples' --inspect does.
//  * other: the rest of memory::allocated(device, dtype) (inputs, targets, tensors the caller holds), so
//    that the rows add up to what the allocator holds.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace hg::amp::inspect {

enum class Role : uint8_t { Params, Masters, Grads, OptimizerState, Buffers, ExtraState, CastCache, Activations, Other };
inline constexpr int kNumRoles = 9;
// "params", "masters", "grads", "optimizer_state", "buffers", "extra_state", "cast_cache", "activations", "other"
const char* role_name(Role r);

// What a ledger counts. The model and the optimizer are optional (either gives parameters and gradients)
// and must outlive the ledger; every parameter must live on `device`.
struct LedgerSources {
  const nn::Module* model = nullptr;
  const optim::Optimizer* optimizer = nullptr;
  Device device = Device::cpu();
};

// One snapshot: bytes by role and dtype at one moment.
struct LedgerSnapshot {
  std::string label;
  Device device = Device::cpu();
  std::array<std::array<int64_t, kNumDTypes>, kNumRoles> bytes{};  // [role][dtype]
  int64_t allocated = 0;      // memory::allocated(device) when taken; equals total()
  int64_t peak = 0;           // memory::peak_allocated(device) when taken (since the last reset_peak)
  int64_t step_counters = 0;  // parameters with an optimizer step count (host integers, no tensor bytes)

  int64_t at(Role r, DType dt) const { return bytes[static_cast<size_t>(r)][static_cast<size_t>(dt)]; }
  int64_t role_bytes(Role r) const;    // over dtypes
  int64_t dtype_bytes(DType dt) const;  // over roles
  int64_t total() const;               // every row
  // A table: role, dtype, size, share of the total; then the total and the peak.
  void print(std::ostream& os) const;
};

class MemoryLedger {
 public:
  // Checks that every parameter of the model and the optimizer lives on s.device.
  explicit MemoryLedger(LedgerSources s);

  // Marks the start of a forward pass: bytes held now that belong to no role stay "other"; those
  // allocated later and still alive at a snapshot are "activations". Call again before each forward.
  void begin_forward();
  bool forward_begun() const { return mark_.has_value(); }
  // The ledger now. Throws if a role holds more bytes than the allocator (a cast cache holding casts of
  // another device's tensors).
  LedgerSnapshot snapshot(std::string label) const;

  const LedgerSources& sources() const { return sources_; }

 private:
  using ByDType = std::array<int64_t, kNumDTypes>;
  ByDType unaccounted(LedgerSnapshot& s) const;  // fills s's roles except activations/other
  LedgerSources sources_;
  std::optional<ByDType> mark_;  // bytes in no role at begin_forward()
};

// Ledgers side by side: one column per ledger, then one ratio column per ledger after the first (its
// bytes over the first's; "-" where the first has none), rows where any ledger has bytes, then the
// totals and peaks. At least one ledger.
void print_ledgers(std::ostream& os, const std::vector<LedgerSnapshot>& ledgers);
// label,device,role,dtype,bytes: one row per nonzero (role, dtype), then role "total" and "peak" (dtype
// "all"). Written atomically.
void write_ledgers_csv(const std::string& path, const std::vector<LedgerSnapshot>& ledgers);
// [{"label", "device", "allocated", "peak", "total", "step_counters", "roles": {role: bytes},
//   "rows": [{"role", "dtype", "bytes"}]}]. Written atomically.
void write_ledgers_json(const std::string& path, const std::vector<LedgerSnapshot>& ledgers);

// "512 B", "1.50 KiB", "4.00 MiB", "1.25 GiB".
std::string format_bytes(int64_t bytes);

}  // namespace hg::amp::inspect
