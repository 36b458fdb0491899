// GradScaler (amp/grad_scaler.h) and the CPU unscale-and-check kernel over ops/kernels/scaler.h.
#include "amp/grad_scaler.h"

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <set>
#include <type_traits>
#include <utility>
#include <vector>

#include "autograd/node.h"
#include "core/parallel.h"
#include "dist/dist.h"
#include "ops/elementwise.h"
#include "ops/kernels/scaler.h"
#include "ops/shape.h"

namespace hg::amp {
namespace {

// The largest count a state dict entry (an F64) holds exactly.
constexpr double kMaxCount = 9007199254740992.0;  // 2^53

// A value stored as F32 (the scale and its limits): finite there and a normal number, as the scale must be.
bool normal_f32(double v) {
  const float f = static_cast<float>(v);
  return std::isfinite(v) && std::isfinite(f) && f >= kScaleFloor;
}

// Every option is checked in the type it is kept in: the scale and its limits in F32, the factors in double.
void check_options(const GradScalerOptions& o) {
  HG_CHECK(normal_f32(o.init_scale), "GradScaler: init_scale=", o.init_scale, "; the scale is kept as F32 and must be "
           "a normal F32 number, in [", kScaleFloor, ", ", FLT_MAX, "] (torch's default is 65536)");
  HG_CHECK(std::isfinite(o.growth_factor) && o.growth_factor > 1, "GradScaler: growth_factor=", o.growth_factor,
           "; it must be finite and > 1 (default 2)");
  HG_CHECK(o.backoff_factor >= kScaleFloor && o.backoff_factor < 1, "GradScaler: backoff_factor=", o.backoff_factor,
           "; it must be in [", kScaleFloor, ", 1), a normal F32 number below 1 (default 0.5)");
  HG_CHECK(o.growth_interval >= 1, "GradScaler: growth_interval=", o.growth_interval, "; it must be >= 1 (default 2000)");
  HG_CHECK(o.hysteresis >= 1, "GradScaler: hysteresis=", o.hysteresis, "; it must be >= 1 (1: back off at every overflow)");
  HG_CHECK(o.min_scale == 0 || normal_f32(o.min_scale), "GradScaler: min_scale=", o.min_scale, "; it must be 0 (no "
           "floor beyond F32's smallest normal number, ", kScaleFloor, ", which always holds) or a normal F32 number");
  HG_CHECK(o.max_scale == std::numeric_limits<double>::infinity() || normal_f32(o.max_scale), "GradScaler: max_scale=",
           o.max_scale, "; it must be infinity (no ceiling) or a normal F32 number, at most ", FLT_MAX);
  HG_CHECK(o.min_scale <= o.init_scale && o.init_scale <= o.max_scale, "GradScaler: min_scale=", o.min_scale,
           ", init_scale=", o.init_scale, ", max_scale=", o.max_scale,
           "; they must satisfy 0 <= min_scale <= init_scale <= max_scale");
  HG_CHECK(o.max_skipped_in_a_row >= 0, "GradScaler: max_skipped_in_a_row=", o.max_skipped_in_a_row,
           "; it must be >= 0 (0: never stop, as torch; default 50)");
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
  unscale_kernels().get(g.device(), g.dtype())({&a, 1});
}

Tensor scalar(double v) { return full(Shape{}, v, {.dtype = DType::F64}); }

template <class T>
T download(const Tensor& t, int64_t i = 0) {
  T v{};
  copy_bytes(&v, Device::cpu(), static_cast<const T*>(t.data_ptr()) + i, t.device(), sizeof v);
  return v;
}

// A required entry: one number (state_dict() writes 0-d F64 tensors; a dict built after torch's, whose _scale
// has shape [1], or with I64 counts, reads the same).
double read_entry(const optim::StateDict& sd, const char* key, std::set<std::string>& used) {
  auto it = sd.find(key);
  HG_CHECK(it != sd.end() && it->second.defined(), "GradScaler.load_state_dict: missing entry '", key,
           "'; load a dict saved by GradScaler::state_dict() (or torch's five entries: scale, growth_factor, "
           "backoff_factor, growth_interval, _growth_tracker)");
  const Tensor& t = it->second;
  HG_CHECK(t.numel() == 1 && (is_floating(t.dtype()) || t.dtype() == DType::I64) && !is_storage_only(t.dtype()),
           "GradScaler.load_state_dict: entry '", key, "' has shape ", t.shape(), " and dtype ", t.dtype(),
           "; it must hold one number (a 0-d F64 tensor, as state_dict() writes)");
  used.insert(key);
  return t.to(DType::F64).cpu().reshape({}).item<double>();
}

// A whole number in [lo, hi] (within 2^53 either way: an F64 holds those exactly, and int64 takes them).
int64_t read_count(const optim::StateDict& sd, const char* key, std::set<std::string>& used, double lo,
                   double hi = kMaxCount) {
  const double v = read_entry(sd, key, used);
  HG_CHECK(std::isfinite(v) && v == std::floor(v) && v >= lo && v <= hi, "GradScaler.load_state_dict: entry '", key,
           "' is ", v, "; it must be a whole number in [", lo, ", ", hi, "]");
  return static_cast<int64_t>(v);
}

// The error GradScaler raises once `skipped` updates in a row (>= stop_after > 0) found inf/NaN
// gradients; `where` names the call. Does nothing otherwise.
void throw_if_stuck(int64_t skipped, int64_t stop_after, double scale, const char* where) {
  if (stop_after <= 0 || skipped < stop_after) return;
  HG_FAIL(where, ": the loss or the gradients have been inf/NaN in ", skipped, " updates in a row, every step skipped, "
          "and the scale has fallen to ", scale, ": training is not progressing. Find the first op that makes the "
          "inf/NaN with amp::inspect::NonFiniteOrigin (amp/inspect/nonfinite.h), check the data and the learning rate; "
          "GradScalerOptions::max_skipped_in_a_row = 0 trains on regardless, as torch does");
}

}  // namespace

// The snapshot's three floats {found_inf, scale, skipped in a row}, once downloaded, into values_.
void StepResult::take(const float* v) const {
  throw_if_stuck(static_cast<int64_t>(v[2]), stop_after_, static_cast<double>(v[1]), "GradScaler.step");
  values_ = Values{.found_inf = v[0] != 0.0f, .scale = static_cast<double>(v[1])};
}

const StepResult::Values& StepResult::read() const {
  if (!values_) {
    float v[3] = {0.0f, 0.0f, 0.0f};
    copy_bytes(v, Device::cpu(), snapshot_.data_ptr(), snapshot_.device(), sizeof v);  // waits for the step
    take(v);
  }
  return *values_;
}

void StepResult::read_all(std::span<const StepResult> results) {
  std::vector<const StepResult*> pending;
  for (const StepResult& r : results)
    if (!r.values_) pending.push_back(&r);
  while (!pending.empty()) {  // one device at a time
    const Device d = pending.front()->snapshot_.device();
    std::vector<const StepResult*> here, rest;
    std::vector<Tensor> parts;
    for (const StepResult* r : pending) {
      if (r->snapshot_.device() != d) {
        rest.push_back(r);
        continue;
      }
      here.push_back(r);
      parts.push_back(r->snapshot_.detach().reshape({3}));
    }
    const std::vector<float> v = stack(parts).to_vector<float>();  // one download
    for (size_t k = 0; k < here.size(); ++k) here[k]->take(&v[3 * k]);
    pending = std::move(rest);
  }
}

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  check_options(options_);
  state_ = {.scale = static_cast<float>(options_.init_scale), .growth_tracker = 0, .hysteresis_left = options_.hysteresis};
}

