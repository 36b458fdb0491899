#pragma once
// GradientHistogram: where the values of a network sit on the log2 scale, per layer and per kind,
// against the limits of F16 and BF16 (amp/inspect/format_limits.h) -- the picture behind loss scaling and
// master weights (Micikevicius et al., ICLR 2018, fig. 3 and sec. 3.1).
//
//   hg::amp::inspect::GradientHistogram hist;
//   hist.watch(model);                              // activations + activation gradients of leaf modules
//   hist.set_loss_scale(scaler.get_scale());        // judge gradients as if multiplied by this
//   auto before = hg::amp::inspect::snapshot_weights(model);
//   loss.backward();  hist.record_weight_grads(model);  hist.record_weights(model);
//   opt.step();       hist.record_updates(before, model);
//   hist.unwatch();  hist.write_csv("hist.csv");  hist.write_json("hist.json");
//
// A debugging tool, not a training path: every record copies the tensor to the host (a device sync
// for CUDA tensors) and counts there, one value at a time, in double.
//
// Bins: one per integer exponent e = floor(log2|x|), e in [-149, 127] (F32's smallest subnormal to
// its largest value), plus a zero bin and counts of inf and NaN. F64 values outside that range are
// counted as below_range / above_range.
//
// Precision counts, over the nonzero finite values (the fractions divide by that number):
//  * gradients (ActivationGrad, WeightGrad) are first multiplied by the loss scale (set_loss_scale),
//    the scale a loss scaler would apply before storing them in F16. It is a "what if" factor: the
//    histogram bins hold the values as recorded. Gradients that come from scaler.scale(loss).backward()
//    are already scaled: leave the scale at 1 for them. Other kinds are judged as they are.
//  * the scaled value is rounded to F32 (exact for an F32/F16/BF16 tensor and a power-of-two scale;
//    an F64 tensor may round twice), then to F16 and BF16 with core/half.h's conversions:
//    flush (rounds to 0: |x| <= 2^-25 in F16), subnormal (rounds to a nonzero subnormal: < 2^-14),
//    overflow (rounds to inf: >= 65520); plus the plain threshold count below_min_subnormal
//    (|x| < 2^-24 in F16, < 2^-133 in BF16), which also counts values in (2^-25, 2^-24) that round up.
//  * updates (record_update): swamped in F16, exactly (fl16(fl16(w) + u) == fl16(w), the sum in F32 as
//    halfgrad's update kernels do) and by the rule of thumb |w| >= 2048 |u|, over the nonzero updates;
//    and a second histogram, of |u| / ulp16(w) (f16_spacing): bin e holds ratios in [2^e, 2^(e+1)), so
//    the bins e <= -2 (below half a spacing) are the updates F16 rounds away.
// Counts accumulate over records (and over forward/backward passes while watched) until clear().
//
// Names: activations and their gradients are keyed by the module's dotted name ("features.0"),
// weights, weight gradients and updates by the parameter's ("features.0.weight").
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "amp/inspect/format_limits.h"
#include "core/tensor.h"
#include "nn/module.h"

namespace hg::amp::inspect {

inline constexpr int kMinExponent = -149;  // F32's smallest subnormal, 2^-149
inline constexpr int kMaxExponent = 127;   // F32's largest exponent
inline constexpr int kNumExponentBins = kMaxExponent - kMinExponent + 1;

enum class Kind : uint8_t { Activation, ActivationGrad, WeightGrad, Weight, Update };
const char* kind_name(Kind k);  // "activation", "activation_grad", "weight_grad", "weight", "update"
bool is_gradient(Kind k);       // the kinds the loss scale multiplies

// Counts of one format's rounding outcomes (see the header comment).
struct FormatCounts {
  int64_t flush = 0;
  int64_t below_min_subnormal = 0;
  int64_t subnormal = 0;
  int64_t overflow = 0;
};

struct LayerStats {
  std::vector<int64_t> bins = std::vector<int64_t>(kNumExponentBins, 0);  // index e - kMinExponent
  int64_t count = 0;  // every value recorded
  int64_t zeros = 0, infs = 0, nans = 0;
  int64_t below_range = 0, above_range = 0;  // F64 values outside [2^-149, 2^128)
  FormatCounts f16, bf16, e4m3, e5m2;  // FP8: unscaled casts (scale 1, or the loss_scale factor)
  int64_t updates = 0;              // nonzero finite updates (Kind::Update)
  int64_t f16_swamped = 0;          // exact
  int64_t f16_swamped_rule = 0;     // |w| >= 2048 |u|
  std::vector<int64_t> ulp_bins = {};  // Kind::Update: log2(|u| / ulp16(w)) bins, index e - kMinExponent
  double loss_scale = 1.0;          // the factor of the last record (1 for non-gradient kinds)

