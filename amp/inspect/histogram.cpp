#include "amp/inspect/histogram.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <sstream>

#include "amp/inspect/text_file.h"
#include "autograd/node.h"

namespace hg::amp::inspect {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Activation: return "activation";
    case Kind::ActivationGrad: return "activation_grad";
    case Kind::WeightGrad: return "weight_grad";
    case Kind::Weight: return "weight";
    case Kind::Update: return "update";
  }
  return "?";
}

bool is_gradient(Kind k) { return k == Kind::ActivationGrad || k == Kind::WeightGrad; }

int64_t LayerStats::bin(int exponent) const {
  if (exponent < kMinExponent || exponent > kMaxExponent) return 0;
  return bins[static_cast<size_t>(exponent - kMinExponent)];
}

int64_t LayerStats::ulp_bin(int exponent) const {
  if (ulp_bins.empty() || exponent < kMinExponent || exponent > kMaxExponent) return 0;
  return ulp_bins[static_cast<size_t>(exponent - kMinExponent)];
}

struct GradientHistogram::State {
  mutable std::mutex mu;
  std::vector<std::pair<std::string, Kind>> keys;  // first-recorded order
  std::map<std::pair<std::string, Kind>, LayerStats> stats;
  double loss_scale = 1.0;

  LayerStats& entry(const std::string& name, Kind kind) {
    const auto key = std::make_pair(name, kind);
    auto it = stats.find(key);
    if (it == stats.end()) {
      keys.push_back(key);
      it = stats.emplace(key, LayerStats{}).first;
    }
    return it->second;
  }
};

namespace {

void count_format(FormatCounts& c, Rounding r, bool below_min_subnormal) {
  c.flush += r == Rounding::Flush;
  c.subnormal += r == Rounding::Subnormal;
  c.overflow += r == Rounding::Overflow;
  c.below_min_subnormal += below_min_subnormal;
}

// One value into s; factor is the loss scale for gradients, 1 otherwise.
void count_value(LayerStats& s, double x, double factor) {
  ++s.count;
  if (std::isnan(x) || std::isinf(x) || x == 0.0) {
    s.nans += std::isnan(x);
    s.infs += std::isinf(x);
    s.zeros += x == 0.0;
    return;
  }
  int e2 = 0;
  std::frexp(x, &e2);  // |x| = m 2^e2 with m in [0.5, 1): floor(log2|x|) = e2 - 1
  const int e = e2 - 1;
  if (e < kMinExponent) ++s.below_range;
  else if (e > kMaxExponent) ++s.above_range;
  else ++s.bins[static_cast<size_t>(e - kMinExponent)];
  const double scaled = std::fabs(x) * factor;
  // RNE to F32; an F64 value that F32 flushes flushes in F16/BF16 too, and an F32 overflow is an overflow
  const float v = static_cast<float>(scaled);
  count_format(s.f16, v == 0.0f ? Rounding::Flush : round_f16(v), scaled < kF16MinSubnormal);
  count_format(s.bf16, v == 0.0f ? Rounding::Flush : round_bf16(v), scaled < kBF16MinSubnormal);
  count_format(s.e4m3, v == 0.0f ? Rounding::Flush : round_e4m3(v), scaled < kE4M3MinSubnormal);
  count_format(s.e5m2, v == 0.0f ? Rounding::Flush : round_e5m2(v), scaled < kE5M2MinSubnormal);
}

std::vector<double> host_values(const char* op, const std::string& name, const Tensor& t) {
  HG_CHECK(t.defined(), op, ": the tensor for '", name, "' is undefined; record a tensor that has values");
  HG_CHECK(is_floating(t.dtype()), op, ": '", name, "' has dtype ", t.dtype(),
           "; histograms are of floating tensors (F32, F16, BF16, F64)");
  return t.detach().to_vector<double>();  // copies a CUDA tensor to the host
}

void record_values(GradientHistogram::State& st, const std::string& name, Kind kind, const std::vector<double>& v) {
  std::lock_guard<std::mutex> lock(st.mu);
  LayerStats& s = st.entry(name, kind);
  s.loss_scale = is_gradient(kind) ? st.loss_scale : 1.0;
  for (double x : v) count_value(s, x, s.loss_scale);
}

// The forward hook of one watched leaf module. It holds the counts weakly: a histogram destroyed
// while the module lives leaves a hook that does nothing.
nn::ForwardHook make_forward_hook(std::weak_ptr<GradientHistogram::State> weak, std::string name, WatchOptions o) {
  return [weak = std::move(weak), name = std::move(name), o](const nn::Module&, const Tensor& x, const Tensor& y) {
    const auto st = weak.lock();
    if (!st || !y.defined()) return;
    if (o.activations) record_values(*st, name, Kind::Activation, host_values("GradientHistogram", name, y));
    // an output that is its input (an identity, dropout in eval) carries the previous layer's gradient
    if (!o.activation_grads || !y.requires_grad() || y.same(x)) return;
    y.register_hook([weak, name](const Tensor& g) {
      if (const auto s = weak.lock())
        record_values(*s, name, Kind::ActivationGrad, host_values("GradientHistogram", name, g));
      return Tensor();  // undefined: the gradient goes on unchanged
    });
  };
}

}  // namespace

GradientHistogram::GradientHistogram() : state_(std::make_shared<State>()) {}

GradientHistogram::~GradientHistogram() { unwatch(); }