void GradScaler::choose_path(Device d) {
  if (path_chosen_) return;
  path_chosen_ = true;
  const bool kernel = options_.step_skip == StepSkip::Kernel || (options_.step_skip == StepSkip::Auto && d.is_cuda());
  if (!kernel) return;
  dev_.device = d;
  upload_state();
}

// The host state_ into the device tensors (made at the path's choice; later, as at load_state_dict,
// overwritten in place so that pointers held by captured work stay valid): copies that wait.
void GradScaler::upload_state() {
  const Device d = dev_.device;
  if (!dev_.scale.defined()) {
    dev_.scale = empty(Shape{}, {.dtype = DType::F32, .device = d});
    dev_.trackers = empty(Shape{3}, {.dtype = DType::I64, .device = d});
    dev_.inv_scale = zeros(Shape{}, {.dtype = DType::F32, .device = d});
    dev_.found_inf = zeros(Shape{4}, {.dtype = DType::F32, .device = d});  // grows with the optimizers
  }
  const int64_t trackers[3] = {state_.growth_tracker, state_.hysteresis_left, state_.skipped_in_a_row};
  copy_bytes(dev_.scale.data_ptr(), d, &state_.scale, Device::cpu(), sizeof(float));
  copy_bytes(dev_.trackers.data_ptr(), d, trackers, Device::cpu(), sizeof trackers);
}

