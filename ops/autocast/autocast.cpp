#include "ops/autocast/autocast.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <utility>

#include "autograd/backward_state.h"
#include "autograd/node.h"

namespace hg::amp {

namespace {

struct DeviceState {
  bool enabled = false;
  DType dtype;
};

// torch: autocast_dtype[] defaults (CPU BF16, CUDA F16), everything off in a new thread.
struct ThreadState {
  std::array<DeviceState, kNumDeviceTypes> dev{DeviceState{false, DType::BF16}, DeviceState{false, DType::F16}};
  bool cache_enabled = true;
  int nesting = 0;
  bool excluded = false;  // inside an autocast-policed op: nested ops are not cast again
  OpCall* planning = nullptr;  // the observed call whose casts plan() is making
  bool any_enabled() const { return dev[0].enabled || dev[1].enabled; }
};

thread_local ThreadState tls;

DeviceState& dev_state(DeviceType d) { return tls.dev[static_cast<size_t>(d)]; }

// --- the cast cache ---
// An entry is `used` once an op of the region has taken it (a cache miss casts and uses at once). An unused
// entry was cast ahead (prefetched, below) and is checked against its source's version at its first use,
// so a weight changed after the prefetch is cast again, as if no prefetch had happened.
struct CacheEntry {
  std::weak_ptr<TensorImpl> src;  // a dead source (reused address) never hits
  Tensor cast;
  uint64_t version = 0;  // the source's at the cast
  bool used = false;
};
using CacheKey = std::pair<const TensorImpl*, DType>;
struct Learned {
  std::weak_ptr<TensorImpl> src;
  DType to;
};
struct CastCache {
  std::mutex mu;
  std::map<CacheKey, CacheEntry> map;
  // The sources of the entries the last region used (taken from `map` when it is cleared): the next region's
  // first cache miss casts all of them that still qualify in the same batched call as the op's own inputs
  // (cast_each): a model's weights in one launch on a GPU, not one each.
  std::vector<Learned> learned;
  std::atomic<int64_t> hits{0}, misses{0};
};
CastCache& cache() {
  static CastCache c;
  return c;
}

// torch's cached_cast condition, plus grad mode (see autocast.h).
bool cacheable(const Tensor& t, DType to, DType lower) {
  return tls.cache_enabled && autograd::grad_enabled() && to == lower && t.dtype() == DType::F32 &&
         t.requires_grad() && t.is_leaf();
}

CacheKey key_of(const Tensor& t, DType to) { return {t.unsafe_impl(), to}; }

// The cached cast of t, if one may be used now (marking a prefetched one used); else undefined. Stats:
// the first use of an entry is the miss that cast it, the later ones hits.
Tensor cache_lookup(CastCache& c, const Tensor& t, DType to, bool& hit) {
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.map.find(key_of(t, to));
  if (it == c.map.end() || it->second.src.lock() != t.impl_ptr()) return {};
  CacheEntry& e = it->second;
  if (!e.used) {
    if (e.version != t.version()) return {};  // changed since the prefetch: cast again
    e.used = true;
    ++c.misses;
    return e.cast;
  }
  ++c.hits;
  hit = true;
  return e.cast;
}

// Last region's sources to cast now, with `to`, beside an op's cache misses: alive, on device type dev,
// still cacheable, not in the cache, not among `taken`.
std::vector<Tensor> prefetch_candidates(CastCache& c, DeviceType dev, DType to, DType lower,
                                        const std::vector<Tensor>& taken) {
  std::vector<Tensor> out;
  std::lock_guard<std::mutex> lock(c.mu);
  for (const Learned& l : c.learned) {
    if (l.to != to) continue;
    std::shared_ptr<TensorImpl> impl = l.src.lock();
    if (!impl) continue;
    const Tensor t(std::move(impl));
    if (t.device().type != dev || !cacheable(t, to, lower) || c.map.count(key_of(t, to))) continue;
    bool dup = false;
    for (const Tensor& u : taken) dup = dup || u.unsafe_impl() == t.unsafe_impl();
    for (const Tensor& u : out) dup = dup || u.unsafe_impl() == t.unsafe_impl();
    if (!dup) out.push_back(t);
  }
  return out;
}

void cache_store(CastCache& c, const Tensor& src, DType to, const Tensor& cast, bool used) {
  std::lock_guard<std::mutex> lock(c.mu);
  c.map[key_of(src, to)] = CacheEntry{src.impl_ptr(), cast, src.version(), used};
  if (used) ++c.misses;
}

// torch's is_eligible: defined, on the autocast device type, floating and not F64.
bool eligible(const Tensor& t, DeviceType dev) {
  return t.defined() && t.device().type == dev && is_floating(t.dtype()) && t.dtype() != DType::F64;
}

// torch's prioritize(): start at the low dtype, any F32 wins, F16 mixed with BF16 is an error.
DType promote_target(OpId op, const std::vector<Tensor>& xs, DeviceType dev, DType lower) {
  DType cur = lower;
  for (const Tensor& t : xs) {
    if (!eligible(t, dev) || t.dtype() == cur) continue;
    HG_CHECK(cur == DType::F32 || t.dtype() == DType::F32 || t.dtype() == lower, "autocast: ", op_name(op),
             " (policy Promote) got a ", t.dtype(), " input while autocast lowers to ", lower, ", and ", t.dtype(),
             " with ", lower, " has no common low-precision type; cast the inputs to one dtype first");
    cur = DType::F32;
  }
  return cur;
}

DType target_dtype(OpId op, CastPolicy p, const std::vector<Tensor>& xs, DeviceType dev, DType lower) {
  switch (p) {
    case CastPolicy::Lower: return lower;
    case CastPolicy::Fp32: return DType::F32;
    case CastPolicy::Promote: return promote_target(op, xs, dev, lower);
    case CastPolicy::Keep: break;
  }
  return DType::F32;
}

// Ops whose kernels read an F16/BF16 input and compute in F32 exactly as on the input cast to F32, then round
// its gradient once to the input's dtype, as the cast's backward would: cross_entropy and nll_loss with
// class indices (cpu/loss.cpp and cuda/kernels/loss.cu widen each element as they load it). autocast's
// F32 policy leaves such an input as it is: the same bits, and two launches fewer on a GPU (the cast and its
// gradient's cast back).
bool widens_inside(OpId op, const std::vector<Tensor>& xs, DType from) {
  return (op == OpId::CrossEntropy || op == OpId::NllLoss) && is_low_precision(from) && xs.size() >= 2 &&
         xs[1].defined() && xs[1].dtype() == DType::I64;
}

// The inputs [begin, end) cast per policy, or nothing when autocast does not apply to this call (decided
// before anything is copied: Keep ops under an enabled region stay cheap).
std::optional<std::vector<Tensor>> plan(OpId op, const Tensor* begin, const Tensor* end) {
  const Tensor* first = begin;
  while (first != end && !first->defined()) ++first;
  if (first == end) return std::nullopt;
  const DeviceType dev = first->device().type;
  const DeviceState& s = dev_state(dev);
  if (!s.enabled) return std::nullopt;
  const CastPolicy p = op_policy(dev, op);
  if (tls.planning) tls.planning->policy = p;
  if (p == CastPolicy::Keep) return std::nullopt;
  std::vector<Tensor> xs(begin, end);
  const DType to = target_dtype(op, p, xs, dev, s.dtype);
  // The inputs that need a cast, all cast in one batched call (cast_each) with, when a cacheable one misses,
  // the weights the last region used (prefetch_candidates), so that a model's first op casts them all.
  CastCache& c = cache();
  std::vector<size_t> todo;   // inputs to cast now, in batch order
  std::vector<Tensor> batch;  // their tensors, then the casts made ahead
  std::vector<bool> cached(xs.size());
  std::vector<std::pair<size_t, size_t>> again;  // (input, earlier input): the same weight twice in one call
  bool any_miss = false;
  for (size_t i = 0; i < xs.size(); ++i) {
    Tensor& t = xs[i];
    if (!eligible(t, dev) || t.dtype() == to || (to == DType::F32 && widens_inside(op, xs, t.dtype()))) continue;
    cached[i] = cacheable(t, to, s.dtype);
    if (cached[i]) {
      const auto same = std::find_if(todo.begin(), todo.end(), [&](size_t k) { return cached[k] && xs[k].same(t); });
      if (same != todo.end()) {  // a hit on the cast this call makes, as if it had been stored already
        again.push_back({i, *same});
        continue;
      }
      bool h = false;
      Tensor y = cache_lookup(c, t, to, h);
      if (y.defined()) {
        if (tls.planning) tls.planning->casts.push_back({i, t.dtype(), to, y.numel() * int64_t(dtype_size(to)), true, h});
        t = std::move(y);
        continue;
      }
      any_miss = true;
    }
    todo.push_back(i);
    batch.push_back(t);
  }
  if (todo.empty() && again.empty()) return xs;
  const size_t own = batch.size();
  if (any_miss) {
    const std::vector<Tensor> ahead = prefetch_candidates(c, dev, to, s.dtype, batch);
    batch.insert(batch.end(), ahead.begin(), ahead.end());
  }
  const std::vector<Tensor> out = cast_each(batch, to);
  for (size_t j = 0; j < own; ++j) {
    const size_t i = todo[j];
    if (cached[i]) cache_store(c, xs[i], to, out[j], true);
    if (tls.planning)
      tls.planning->casts.push_back({i, xs[i].dtype(), to, out[j].numel() * int64_t(dtype_size(to)), cached[i], false});
    xs[i] = out[j];
  }
  for (size_t j = own; j < batch.size(); ++j) cache_store(c, batch[j], to, out[j], false);
  for (const auto& [i, k] : again) {
    xs[i] = xs[k];
    ++c.hits;
    if (tls.planning) tls.planning->casts.push_back({i, DType::F32, to, xs[i].numel() * int64_t(dtype_size(to)), true, true});
  }
  if (tls.planning) {  // in input order
    auto& casts = tls.planning->casts;
    std::stable_sort(casts.begin(), casts.end(), [](const CastRecord& a, const CastRecord& b) { return a.input < b.input; });
  }
  return xs;
}

// Once per (device type, dtype) and process, as Python shows a warning once per call site: a training loop
// that enters the region every step does not flood stderr, and every distinct mistake is still reported.
void warn_unsupported_dtype(DeviceType dev, DType dt) {
  static std::array<std::array<std::atomic<bool>, kNumDTypes>, kNumDeviceTypes> warned{};
  if (warned[static_cast<size_t>(dev)][static_cast<size_t>(dt)].exchange(true)) return;
  const char* name = dev == DeviceType::CUDA ? "CUDA" : "CPU";
  std::fprintf(stderr,
               "halfgrad warning: Autocast: in %s autocast, but the target dtype %s is not supported. Disabling "
               "autocast: the region runs with enabled=false. %s autocast supports F16 and BF16 only; pass one "
               "of them (or std::nullopt for the default, %s). (Shown once per device type and dtype.)\n",
               name, dtype_name(dt), name, dev == DeviceType::CUDA ? "F16" : "BF16");
}

}  // namespace

Autocast::Autocast(DeviceType dev, std::optional<DType> dtype, AutocastOptions o)
    : dev_(dev), prev_enabled_(dev_state(dev).enabled), prev_dtype_(dev_state(dev).dtype),
      prev_cache_enabled_(tls.cache_enabled) {
  // torch.autocast warns and runs the region disabled for an unsupported dtype instead of failing; the
  // device's dtype stays as it was, so a nested Autocast(dev) still lowers to F16/BF16.
  const bool supported = !dtype || is_low_precision(*dtype);
  if (o.enabled && !supported) warn_unsupported_dtype(dev, *dtype);
  dev_state(dev).enabled = o.enabled && supported;
  if (dtype && supported) dev_state(dev).dtype = *dtype;
  tls.cache_enabled = o.cache_enabled;
  ++tls.nesting;
}

Autocast::~Autocast() {
  // torch's __exit__: the cache is cleared when this thread's nesting returns to 0.
  if (--tls.nesting == 0) clear_cast_cache();
  dev_state(dev_).enabled = prev_enabled_;
  dev_state(dev_).dtype = prev_dtype_;
  tls.cache_enabled = prev_cache_enabled_;
}

bool is_enabled(DeviceType dev) { return dev_state(dev).enabled; }
DType get_dtype(DeviceType dev) { return dev_state(dev).dtype; }
bool is_cache_enabled() { return tls.cache_enabled; }
int nesting() { return tls.nesting; }

CastCacheStats cast_cache_stats() { return {cache().hits.load(), cache().misses.load()}; }
void reset_cast_cache_stats() {
  cache().hits = 0;
  cache().misses = 0;
}
int64_t cast_cache_size() {
  std::lock_guard<std::mutex> lock(cache().mu);
  return static_cast<int64_t>(cache().map.size());
}
int64_t cast_cache_bytes(DType dt) {
  std::lock_guard<std::mutex> lock(cache().mu);
  int64_t bytes = 0;
  for (const auto& [key, e] : cache().map)
    if (key.second == dt) bytes += e.cast.numel() * static_cast<int64_t>(dtype_size(dt));
  return bytes;
}
void clear_cast_cache() {
  CastCache& c = cache();
  decltype(c.map) dead;  // destroy the cast tensors outside the lock
  std::lock_guard<std::mutex> lock(c.mu);
  c.learned.clear();  // what the next region's first cache miss casts ahead
  for (const auto& [key, e] : c.map)
    if (e.used) c.learned.push_back({e.src, key.second});
  dead.swap(c.map);
}

OpCast::OpCast(OpId op, std::initializer_list<Tensor> inputs) { start(op, inputs.begin(), inputs.end()); }
OpCast::OpCast(OpId op, const std::vector<Tensor>& inputs) { start(op, inputs.data(), inputs.data() + inputs.size()); }

void OpCast::start(OpId op, const Tensor* begin, const Tensor* end) {
  const bool observed = observe::wanted();
  if ((tls.excluded || !tls.any_enabled()) && !observed) return;  // common path: two thread-local reads
  if (autograd::in_backward()) return;
  if (!observed) return activate(plan(op, begin, end));
  // An observed call: plan() records its policy and casts, and the guard is true even without casts so
  // that the op's output reaches result().
  auto call = std::make_unique<OpCall>();
  call->op = op;
  call->inputs.assign(begin, end);
  if (!tls.excluded && tls.any_enabled()) {
    struct Planning {  // cleared also when a cast throws
      explicit Planning(OpCall* c) { tls.planning = c; }
      ~Planning() { tls.planning = nullptr; }
    } planning(call.get());
    activate(plan(op, begin, end));
  }
  if (!active_) {
    cast_ = call->inputs;
    active_ = true;
  }
  call_ = std::move(call);
  observe::enter();  // last: nothing above may throw after it
}

void OpCast::activate(std::optional<std::vector<Tensor>> cast) {
  if (!cast) return;
  cast_ = std::move(*cast);
  active_ = true;
  excludes_ = true;
  prev_excluded_ = tls.excluded;
  tls.excluded = true;
}

OpCast::~OpCast() {
  if (excludes_) tls.excluded = prev_excluded_;
  if (call_) observe::leave();
}

void OpCast::set_note(std::string note) const {
  if (call_) call_->note = std::move(note);
}

Tensor OpCast::result(Tensor y) const {
  if (call_) [[unlikely]] {
    call_->ran = cast_;
    NoGradGuard no_grad;
    ExcludeGuard exclude;
    observe::report(*call_, y);
  }
  return y;
}

ExcludeGuard::ExcludeGuard() : prev_(tls.excluded) { tls.excluded = true; }
ExcludeGuard::~ExcludeGuard() { tls.excluded = prev_; }

std::vector<Tensor> autocast_inputs(OpId op, std::vector<Tensor> inputs) {
  if (tls.excluded || !tls.any_enabled()) return inputs;
  auto cast = plan(op, inputs.data(), inputs.data() + inputs.size());
  return cast ? std::move(*cast) : std::move(inputs);
}

}  // namespace hg::amp
