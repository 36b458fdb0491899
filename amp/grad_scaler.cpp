// GradScaler (amp/grad_scaler.h) and the CPU unscale-and-check kernel over amp/scaler_math.h.
#include "amp/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <type_traits>
#include <utility>
#include <vector>

#include "autograd/node.h"
#include "ops/cpu/blocks.h"
#include "ops/elementwise.h"

namespace hg::amp {
namespace {

constexpr int64_t kBlock = 512;
constexpr int64_t kParallel = 65536;  // below this a parallel region costs more than the pass

// One block [i, i + k): unscale (when a.write) and check; true when an element was inf/NaN.
template <class T>
bool unscale_block(const UnscaleArgs& a, const UnscaleCheck<compute_t<T>>& f, int64_t i, int64_t k) {
  using C = compute_t<T>;
  T* g = static_cast<T*>(a.grad) + i;
  alignas(64) C tmp[kBlock];
  C* x = tmp;
  if constexpr (std::is_same_v<T, C>) x = g;
  else cpu::widen(g, tmp, k);
  bool bad = false;
  if (a.write) {
    for (int64_t j = 0; j < k; ++j) x[j] = f(x[j], bad);
    if constexpr (!std::is_same_v<T, C>) cpu::narrow(tmp, g, k);
  } else {
    for (int64_t j = 0; j < k; ++j) (void)f(x[j], bad);
  }
  return bad;
}

// grad is (n) of dtype T, contiguous; *found_inf is host memory.
template <class T>
void unscale_cpu(const UnscaleArgs& a) {
  using C = compute_t<T>;
  const UnscaleCheck<C> f{a.write ? static_cast<C>(a.inv_scale) : C(1)};
  const int64_t blocks = (a.n + kBlock - 1) / kBlock;
  bool bad = false;
  if (a.n <= kParallel) {
    for (int64_t b = 0; b < blocks; ++b) bad = unscale_block<T>(a, f, b * kBlock, std::min(kBlock, a.n - b * kBlock)) || bad;
  } else {
#pragma omp parallel for schedule(static) reduction(|| : bad)
    for (int64_t b = 0; b < blocks; ++b) bad = unscale_block<T>(a, f, b * kBlock, std::min(kBlock, a.n - b * kBlock)) || bad;
  }
  if (bad) *a.found_inf = 1.0f;
}

void check_options(const GradScalerOptions& o) {
  HG_CHECK(o.init_scale > 0 && std::isfinite(o.init_scale), "GradScaler: init_scale=", o.init_scale,
           "; it must be finite and > 0 (torch's default is 65536)");
  HG_CHECK(o.growth_factor > 1, "GradScaler: growth_factor=", o.growth_factor, "; it must be > 1 (default 2)");
  HG_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1, "GradScaler: backoff_factor=", o.backoff_factor,
           "; it must be in (0, 1) (default 0.5)");
  HG_CHECK(o.growth_interval >= 1, "GradScaler: growth_interval=", o.growth_interval, "; it must be >= 1 (default 2000)");
  HG_CHECK(o.hysteresis >= 1, "GradScaler: hysteresis=", o.hysteresis, "; it must be >= 1 (1: back off at every overflow)");
  HG_CHECK(o.min_scale >= 0 && o.min_scale <= o.init_scale && o.init_scale <= o.max_scale, "GradScaler: min_scale=",
           o.min_scale, ", init_scale=", o.init_scale, ", max_scale=", o.max_scale,
           "; they must satisfy 0 <= min_scale <= init_scale <= max_scale");
}

// The found_inf flags of one unscale_, one per device the gradients live on: host memory for the CPU,
// a device float otherwise, read once at the end (torch keeps one found_inf per device and syncs
// once, in step()).
class FoundInf {
 public:
  float* slot(Device d) {
    if (d.is_cpu()) return &host_;
    for (auto& [dev, t] : device_)
      if (dev == d) return static_cast<float*>(t.data_ptr());
    device_.emplace_back(d, zeros({1}, {.dtype = DType::F32, .device = d}));
    return static_cast<float*>(device_.back().second.data_ptr());
  }
  bool any() const {
    bool found = host_ != 0.0f;
    for (const auto& [dev, t] : device_) found = t.item<float>() != 0.0f || found;
    return found;
  }