ScaleState GradScaler::current() const {
  if (!on_device()) return state_;
  return {.scale = download<float>(dev_.scale), .growth_tracker = download<int64_t>(dev_.trackers, 0),
          .hysteresis_left = download<int64_t>(dev_.trackers, 1), .skipped_in_a_row = download<int64_t>(dev_.trackers, 2)};
}

double GradScaler::get_scale() const {
  if (!enabled()) return 1.0;
  const ScaleState st = current();
  warn_if_below_one(st.scale);
  // the device path's update() cannot see the skips without a sync: the first read says it
  if (on_device()) throw_if_stuck(st.skipped_in_a_row, options_.max_skipped_in_a_row, st.scale, "GradScaler.get_scale");
  return static_cast<double>(st.scale);
}

// opt's found_inf flag on the device; a new optimizer gets the next slot (the flags grow, keeping theirs).
int64_t GradScaler::slot_for(const optim::Optimizer& opt) {
  auto it = dev_.slots.find(&opt);
  if (it != dev_.slots.end()) return it->second;
  const int64_t slot = static_cast<int64_t>(dev_.slots.size());
  if (slot >= dev_.found_inf.numel()) {
    Tensor grown = zeros(Shape{2 * dev_.found_inf.numel()}, {.dtype = DType::F32, .device = dev_.device});
    copy_bytes(grown.data_ptr(), dev_.device, dev_.found_inf.data_ptr(), dev_.device, dev_.found_inf.nbytes());
    dev_.found_inf = grown;
  }
  dev_.slots.emplace(&opt, slot);
  return slot;
}

void GradScaler::run(ScalerStateArgs a) const {
  a.scale = static_cast<float*>(dev_.scale.data_ptr());
  a.trackers = static_cast<int64_t*>(dev_.trackers.data_ptr());
  a.inv_scale = static_cast<float*>(dev_.inv_scale.data_ptr());
  a.found_inf = static_cast<float*>(dev_.found_inf.data_ptr());
  a.num_found = dev_.found_inf.numel();
  scaler_state_kernels().get(dev_.device, DType::F32)(a);
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!enabled()) return loss;
  HG_CHECK(loss.defined() && is_floating(loss.dtype()), "GradScaler.scale: the loss is ",
           loss.defined() ? dtype_name(loss.dtype()) : "undefined", "; pass a floating loss tensor");
  choose_path(loss.device());
  const bool keep = loss.dtype() == DType::F32 || loss.dtype() == DType::F64;
  const Tensor l = keep ? loss : loss.to(DType::F32);
  if (!on_device()) return mul(l, static_cast<double>(state_.scale));
  HG_CHECK(loss.device() == dev_.device, "GradScaler.scale: the loss is on ", loss.device(),
           " but the scaler's state lives on ", dev_.device, " (the device of its first loss); use one scaler per device");
  return mul(l, dev_.scale);  // F32 x F32 (F64 x F32 promotes): the host path's product
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!enabled()) return;
  OptimizerState& st = per_optimizer_[&opt];
  HG_CHECK(st.stage != Stage::Unscaled, "GradScaler.unscale_: unscale_() has already been called on this optimizer "
           "since the last update(); call it at most once per optimizer per iteration, before step()");
  HG_CHECK(st.stage != Stage::Stepped, "GradScaler.unscale_: unscale_() is being called after step(); call "
           "unscale_(opt) before step(opt) (step unscales by itself when you did not), then update()");
  NoGradGuard no_grad;
  const std::vector<Tensor> params = opt.parameters();
  if (!path_chosen_) {  // step() without scale(): the gradients' device decides
    Device d = Device::cpu();
    for (const Tensor& p : params)
      if (p.grad().defined()) {
        d = p.grad().device();
        break;
      }
    choose_path(d);
  }
  if (on_device()) return unscale_on_device(opt, st);
  const double inv_scale = inv_scale_of(state_.scale);  // torch: _scale.double().reciprocal().float()
  // an inf/NaN/0 factor would turn finite gradients into inf/NaN after the check: an overflow
  const bool bad_inv = bad_inv_scale(static_cast<float>(inv_scale));
  FoundInf found;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = params[i].grad();
    if (!g.defined()) continue;
    const bool deferred = g.dtype() == DType::F16;  // autograd/grad_unscale.h: the update kernel unscales it
    st.checked = true;
    unscale_grad(g, inv_scale, !deferred && !bad_inv, found);
    if (deferred) params[i].set_grad_unscale({.host = inv_scale});
  }
  st.found_inf = found.any() || bad_inv;
  if (opt.gradients_sharded()) {  // every rank checked its own gradients: one inf anywhere skips the step everywhere
    const Tensor any = full({1}, st.found_inf ? 1.0 : 0.0, {.dtype = DType::F32});
    dist::all_reduce(any, dist::ReduceOp::Max);
    st.found_inf = any.item<float>() > 0;
  }
  st.stage = Stage::Unscaled;
}