  int64_t nonzero() const { return count - zeros - infs - nans; }  // nonzero finite values
  int64_t bin(int exponent) const;  // 0 outside [kMinExponent, kMaxExponent]
  int64_t ulp_bin(int exponent) const;  // the same for ulp_bins (0 when no update was recorded)
  double fraction(int64_t n) const { return ratio(n, nonzero()); }  // of the nonzero finite values
  double swamped_fraction(int64_t n) const { return ratio(n, updates); }  // of the nonzero updates
  static double ratio(int64_t n, int64_t d) { return d > 0 ? static_cast<double>(n) / static_cast<double>(d) : 0.0; }
};

struct WatchOptions {
  bool activations = true;       // record each leaf module's output
  bool activation_grads = true;  // and the gradient that reaches it in backward (an autograd hook)
};

// Parameter name -> a host copy of its values (snapshot_weights), for record_updates.
using WeightSnapshot = std::map<std::string, Tensor>;
WeightSnapshot snapshot_weights(const nn::Module& m);

class GradientHistogram {
 public:
  GradientHistogram();
  ~GradientHistogram();  // unwatch()
  GradientHistogram(const GradientHistogram&) = delete;
  GradientHistogram& operator=(const GradientHistogram&) = delete;

  // Registers a forward hook on each leaf module of m (m itself when it has no children, named by its
  // type) and, when the output requires grad, an autograd hook on the output that records the
  // gradient and returns it unchanged. Hooks fire for calls through Module::operator() (Sequential's
  // children, `model(x)`). The hooks hold only a weak reference to the counts: destroying the
  // histogram first is safe. Watching m directly as a leaf keeps a raw pointer: unwatch() before m dies.
  void watch(nn::Module& m, WatchOptions o = {});
  void unwatch();  // removes the forward hooks (gradient hooks already attached to a graph still record)

  // The factor gradients are judged at (GradScaler::get_scale()); finite and > 0. Applies to later records.
  void set_loss_scale(double scale);
  double loss_scale() const;

  void record(const std::string& name, Kind kind, const Tensor& t);
  void record_weights(const nn::Module& m);
  void record_weight_grads(const nn::Module& m);  // parameters without a gradient are skipped
  // An update u to weights w (same number of elements): its histogram plus the swamping counts.
  void record_update(const std::string& name, const Tensor& weight, const Tensor& update);
  // u = after - before for every name in both; w = before. With F16 parameters and FP32 masters the
  // masters hold the true update: snapshot {name, opt.master(i)} yourself and pass those.
  void record_updates(const WeightSnapshot& before, const WeightSnapshot& after);
  void record_updates(const WeightSnapshot& before, const nn::Module& after);
  void clear();  // drops every count (keeps the hooks and the loss scale)

  // (name, kind) in the order first recorded.
  std::vector<std::pair<std::string, Kind>> keys() const;
  const LayerStats* find(const std::string& name, Kind kind) const;  // null when never recorded
  const LayerStats& at(const std::string& name, Kind kind) const;    // throws naming the known keys

  // One row per (layer, kind, bin): layer,kind,bin,lower,upper,count with bin an exponent e
  // (lower = 2^e, upper = 2^(e+1)) or zero/below_range/above_range/inf/nan; an update's |u| / ulp16(w)
  // histogram follows as kind "update_ulp16" (exponent bins only). Written atomically.
  void write_csv(const std::string& path) const;
  // The markers (F16/BF16 limits) and, per (layer, kind), the counts and fractions above.
  void write_json(const std::string& path) const;

  struct State;  // shared with the hooks (histogram.cpp)

 private:
  struct Watched {
    std::weak_ptr<nn::Module> module;  // a watched child
    nn::Module* root = nullptr;        // or the watched module itself, when it is a leaf
    nn::HookHandle handle;
  };
  std::shared_ptr<State> state_;
  std::vector<Watched> watched_;
};

}  // namespace hg::amp::inspect