void GradientHistogram::watch(nn::Module& m, WatchOptions o) {
  const auto modules = m.named_modules();
  if (m.named_children().empty()) {
    const nn::HookHandle h = m.register_forward_hook(make_forward_hook(state_, m.type_name(), o));
    watched_.push_back({.module = {}, .root = &m, .handle = h});
    return;
  }
  for (const auto& [name, child] : modules) {
    if (!child->named_children().empty()) continue;  // leaves only: a parent's output is a leaf's output
    watched_.push_back({.module = child, .handle = child->register_forward_hook(make_forward_hook(state_, name, o))});
  }
}

void GradientHistogram::unwatch() {
  for (const Watched& w : watched_) {
    if (w.root != nullptr) w.root->remove_forward_hook(w.handle);
    else if (const auto m = w.module.lock()) m->remove_forward_hook(w.handle);
  }
  watched_.clear();
}

void GradientHistogram::set_loss_scale(double scale) {
  HG_CHECK(std::isfinite(scale) && scale > 0, "GradientHistogram::set_loss_scale: scale=", scale,
           "; pass a finite scale > 0 (GradScaler::get_scale(), or 1 for unscaled gradients)");
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->loss_scale = scale;
}

double GradientHistogram::loss_scale() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->loss_scale;
}

void GradientHistogram::record(const std::string& name, Kind kind, const Tensor& t) {
  record_values(*state_, name, kind, host_values("GradientHistogram::record", name, t));
}

void GradientHistogram::record_weights(const nn::Module& m) {
  for (const auto& [name, p] : m.named_parameters()) record(name, Kind::Weight, p);
}

void GradientHistogram::record_weight_grads(const nn::Module& m) {
  for (const auto& [name, p] : m.named_parameters()) {
    const Tensor g = p.grad();
    if (g.defined()) record(name, Kind::WeightGrad, g);
  }
}

void GradientHistogram::record_update(const std::string& name, const Tensor& weight, const Tensor& update) {
  const char* op = "GradientHistogram::record_update";
  const std::vector<double> w = host_values(op, name, weight);
  const std::vector<double> u = host_values(op, name, update);
  HG_CHECK(w.size() == u.size(), op, ": '", name, "' has ", w.size(), " weights but ", u.size(),
           " update values; pass the update of exactly these weights");
  std::lock_guard<std::mutex> lock(state_->mu);
  LayerStats& s = state_->entry(name, Kind::Update);
  s.loss_scale = 1.0;
  for (size_t i = 0; i < u.size(); ++i) {
    count_value(s, u[i], 1.0);
    if (u[i] == 0.0 || !std::isfinite(u[i]) || !std::isfinite(w[i])) continue;
    ++s.updates;
    s.f16_swamped += swamped_f16(static_cast<float>(w[i]), static_cast<float>(u[i]));
    s.f16_swamped_rule += swamped_f16_rule_of_thumb(w[i], u[i]);
    const double ratio = std::fabs(u[i]) / f16_spacing(w[i]);  // 0 beside an inf weight: the lowest bin
    if (s.ulp_bins.empty()) s.ulp_bins.assign(kNumExponentBins, 0);
    const int e = ratio > 0 ? std::ilogb(ratio) : kMinExponent;
    ++s.ulp_bins[static_cast<size_t>(std::clamp(e, kMinExponent, kMaxExponent) - kMinExponent)];
  }
}

void GradientHistogram::record_updates(const WeightSnapshot& before, const WeightSnapshot& after) {
  for (const auto& [name, b] : before) {
    const auto it = after.find(name);
    if (it == after.end()) continue;
    HG_CHECK(b.numel() == it->second.numel(), "GradientHistogram::record_updates: '", name, "' has ", b.numel(),
             " elements before but ", it->second.numel(), " after; snapshot the same parameters");
    // u = after - before in F64 on the host: exact for F32/F16/BF16 values of similar magnitude
    const std::vector<double> bv = host_values("GradientHistogram::record_updates", name, b);
    std::vector<double> u = host_values("GradientHistogram::record_updates", name, it->second);
    for (size_t i = 0; i < u.size(); ++i) u[i] -= bv[i];
    record_update(name, b, from_vector(u, b.shape(), {.dtype = DType::F64}));
  }
}

void GradientHistogram::record_updates(const WeightSnapshot& before, const nn::Module& after) {
  record_updates(before, snapshot_weights(after));
}

WeightSnapshot snapshot_weights(const nn::Module& m) {
  NoGradGuard ng;
  WeightSnapshot out;
  for (const auto& [name, p] : m.named_parameters()) {
    // a copy that later steps cannot change (to(Device) returns p itself when it is on the host)
    Tensor h = p.detach().to(Device::cpu());
    out.emplace(name, h.unsafe_impl()->storage == p.unsafe_impl()->storage ? h.clone() : h);
  }
  return out;
}

void GradientHistogram::clear() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->keys.clear();
  state_->stats.clear();
}

std::vector<std::pair<std::string, Kind>> GradientHistogram::keys() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->keys;
}

const LayerStats* GradientHistogram::find(const std::string& name, Kind kind) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  const auto it = state_->stats.find({name, kind});
  return it == state_->stats.end() ? nullptr : &it->second;
}

const LayerStats& GradientHistogram::at(const std::string& name, Kind kind) const {
  if (const LayerStats* s = find(name, kind)) return *s;
  std::string known;
  for (const auto& [n, k] : keys()) known += " " + n + "/" + kind_name(k);
  HG_FAIL("GradientHistogram::at: nothing recorded for '", name, "' (", kind_name(kind), "); recorded:",
          known.empty() ? std::string(" nothing yet") : known);
}

}  // namespace hg::amp::inspect