// The device path's unscale_: 1/scale and a zero flag on the device, then one unscale-and-check pass
// per gradient reading them there; F16 gradients carry the device inv_scale as their factor.
void GradScaler::unscale_on_device(optim::Optimizer& opt, OptimizerState& st) {
  const int64_t slot = slot_for(opt);
  run({.op = ScalerOp::PrepareUnscale, .slot = slot});
  const auto* inv = static_cast<const float*>(dev_.inv_scale.data_ptr());
  float* found = static_cast<float*>(dev_.found_inf.data_ptr()) + slot;
  const std::vector<Tensor> params = opt.parameters();
  BatchedCalls<UnscaleArgs> calls;  // one kernel call per gradient dtype: one launch on a GPU
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = params[i].grad();
    if (!g.defined()) continue;
    HG_CHECK(g.device() == dev_.device, "GradScaler.unscale_: the gradient of parameter ", i, " is on ", g.device(),
             " but the scaler's state lives on ", dev_.device, " (the device of its first loss); keep the model and "
             "the loss on one device, or use one scaler per device");
    const bool deferred = g.dtype() == DType::F16;  // autograd/grad_unscale.h: the update kernel unscales it
    st.checked = true;
    calls.add(g.device(), g.dtype(),
              {.n = g.numel(), .grad = g.data_ptr(), .write = !deferred, .found_inf = found, .inv_scale_at = inv});
    if (deferred) params[i].set_grad_unscale({.inv_scale = inv, .inv_scale_memory = dev_.inv_scale});
  }
  calls.run(unscale_kernels());
  // sharded gradients: found_inf agreed on over the ranks (MAX) before any rank steps (the MPI backend takes CPU
  // tensors only, as ZeroRedundantOptimizer's parameters are)
  if (opt.gradients_sharded()) dist::all_reduce(dev_.found_inf.narrow(0, slot, 1), dist::ReduceOp::Max);
  st.stage = Stage::Unscaled;
}

StepResult GradScaler::step(optim::Optimizer& opt) {
  if (!enabled()) {
    opt.step();
    return StepResult(false, 1.0);
  }
  auto it = per_optimizer_.find(&opt);
  HG_CHECK(it == per_optimizer_.end() || it->second.stage != Stage::Stepped, "GradScaler.step: step() has already "
           "been called on this optimizer since the last update(); call update() once per iteration, after the "
           "steps of all optimizers");
  if (it == per_optimizer_.end() || it->second.stage == Stage::Ready) unscale_(opt);
  OptimizerState& st = per_optimizer_.at(&opt);
  // torch's assert; a rank of sharded gradients may own none, and agreed on found_inf with the others
  HG_CHECK(st.checked || opt.gradients_sharded(), "GradScaler.step: no inf checks were recorded for this optimizer: "
           "none of its ", opt.parameters().size(), " parameters has a gradient. Run scaler.scale(loss).backward() "
           "before step(), and pass the optimizer of the parameters the loss depends on");
  st.stage = Stage::Stepped;
  if (on_device()) {  // the update kernels read found_inf and skip on the device (torch's fused path)
    const int64_t slot = slot_for(opt);
    opt.step(optim::AmpStep{.found_inf = static_cast<const float*>(dev_.found_inf.data_ptr()) + slot});
    Tensor snapshot = empty(Shape{3}, {.dtype = DType::F32, .device = dev_.device});
    run({.op = ScalerOp::Snapshot, .slot = slot, .out = static_cast<float*>(snapshot.data_ptr())});
    return StepResult(std::move(snapshot), options_.max_skipped_in_a_row);
  }
  if (!st.found_inf) opt.step();  // skipped: torch does not call optimizer.step()
  return StepResult(st.found_inf, static_cast<double>(state_.scale));
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
  per_optimizer_.clear();
  if (on_device()) {  // one thread: the OR of every optimizer's flag, state_update, flags back to 0
    run({.op = ScalerOp::Update, .params = update_params(), .dynamic = options_.dynamic});
    return;
  }
  state_update(state_, found, update_params(), options_.dynamic);
  warn_if_below_one(state_.scale);
  throw_if_stuck(state_.skipped_in_a_row, options_.max_skipped_in_a_row, state_.scale, "GradScaler.update");
}

