#pragma once
// torch.autocast for halfgrad: a thread-local, nestable RAII guard per device type, and the op-boundary
// hook OpCast that public ops call before they check, dispatch and record (docs/ARCHITECTURE.md, "Floors":
// this folder sits below ops, which call it, and knows nothing above them). OpCast also reports each call to
// the op observers of ops/autocast/observe.h.
//
//   { amp::Autocast ac(DeviceType::CPU);             // BF16 on CPU, F16 on CUDA by default
//     Tensor y = hg::linear(x, w, b);                // Lower: x, w, b cast to BF16; y is BF16
//     Tensor l = hg::cross_entropy(y, t); }          // Fp32: y cast to F32; l is F32
//   l.backward();                                    // outside the region, as torch recommends
//
// The casts are Tensor::to(DType), recorded by autograd, so backward runs in the dtypes forward chose and
// an F32 parameter receives an F32 gradient. Policies (op -> Lower/Fp32/Promote/Keep) live in ops/autocast/policy.h.
//
// Backward under an enabled region: backward functions call public ops (sum for a bias gradient, ...)
// that would be cast again, and the engine rejects gradients whose dtype changed. Call backward after the
// region exits (torch's advice too), or hold an ExcludeGuard around it.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "ops/autocast/observe.h"
#include "ops/autocast/policy.h"

namespace hg::amp {

struct AutocastOptions {
  bool enabled = true;        // false: an inner region that runs ops in their own dtypes
  bool cache_enabled = true;  // cache casts of F32 leaf weights that require grad (see cast cache below)
};

// Sets the autocast state of one device type for this thread; restores the previous state (enabled, dtype,
// cache flag) on exit, also when an exception leaves the scope. The outermost guard's exit (nesting back to
// 0 on this thread) clears the cast cache. dtype F16 or BF16; default F16 on CUDA, BF16 on CPU. Any other
// dtype (F32, F64, I64) does what torch.autocast does: a warning on stderr (once per device type and dtype,
// "... Disabling autocast") and the region runs as enabled=false; the device's autocast dtype is unchanged.
class Autocast {
 public:
  explicit Autocast(DeviceType dev, std::optional<DType> dtype = std::nullopt, AutocastOptions o = {});
  explicit Autocast(Device dev, std::optional<DType> dtype = std::nullopt, AutocastOptions o = {})
      : Autocast(dev.type, dtype, o) {}
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  DeviceType dev_;
  bool prev_enabled_;
  DType prev_dtype_;
  bool prev_cache_enabled_;
};

// Queries of this thread's state (a new thread starts with autocast off and default dtypes).
bool is_enabled(DeviceType dev);
DType get_dtype(DeviceType dev);
bool is_cache_enabled();  // one flag for all device types, as torch.is_autocast_cache_enabled()
int nesting();            // number of live Autocast guards on this thread

// --- cast cache (process-global, mutex-guarded, as torch's since pytorch#86136) ---
// Cached: a cast to the autocast dtype of an F32 leaf that requires grad, while grad mode is on and the
// cache is enabled (torch's cached_cast; under NoGradGuard the cast has no grad_fn, so caching it would
// hand a gradient-less weight to later grad-mode uses in the same region). Keyed by TensorImpl* + dtype
// with a weak_ptr to the source, so a freed tensor whose address is reused cannot hit a stale entry.
// Cast ahead: the outermost region's exit remembers the sources it used; the next region's first cache miss
// casts those (alive and still cacheable) in the same batched call as the op's own inputs (cast_each: one
// launch on a GPU for a model's weights instead of one each). Such an entry counts as the miss of its first
// use (stats as without casting ahead), and is cast again at that use if its source's version changed since.
// The values and gradients are those of casting each weight where it is used.
struct CastCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;  // cacheable casts that were computed (and stored)
};
CastCacheStats cast_cache_stats();
void reset_cast_cache_stats();
int64_t cast_cache_size();  // entries held, casts made ahead included
int64_t cast_cache_bytes(DType dt);  // bytes held by cached casts to dt (the memory ledger's "cast cache")
void clear_cast_cache();

// The op-boundary hook. A public op starts with
//     if (amp::OpCast c{amp::OpId::Linear, {x, w, b}}) return c.result(linear(c[0], c[1], c[2]));
// When autocast is enabled for the inputs' device type, this thread is not already inside an autocast-
// policed op, and the op's policy is not Keep, the guard is true, holds the inputs cast per policy, and
// disables policing on this thread until it dies, so the re-entered op (and any op it is composed of) runs
// without casting again (torch's ExcludeDispatchKeyGuard in its autocast wrappers). Otherwise it is false
// and costs one thread-local read. Undefined, F64, I64 and other-device tensors pass through unchanged.
// While an op observer is registered (ObserveOps), an outermost call is always true (inputs cast or not),
// so that its output passes through result(), which reports the call to the observers.
class OpCast {
 public:
  OpCast(OpId op, std::initializer_list<Tensor> inputs);
  OpCast(OpId op, const std::vector<Tensor>& inputs);  // cat's list
  ~OpCast();
  OpCast(const OpCast&) = delete;
  OpCast& operator=(const OpCast&) = delete;

  explicit operator bool() const { return active_; }
  const Tensor& operator[](size_t i) const { return cast_[i]; }
  const std::vector<Tensor>& inputs() const { return cast_; }
  Tensor result(Tensor y) const;  // y, after telling the observers (if any) about this call
  bool observed() const { return call_ != nullptr; }  // an observer will be told about this call
  void set_note(std::string note) const;              // OpCall::note of an observed call

 private:
  void start(OpId op, const Tensor* begin, const Tensor* end);
  void activate(std::optional<std::vector<Tensor>> cast);
  bool active_ = false;
  bool excludes_ = false;  // this guard set the thread's exclusion (inputs were cast per policy)
  bool prev_excluded_ = false;
  std::vector<Tensor> cast_;
  std::unique_ptr<OpCall> call_;  // set only for an observed call
};

// Turns the op-boundary casts off on this thread for its lifetime without touching the Autocast state
// (torch's ExcludeDispatchKeyGuard(AutocastFunctionality)): for custom ops that manage their own dtypes,
// and for running backward functions, which must not be re-cast.
class ExcludeGuard {
 public:
  ExcludeGuard();
  ~ExcludeGuard();
  ExcludeGuard(const ExcludeGuard&) = delete;
  ExcludeGuard& operator=(const ExcludeGuard&) = delete;

 private:
  bool prev_;
};

// The hook as a function: the inputs cast per op's policy (unchanged where OpCast would be inactive).
// It does not exclude nested ops; use OpCast in op implementations.
std::vector<Tensor> autocast_inputs(OpId op, std::vector<Tensor> inputs);

}  // namespace hg::amp
