#include "amp/inspect/nonfinite.h"

#include <cfloat>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <map>
#include <utility>
#include <vector>

#include "amp/inspect/formats.h"
#include "amp/inspect/module_names.h"
#include "autograd/node.h"
#include "ops/autocast/autocast.h"

namespace hg::amp::inspect {

const char* pass_name(Pass p) { return p == Pass::Forward ? "forward" : "backward"; }

const char* site_name(Site s) {
  switch (s) {
    case Site::Output: return "output";
    case Site::AutocastCast: return "autocast_cast";
    case Site::Input: return "input";
    case Site::Gradient: return "gradient";
    case Site::IncomingGradient: return "incoming_gradient";
  }
  return "?";
}

const char* cause_name(Cause c) {
  switch (c) {
    case Cause::Overflow: return "overflow";
    case Cause::DivideByZero: return "divide_by_zero";
    case Cause::Invalid: return "invalid";
    case Cause::Upstream: return "upstream";
  }
  return "?";
}

double dtype_max(DType dt) {
  if (dt == DType::F64) return DBL_MAX;
  if (dt == DType::I64) return static_cast<double>(INT64_MAX);
  return format_info(dt).max_finite;  // F32, F16, BF16: derived from the layout (formats.h)
}

namespace {

// One tensor scanned on the host: its non-finite elements and its largest finite magnitude. Undefined and
// integer tensors scan as empty (integers cannot hold inf/NaN).
struct Scan {
  NonFiniteCounts counts;
  double largest_finite = 0;
  bool floating = false;
};

Scan scan(const Tensor& t) {
  Scan s;
  if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0) return s;
  s.floating = true;
  const std::vector<double> v = t.detach().to_vector<double>();  // copies a CUDA tensor to the host
  for (size_t i = 0; i < v.size(); ++i) {
    const double x = v[i];
    if (std::isfinite(x)) {
      s.largest_finite = std::max(s.largest_finite, std::fabs(x));
      continue;
    }
    if (std::isnan(x)) ++s.counts.nan;
    else if (x > 0) ++s.counts.pos_inf;
    else ++s.counts.neg_inf;
    if (s.counts.first_index < 0) s.counts.first_index = static_cast<int64_t>(i);
  }
  return s;
}

bool nonfinite(const Scan& s) { return s.counts.total() > 0; }

// inf (with or without NaN: inf - inf inside the op) is an overflow; NaN alone an invalid operation.
Cause classify(const NonFiniteCounts& c) { return c.pos_inf + c.neg_inf > 0 ? Cause::Overflow : Cause::Invalid; }

uint64_t node_seq(const Tensor& t) {
  if (!t.defined()) return 0;
  const TensorImpl* impl = t.unsafe_impl();
  return impl->autograd && impl->autograd->grad_fn ? impl->autograd->grad_fn->seq : 0;
}

// The ops whose forward turns a zero operand into inf (1/0, log 0, 0^-1, rsqrt 0).
bool has_pole(OpId op) { return op == OpId::Div || op == OpId::Log || op == OpId::Pow || op == OpId::Rsqrt; }

// The nodes one observed op recorded: sequence numbers in (lo, hi], hi being its output's node. Its
// inputs existed before it ran, so every node it made (autocast casts included) is newer than theirs.
struct OpSpan {
  uint64_t lo = 0;
  std::string op = {}, module = {}, module_type = {};
  std::map<uint64_t, int64_t> casts = {};  // the autocast casts' nodes -> the input they cast
};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

struct NonFiniteOrigin::State {
  explicit State(const nn::Module* root) : names(root) {}
  ModuleNames names;
  std::optional<NonFiniteFinding> first;
  int64_t nonfinite_ops = 0, nonfinite_nodes = 0, ops = 0, nodes = 0;
  std::map<uint64_t, OpSpan> spans;  // by the span's hi