void GradScaler::update(double new_scale) {
  if (!enabled()) return;
  HG_CHECK(normal_f32(new_scale), "GradScaler.update: new_scale=", new_scale, "; the scale is kept as F32 and must "
           "be a normal F32 number, in [", kScaleFloor, ", ", FLT_MAX, "]");
  state_.scale = static_cast<float>(new_scale);
  per_optimizer_.clear();
  if (on_device()) run({.op = ScalerOp::SetScale, .new_scale = state_.scale});
  warn_if_below_one(state_.scale);
}

void GradScaler::warn_if_below_one(float scale) const {
  if (scale >= 1.0f || warned_below_one_) return;
  warned_below_one_ = true;
  std::fprintf(stderr,
               "halfgrad warning: GradScaler: the loss scale fell below 1 (scale=%g): gradients are now scaled "
               "down. The model overflows F16 even unscaled (e.g. BF16-pretrained weights); consider BF16 autocast "
               "without a scaler, or GradScalerOptions{.min_scale = 1}. (Shown once.)\n",
               static_cast<double>(scale));
}

optim::StateDict GradScaler::state_dict() const {
  optim::StateDict sd;
  if (!enabled()) return sd;  // torch: {} when disabled
  const ScaleState st = current();
  sd["scale"] = scalar(st.scale);
  sd["_growth_tracker"] = scalar(static_cast<double>(st.growth_tracker));  // torch's key
  sd["hysteresis_tracker"] = scalar(static_cast<double>(st.hysteresis_left));
  sd["skipped_tracker"] = scalar(static_cast<double>(st.skipped_in_a_row));
  sd["max_skipped_in_a_row"] = scalar(static_cast<double>(options_.max_skipped_in_a_row));
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
  // torch's five entries are required; halfgrad's own (hysteresis, bounds, dynamic, trackers) keep this scaler's
  // options when absent (a dict saved by torch's GradScaler, or by an older halfgrad)
  o.growth_factor = read_entry(sd, "growth_factor", used);
  o.backoff_factor = read_entry(sd, "backoff_factor", used);
  o.growth_interval = read_count(sd, "growth_interval", used, 1);
  if (sd.count("hysteresis")) o.hysteresis = read_count(sd, "hysteresis", used, 1);
  if (sd.count("min_scale")) o.min_scale = read_entry(sd, "min_scale", used);
  if (sd.count("max_scale")) o.max_scale = read_entry(sd, "max_scale", used);
  if (sd.count("dynamic")) o.dynamic = read_entry(sd, "dynamic", used) != 0.0;
  const double scale = read_entry(sd, "scale", used);
  // "growth_tracker": halfgrad's name for it before it took torch's
  const bool old_key = sd.count("growth_tracker") && !sd.count("_growth_tracker");
  const int64_t growth = read_count(sd, old_key ? "growth_tracker" : "_growth_tracker", used, 0);
  const int64_t hyst = sd.count("hysteresis_tracker")
                           ? read_count(sd, "hysteresis_tracker", used, -kMaxCount, static_cast<double>(o.hysteresis))
                           : o.hysteresis;
  const int64_t skipped = sd.count("skipped_tracker") ? read_count(sd, "skipped_tracker", used, 0) : 0;
  if (sd.count("max_skipped_in_a_row")) o.max_skipped_in_a_row = read_count(sd, "max_skipped_in_a_row", used, 0);
  o.init_scale = scale;  // torch sets _init_scale from the dict
  check_options(o);
  for (const auto& [key, t] : sd)
    HG_CHECK(used.count(key), "GradScaler.load_state_dict: unexpected entry '", key,
             "'; the dict was not saved by GradScaler::state_dict()");
  options_ = o;
  state_ = {.scale = static_cast<float>(scale), .growth_tracker = growth, .hysteresis_left = hyst,
            .skipped_in_a_row = skipped};
  if (on_device()) upload_state();  // torch fills the live device tensors
}

}  // namespace hg::amp