 private:
  float host_ = 0.0f;
  std::vector<std::pair<Device, Tensor>> device_;
};

// Checks gradient g for inf/NaN into `found`; unscales it in place by inv_scale when `write`.
void unscale_grad(const Tensor& g, double inv_scale, bool write, FoundInf& found) {
  const UnscaleArgs a{.n = g.numel(), .grad = g.data_ptr(), .inv_scale = inv_scale, .write = write,
                      .found_inf = found.slot(g.device())};
  unscale_kernels().get(g.device(), g.dtype())(a);
}

Tensor scalar(double v) { return full(Shape{}, v, {.dtype = DType::F64}); }

// A required 0-d F64 entry.
double read_entry(const optim::StateDict& sd, const char* key, std::set<std::string>& used) {
  auto it = sd.find(key);
  HG_CHECK(it != sd.end() && it->second.defined(), "GradScaler.load_state_dict: missing entry '", key,
           "'; load a dict saved by GradScaler::state_dict()");
  HG_CHECK(it->second.ndim() == 0 && it->second.dtype() == DType::F64, "GradScaler.load_state_dict: entry '", key,
           "' has shape ", it->second.shape(), " and dtype ", it->second.dtype(), "; it must be a 0-d F64 tensor");
  used.insert(key);
  return it->second.item<double>();
}

int64_t read_count(const optim::StateDict& sd, const char* key, std::set<std::string>& used, int64_t lo) {
  const double v = read_entry(sd, key, used);
  HG_CHECK(v == std::floor(v) && v >= static_cast<double>(lo), "GradScaler.load_state_dict: entry '", key, "' is ", v,
           "; it must be a whole number >= ", lo);
  return static_cast<int64_t>(v);
}

}  // namespace

DispatchTable<UnscaleKernel>& unscale_kernels() {
  static DispatchTable<UnscaleKernel> t = [] {
    DispatchTable<UnscaleKernel> d("GradScaler.unscale_");
    d.set(DeviceType::CPU, DType::F32, &unscale_cpu<float>);
    d.set(DeviceType::CPU, DType::F16, &unscale_cpu<f16>);
    d.set(DeviceType::CPU, DType::BF16, &unscale_cpu<bf16>);
    d.set(DeviceType::CPU, DType::F64, &unscale_cpu<double>);
    return d;
  }();
  return t;
}

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  check_options(options_);
  state_ = {.scale = static_cast<float>(options_.init_scale), .growth_tracker = 0, .hysteresis_left = options_.hysteresis};
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!enabled()) return loss;
  HG_CHECK(loss.defined() && is_floating(loss.dtype()), "GradScaler.scale: the loss is ",
           loss.defined() ? dtype_name(loss.dtype()) : "undefined", "; pass a floating loss tensor");
  const bool keep = loss.dtype() == DType::F32 || loss.dtype() == DType::F64;
  return mul(keep ? loss : loss.to(DType::F32), static_cast<double>(state_.scale));
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!enabled()) return;
  OptimizerState& st = per_optimizer_[&opt];
  HG_CHECK(st.stage != Stage::Unscaled, "GradScaler.unscale_: unscale_() has already been called on this optimizer "
           "since the last update(); call it at most once per optimizer per iteration, before step()");
  HG_CHECK(st.stage != Stage::Stepped, "GradScaler.unscale_: unscale_() is being called after step(); call "
           "unscale_(opt) before step(opt) (step unscales by itself when you did not), then update()");
  // torch: inv_scale = _scale.double().reciprocal().float()
  const double inv_scale = static_cast<float>(1.0 / static_cast<double>(state_.scale));
  NoGradGuard no_grad;
  const std::vector<Tensor> params = opt.parameters();
  FoundInf found;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = params[i].grad();
    if (!g.defined()) continue;
    const bool deferred = g.dtype() == DType::F16;  // see grad_scaler.h: the update kernel unscales it
    unscale_grad(g, inv_scale, !deferred, found);
    if (deferred) opt.set_grad_scale(i, inv_scale);
  }
  st.found_inf = found.any();
  st.stage = Stage::Unscaled;
}

StepResult GradScaler::step(optim::Optimizer& opt) {
  if (!enabled()) {
    opt.step();
    return {.stepped = true, .found_inf = false, .scale = 1.0};
  }
  auto it = per_optimizer_.find(&opt);
  HG_CHECK(it == per_optimizer_.end() || it->second.stage != Stage::Stepped, "GradScaler.step: step() has already "
           "been called on this optimizer since the last update(); call update() once per iteration, after the "
           "steps of all optimizers");
  if (it == per_optimizer_.end() || it->second.stage == Stage::Ready) unscale_(opt);
  OptimizerState& st = per_optimizer_.at(&opt);
  if (st.found_inf) opt.clear_grad_scales();  // skipped: torch does not call optimizer.step()
  else opt.step();
  st.stage = Stage::Stepped;
  return {.stepped = !st.found_inf, .found_inf = st.found_inf, .scale = static_cast<double>(state_.scale)};
}