  void remember_span(const OpCall& c, const Tensor& y);
  void on_op(const OpCall& c, const Tensor& y);
  void on_node(const Node& n, const Tensor& g, const std::vector<Tensor>& grads);
  void name_node(NonFiniteFinding& f, const Node& n) const;
};

void NonFiniteOrigin::State::remember_span(const OpCall& c, const Tensor& y) {
  const uint64_t hi = node_seq(y);
  if (hi == 0) return;  // nothing recorded: no backward node to name
  OpSpan s{.op = op_name(c.op)};
  for (const Tensor& t : c.inputs) s.lo = std::max(s.lo, node_seq(t));
  const ModuleName m = names.current();
  s.module = m.label(), s.module_type = m.type;
  for (const CastRecord& r : c.casts)
    if (r.input < c.ran.size() && node_seq(c.ran[r.input]) > s.lo)
      s.casts[node_seq(c.ran[r.input])] = static_cast<int64_t>(r.input);
  spans[hi] = std::move(s);
}

namespace {

// The forward finding of one op, or nullopt: the first non-finite input as passed (Upstream), else the
// first cast that made one (AutocastCast), else a non-finite output from finite inputs (Output).
std::optional<NonFiniteFinding> forward_finding(const OpCall& c, const Tensor& y, const std::vector<Scan>& passed,
                                                const std::vector<Scan>& ran, const Scan& out) {
  NonFiniteFinding f{.pass = Pass::Forward, .op = op_name(c.op)};
  for (size_t i = 0; i < passed.size(); ++i) {
    const bool before = nonfinite(passed[i]), after = nonfinite(ran[i]);
    if (!before && !after) continue;
    const Tensor& t = before ? c.inputs[i] : c.ran[i];
    f.site = before ? Site::Input : Site::AutocastCast;
    f.cause = before ? Cause::Upstream : Cause::Overflow;  // a cast of finite values can only overflow
    f.input = static_cast<int64_t>(i), f.dtype = t.dtype(), f.shape = t.shape();
    f.counts = before ? passed[i].counts : ran[i].counts;
    f.largest_finite_input = passed[i].largest_finite;
    f.seq = before ? 0 : node_seq(t);
    return f;
  }
  if (!nonfinite(out)) return std::nullopt;
  f.site = Site::Output, f.cause = classify(out.counts);
  f.dtype = y.dtype(), f.shape = y.shape(), f.counts = out.counts, f.seq = node_seq(y);
  for (const Scan& s : ran) f.largest_finite_input = std::max(f.largest_finite_input, s.largest_finite);
  if (f.cause != Cause::Overflow || !has_pole(c.op)) return f;
  for (const Tensor& t : c.ran)  // an operand of the same size holding 0 where the first inf is
    if (t.defined() && is_floating(t.dtype()) && t.numel() == y.numel() &&
        t.detach().to_vector<double>()[static_cast<size_t>(out.counts.first_index)] == 0.0)
      f.cause = Cause::DivideByZero;
  return f;
}

}  // namespace

void NonFiniteOrigin::State::on_op(const OpCall& c, const Tensor& y) {
  ++ops;
  remember_span(c, y);
  std::vector<Scan> passed, ran;
  bool any = false;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    passed.push_back(scan(c.inputs[i]));
    const bool same = i >= c.ran.size() || c.ran[i].same(c.inputs[i]);
    ran.push_back(same ? passed.back() : scan(c.ran[i]));
    any = any || nonfinite(passed.back()) || nonfinite(ran.back());
  }
  const Scan out = scan(y);
  any = any || nonfinite(out);
  if (!any) return;
  ++nonfinite_ops;
  if (first) return;
  first = forward_finding(c, y, passed, ran, out);
  if (first) {
    const ModuleName m = names.current();
    first->module = m.label(), first->module_type = m.type;
  }
}

// Names a backward finding by the observed forward op whose span holds the node.
void NonFiniteOrigin::State::name_node(NonFiniteFinding& f, const Node& n) const {
  f.op = n.name, f.seq = n.seq;
  const auto it = spans.lower_bound(n.seq);
  if (it == spans.end() || n.seq <= it->second.lo) return;
  const OpSpan& s = it->second;
  f.forward_op = s.op, f.module = s.module, f.module_type = s.module_type;
  if (const auto c = s.casts.find(n.seq); c != s.casts.end()) f.node_is_cast = true, f.cast_input = c->second;
}

void NonFiniteOrigin::State::on_node(const Node& n, const Tensor& g, const std::vector<Tensor>& grads) {
  ++nodes;
  const Scan in = scan(g);
  std::vector<Scan> outs;
  bool any = nonfinite(in);
  for (const Tensor& t : grads) {
    outs.push_back(scan(t));
    any = any || nonfinite(outs.back());
  }
  if (!any) return;
  ++nonfinite_nodes;
  if (first) return;
  NonFiniteFinding f{.pass = Pass::Backward, .largest_finite_input = in.largest_finite};
  if (nonfinite(in)) {
    f.site = Site::IncomingGradient, f.cause = Cause::Upstream;
    f.dtype = g.dtype(), f.shape = g.shape(), f.counts = in.counts;
  } else {
    size_t i = 0;
    while (!nonfinite(outs[i])) ++i;  // one exists: `any` holds and the incoming gradient is finite
    f.site = Site::Gradient, f.cause = classify(outs[i].counts), f.input = static_cast<int64_t>(i);
    f.dtype = grads[i].dtype(), f.shape = grads[i].shape(), f.counts = outs[i].counts;
  }
  name_node(f, n);
  first = std::move(f);
}