ScaleUpdateParams GradScaler::update_params() const {
  return {.growth_factor = options_.growth_factor,
          .backoff_factor = options_.backoff_factor,
          .growth_interval = options_.growth_interval,
          .hysteresis = options_.hysteresis,
          .min_scale = static_cast<float>(options_.min_scale),
          .max_scale = static_cast<float>(options_.max_scale)};
}

void GradScaler::update() {
  if (!enabled()) return;
  HG_CHECK(!per_optimizer_.empty(), "GradScaler.update: no inf checks were recorded prior to update(); call "
           "step(opt) on the optimizers of this iteration before update()");
  bool found = false;
  for (const auto& [opt, st] : per_optimizer_) found = found || st.found_inf;
  if (options_.dynamic) scale_update(state_, found, update_params());
  per_optimizer_.clear();
  warn_if_below_one();
}

void GradScaler::update(double new_scale) {
  if (!enabled()) return;
  HG_CHECK(new_scale > 0 && std::isfinite(static_cast<float>(new_scale)), "GradScaler.update: new_scale=", new_scale,
           "; it must be finite in F32 and > 0");
  state_.scale = static_cast<float>(new_scale);
  per_optimizer_.clear();
  warn_if_below_one();
}

void GradScaler::warn_if_below_one() {
  if (state_.scale >= 1.0f || warned_below_one_) return;
  warned_below_one_ = true;
  std::fprintf(stderr,
               "halfgrad warning: GradScaler: the loss scale fell below 1 (scale=%g): gradients are now scaled "
               "down. The model overflows F16 even unscaled (e.g. BF16-pretrained weights); consider BF16 autocast "
               "without a scaler, or GradScalerOptions{.min_scale = 1}. (Shown once.)\n",
               static_cast<double>(state_.scale));
}

optim::StateDict GradScaler::state_dict() const {
  optim::StateDict sd;
  if (!enabled()) return sd;  // torch: {} when disabled
  sd["scale"] = scalar(state_.scale);
  sd["growth_tracker"] = scalar(static_cast<double>(state_.growth_tracker));
  sd["hysteresis_tracker"] = scalar(static_cast<double>(state_.hysteresis_left));
  sd["growth_factor"] = scalar(options_.growth_factor);
  sd["backoff_factor"] = scalar(options_.backoff_factor);
  sd["growth_interval"] = scalar(static_cast<double>(options_.growth_interval));
  sd["hysteresis"] = scalar(static_cast<double>(options_.hysteresis));
  sd["min_scale"] = scalar(options_.min_scale);
  sd["max_scale"] = scalar(options_.max_scale);
  sd["dynamic"] = scalar(options_.dynamic ? 1.0 : 0.0);
  return sd;
}

void GradScaler::load_state_dict(const optim::StateDict& sd) {
  if (!enabled()) return;  // torch
  HG_CHECK(!sd.empty(), "GradScaler.load_state_dict: the state dict is empty, possibly because it was saved from a "
           "disabled GradScaler; save from an enabled one, or skip loading");
  std::set<std::string> used;
  GradScalerOptions o = options_;
  o.growth_factor = read_entry(sd, "growth_factor", used);
  o.backoff_factor = read_entry(sd, "backoff_factor", used);
  o.growth_interval = read_count(sd, "growth_interval", used, 1);
  o.hysteresis = read_count(sd, "hysteresis", used, 1);
  o.min_scale = read_entry(sd, "min_scale", used);
  o.max_scale = read_entry(sd, "max_scale", used);
  o.dynamic = read_entry(sd, "dynamic", used) != 0.0;
  const double scale = read_entry(sd, "scale", used);
  const int64_t growth = read_count(sd, "growth_tracker", used, 0);
  const double hyst = read_entry(sd, "hysteresis_tracker", used);
  HG_CHECK(hyst == std::floor(hyst) && hyst <= static_cast<double>(o.hysteresis), "GradScaler.load_state_dict: "
           "entry 'hysteresis_tracker' is ", hyst, "; it must be a whole number <= hysteresis=", o.hysteresis);
  o.init_scale = scale;  // torch sets _init_scale from the dict
  check_options(o);
  for (const auto& [key, t] : sd)
    HG_CHECK(used.count(key), "GradScaler.load_state_dict: unexpected entry '", key,
             "'; the dict was not saved by GradScaler::state_dict()");
  options_ = o;
  state_ = {.scale = static_cast<float>(scale), .growth_tracker = growth, .hysteresis_left = static_cast<int64_t>(hyst)};
}

}  // namespace hg::amp