namespace {

std::string describe_where(const NonFiniteFinding& f) {
  std::string s = std::string("first non-finite in ") + pass_name(f.pass) + " of '" + f.op + "'";
  if (f.node_is_cast)
    s += " (autocast cast of input " + std::to_string(f.cast_input) + " of '" + f.forward_op + "')";
  else if (!f.forward_op.empty() && f.forward_op != f.op)
    s += " (recorded by '" + f.forward_op + "')";
  if (f.module_type.empty()) s += ", outside any module";
  else if (f.module == f.module_type) s += ", in module " + f.module;
  else s += ", in module '" + f.module + "' (" + f.module_type + ")";
  return s;
}

std::string describe_tensor(const NonFiniteFinding& f) {
  const std::string of = " (" + std::string(dtype_name(f.dtype)) + " " + f.shape.str() + ")";
  const std::string i = std::to_string(f.input);
  switch (f.site) {
    case Site::Output: return "output" + of;
    case Site::AutocastCast: return "input " + i + " after its autocast cast" + of;
    case Site::Input: return "input " + i + of;
    case Site::Gradient: return "gradient of input " + i + of;
    case Site::IncomingGradient: return "incoming gradient" + of;
  }
  return "?";
}

std::string describe_cause(const NonFiniteFinding& f) {
  const char* what = f.pass == Pass::Backward ? "incoming gradient" : "input";
  switch (f.cause) {
    case Cause::Overflow:
      return std::string(dtype_name(f.dtype)) + " overflow (|x| > " + fmt("%g", dtype_max(f.dtype)) +
             "; largest finite |" + what + "| " + fmt("%.4g", f.largest_finite_input) + ")";
    case Cause::DivideByZero: return "division by zero (a zero operand where the first inf is)";
    case Cause::Invalid: return "invalid operation (NaN from finite values: 0/0, inf-inf, 0*inf, log/sqrt of x < 0)";
    case Cause::Upstream:
      return "already non-finite on arrival (a leaf, the seed, a gradient sum or hook, or an op not observed)";
  }
  return "?";
}

}  // namespace

std::string NonFiniteFinding::describe() const {
  return describe_where(*this) + ", " + describe_tensor(*this) + ": " + describe_cause(*this) + "; " +
         std::to_string(counts.pos_inf) + " +inf, " + std::to_string(counts.neg_inf) + " -inf, " +
         std::to_string(counts.nan) + " NaN, first at flat index " + std::to_string(counts.first_index);
}

// The op observer (amp::ObserveOps) and the backward observer, registered for the inspector's lifetime.
struct NonFiniteOrigin::Guards : OpObserver {
  State& st;
  ObserveOps ops;
  autograd::ObserveBackward backward;
  explicit Guards(State& s)
      : st(s), ops(*this), backward([&s](const Node& n, const Tensor& g, const std::vector<Tensor>& grads) {
          s.on_node(n, g, grads);
        }) {}
  void on_op(const OpCall& c, const Tensor& y) override { st.on_op(c, y); }
};

NonFiniteOrigin::NonFiniteOrigin(const nn::Module* root)
    : state_(std::make_unique<State>(root)), guards_(std::make_unique<Guards>(*state_)) {}

NonFiniteOrigin::~NonFiniteOrigin() = default;

bool NonFiniteOrigin::found() const { return state_->first.has_value(); }
const std::optional<NonFiniteFinding>& NonFiniteOrigin::first() const { return state_->first; }
int64_t NonFiniteOrigin::nonfinite_ops() const { return state_->nonfinite_ops; }
int64_t NonFiniteOrigin::nonfinite_nodes() const { return state_->nonfinite_nodes; }
int64_t NonFiniteOrigin::ops_seen() const { return state_->ops; }
int64_t NonFiniteOrigin::nodes_seen() const { return state_->nodes; }

std::string NonFiniteOrigin::describe() const {
  if (state_->first) return state_->first->describe();
  return "no non-finite value in " + std::to_string(state_->ops) + " ops and " + std::to_string(state_->nodes) +
         " backward nodes";
}

void NonFiniteOrigin::clear() {
  state_->first.reset();
  state_->nonfinite_ops = state_->nonfinite_nodes = state_->ops = state_->nodes = 0;
  state_->spans.clear();
}

}  // namespace hg::amp::inspect
