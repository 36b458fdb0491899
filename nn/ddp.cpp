// nn::DistributedDataParallel (nn/ddp.h): the model check and broadcast at construction, the buckets, the
// gradient hooks that start their all-reduces, and the end-of-backward callback that waits and writes back.
#include "nn/ddp.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>
#include <unordered_set>
#include <utility>

#include "autograd/node.h"
#include "core/error.h"
#include "ops/dispatch.h"

namespace hg::nn {

// ---- CommFuture and the built-in hooks ------------------------------------------------------------------

bool CommFuture::is_completed() {
  if (!done_ && work_.is_completed()) finish();
  return done_;
}

void CommFuture::wait() {
  if (done_) return;
  work_.wait();
  finish();
}

void CommFuture::finish() {
  done_ = true;
  if (then_) std::exchange(then_, nullptr)();
}

namespace ddp_comm_hooks {

CommHook allreduce_hook() {
  return [](GradBucket& b) {
    b.buffer.div_(static_cast<double>(dist::get_world_size()));
    return CommFuture(dist::all_reduce(b.buffer, dist::ReduceOp::Sum, /*async_op=*/true));
  };
}

namespace {
CommHook compress_hook(DType dt) {
  return [dt](GradBucket& b) {
    const Tensor compressed = b.buffer.to(dt).contiguous();
    compressed.div_(static_cast<double>(dist::get_world_size()));  // in the 16-bit type, before the sum
    const Tensor buffer = b.buffer;
    return CommFuture(dist::all_reduce(compressed, dist::ReduceOp::Sum, /*async_op=*/true),
                      [compressed, buffer] { buffer.copy_(compressed); });
  };
}
}  // namespace

CommHook fp16_compress_hook() { return compress_hook(DType::F16); }
CommHook bf16_compress_hook() { return compress_hook(DType::BF16); }

}  // namespace ddp_comm_hooks

// ---- the state the hooks share ---------------------------------------------------------------------------

namespace {

struct Param {
  Tensor t;
  std::string name;
  int bucket = 0;
  int64_t offset = 0;  // in its bucket's buffer, elements
  bool ready = false;  // its gradient is in its bucket for this backward
  bool used = false;   // a backward reached it since the last averaging one (no_sync steps included)
};

struct Bucket {
  GradBucket grads;
  std::vector<int> params;  // indices into State::params
  int pending = 0;          // parameters not yet ready in this backward
  CommFuture future;
};

}  // namespace

struct DistributedDataParallel::State {
  DDPOptions options;
  int world = 1;
  std::vector<Param> params;
  std::vector<Bucket> buckets;
  std::vector<Tensor> buffers;  // the module's, broadcast from rank 0 by every forward
  std::vector<HookHandle> hooks;
  CommHook comm_hook;
  bool require_sync = true;       // false inside no_sync
  bool expect_hooks = false;      // the last forward asked for averaging in the next backward
  bool backward_started = false;  // the first hook of that backward ran (and queued the finalizer)
  bool finalizing = false;
  int next_bucket = 0;            // buckets start in index order
  std::vector<int> unused;        // find_unused_parameters: not reached by the last forward's graph
  std::vector<int> ready_order;   // the first averaging backward's order of gradients, for the rebuild
  bool rebuilt = false;           // the buckets follow that order (torch's rebuild after the first iteration)
  std::optional<autograd::ObserveBackward> progress;  // polls the started buckets after every node of a backward
  Stats stats;

  void reset_iteration() {
    for (Param& p : params) p.ready = false;
    for (Bucket& b : buckets) {
      b.pending = static_cast<int>(b.params.size());
      b.future = CommFuture();
    }
    next_bucket = 0;
    expect_hooks = backward_started = finalizing = false;
    progress.reset();
  }
};

namespace {

using State = DistributedDataParallel::State;

void start_ready_buckets(State& s) {
  while (s.next_bucket < static_cast<int>(s.buckets.size()) && s.buckets[s.next_bucket].pending == 0) {
    Bucket& b = s.buckets[s.next_bucket++];
    b.future = s.comm_hook ? s.comm_hook(b.grads)
                           : CommFuture(dist::all_reduce(b.grads.buffer, dist::ReduceOp::Sum, /*async_op=*/true));
    if (!s.finalizing) ++s.stats.buckets_started_in_backward;
  }
}

// Gives MPI a chance to move the started collectives on (it progresses them only inside its calls).
void poll(State& s) {
  for (int i = 0; i < s.next_bucket; ++i)
    if (!s.buckets[i].future.is_completed()) return;
}

// Copies p's gradient (or zeros, when it has none) into its bucket; starts the buckets that became full.
void mark_ready(State& s, int i) {
  Param& p = s.params[i];
  Bucket& b = s.buckets[p.bucket];
  const Tensor slot = b.grads.buffer.narrow(0, p.offset, p.t.numel());
  const Tensor g = p.t.grad();
  if (g.defined()) {
    HG_CHECK(g.dtype() == b.grads.buffer.dtype(), "DistributedDataParallel: the gradient of '", p.name, "' is ",
             g.dtype(), " but its bucket was made for ", b.grads.buffer.dtype(), "; wrap the model after converting it "
             "(amp::initialize, Module::to(DType)), not before");
    HG_CHECK(!p.t.grad_unscale().pending(), "DistributedDataParallel: the gradient of '", p.name, "' still carries a "
             "factor from GradScaler::unscale_; unscale after the backward that averages the gradients, not between "
             "no_sync steps");
    if (s.comm_hook) {
      slot.copy_(g.reshape({-1}));
    } else {  // torch's reducer (its mul_out): the gradient times 1/world size on its way into the bucket, one pass
      Tensor out = slot.view(g.shape());
      run_elementwise("DistributedDataParallel", {EwOp::MulScalar, EwMode::Forward, 1.0 / s.world}, {g}, out);
    }
  } else {
    slot.zero_();
  }
  p.ready = true;
  if (--b.pending == 0) start_ready_buckets(s);
}

void finalize(State& s) {
  s.finalizing = true;
  std::vector<std::string> missing;
  for (int i = 0; i < static_cast<int>(s.params.size()); ++i) {
    if (s.params[i].ready) continue;
    if (s.options.find_unused_parameters) mark_ready(s, i);
    else missing.push_back(s.params[i].name);
  }
  if (!missing.empty()) {
    std::ostringstream names;
    for (size_t k = 0; k < missing.size() && k < 8; ++k) names << (k ? ", " : "") << "'" << missing[k] << "'";
    if (missing.size() > 8) names << " and " << missing.size() - 8 << " more";
    s.reset_iteration();
    s.ready_order.clear();  // the rebuild takes the order of a complete backward
    HG_FAIL("DistributedDataParallel: ", missing.size(), " parameter(s) got no gradient in this backward: ",
            names.str(), ". Their buckets could not be averaged (the other ranks wait for them). Use every parameter "
            "in the loss, or pass DDPOptions{.find_unused_parameters = true}");
  }
  s.progress.reset();
  const auto t0 = std::chrono::steady_clock::now();
  for (Bucket& b : s.buckets) b.future.wait();
  s.stats.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<int64_t> used(s.params.size(), 1);
  if (s.options.find_unused_parameters) {  // a parameter no rank used keeps its gradient (torch's)
    std::vector<int64_t> local;
    for (const Param& p : s.params) local.push_back(p.used ? 1 : 0);
    const Tensor t = from_vector(local, {static_cast<int64_t>(local.size())}, {.dtype = DType::I64});
    dist::all_reduce(t, dist::ReduceOp::Max);
    used = t.to_vector<int64_t>();
  }
  for (size_t i = 0; i < s.params.size(); ++i) {
    Param& p = s.params[i];
    p.used = false;
    if (!used[i]) continue;
    const Tensor avg = s.buckets[p.bucket].grads.buffer.narrow(0, p.offset, p.t.numel()).view(p.t.shape());
    const Tensor g = p.t.grad();
    if (s.options.gradient_as_bucket_view) p.t.set_grad(avg);
    else if (g.defined()) g.copy_(avg);
    else p.t.set_grad(avg.clone());
  }
  ++s.stats.backwards;
  s.stats.buckets += static_cast<int64_t>(s.buckets.size());
  s.reset_iteration();
}

void on_gradient(const std::weak_ptr<State>& weak, int i) {
  const auto sp = weak.lock();
  if (!sp) return;
  State& s = *sp;
  s.params[i].used = true;
  if (!s.expect_hooks) return;  // no_sync, grad mode off at the forward, or a backward without a forward
  if (!s.backward_started) {
    s.backward_started = true;
    autograd::queue_callback([weak] {
      if (const auto st = weak.lock()) finalize(*st);
    });
    // MPI moves a started collective on only inside its calls: poll after every node of the backward
    s.progress.emplace([weak](const Node&, const Tensor&, const std::vector<Tensor>&) {
      if (const auto st = weak.lock()) poll(*st);
    });
    for (int u : s.unused) mark_ready(s, u);
  }
  if (!s.rebuilt) s.ready_order.push_back(i);
  HG_CHECK(!s.params[i].ready, "DistributedDataParallel: parameter '", s.params[i].name, "' got a gradient twice in "
           "one averaging backward (used outside the wrapped module's forward, or a second backward through the same "
           "forward); run the forward again before each backward, or compute such terms inside the module");
  mark_ready(s, i);
  poll(s);  // one MPI call right after a bucket may have started; the observer polls after each later node
}

// ---- construction ----------------------------------------------------------------------------------------

std::string describe(int64_t dtype, const std::vector<int64_t>& dims) {
  std::ostringstream o;
  o << dtype_name(static_cast<DType>(dtype)) << " [";
  for (size_t k = 0; k < dims.size(); ++k) o << (k ? ", " : "") << dims[k];
  o << "]";
  return o.str();
}

// Every rank's parameter list (count, then dtype, ndim and dims of each) gathered and compared with rank 0's; the
// first difference becomes an hg::Error on every rank, named by the parameter's name here.
void check_same_model(const std::vector<Param>& params, int world) {
  std::vector<int64_t> sig{static_cast<int64_t>(params.size())};
  for (const Param& p : params) {
    sig.push_back(static_cast<int64_t>(p.t.dtype()));
    sig.push_back(p.t.ndim());
    for (int64_t d = 0; d < p.t.ndim(); ++d) sig.push_back(p.t.size(d));
  }
  const Tensor len = from_vector(std::vector<int64_t>{static_cast<int64_t>(sig.size())}, {1}, {.dtype = DType::I64});
  const Tensor lens = empty({world}, {.dtype = DType::I64});
  dist::all_gather_into_tensor(lens, len);
  const std::vector<int64_t> all_lens = lens.to_vector<int64_t>();
  const int64_t longest = *std::max_element(all_lens.begin(), all_lens.end());
  sig.resize(static_cast<size_t>(longest), -1);
  const Tensor all = empty({world * longest}, {.dtype = DType::I64});
  dist::all_gather_into_tensor(all, from_vector(sig, {longest}, {.dtype = DType::I64}));
  const std::vector<int64_t> v = all.to_vector<int64_t>();
  const auto of = [&](int r) { return std::vector<int64_t>(v.begin() + r * longest, v.begin() + (r + 1) * longest); };
  const std::vector<int64_t> first = of(0);
  for (int r = 1; r < world; ++r) {
    const std::vector<int64_t> other = of(r);
    HG_CHECK(other[0] == first[0], "DistributedDataParallel: the model differs across ranks: rank 0 has ", first[0],
             " parameters that require grad, rank ", r, " has ", other[0], "; every rank must build the same model");
    size_t a = 1;
    for (int64_t i = 0; i < first[0]; ++i) {
      const std::vector<int64_t> d0(first.begin() + a + 2, first.begin() + a + 2 + first[a + 1]);
      const std::vector<int64_t> d1(other.begin() + a + 2, other.begin() + a + 2 + other[a + 1]);
      HG_CHECK(first[a] == other[a] && d0 == d1, "DistributedDataParallel: the model differs across ranks: parameter ",
               i, " ('", params[i].name, "' here) is ", describe(first[a], d0), " on rank 0 but ",
               describe(other[a], d1), " on rank ", r, "; every rank must build the same model");
      a += 2 + d0.size();
    }
  }
}

// torch's _compute_bucket_assignment_by_size: the parameters in `order`, one open bucket per dtype, cut once it holds
// `limit` bytes (1 MiB for a dtype's first bucket, then cap), the open ones last. At construction `order` is the
// registration order and the buckets are then sorted by their first parameter and reversed, so the last-registered
// parameters (the first gradients of a backward) are reduced first; the rebuild after the first backward passes the
// order the gradients arrived in and keeps the buckets as formed.
std::vector<std::vector<int>> assign_buckets(const std::vector<Param>& params, const std::vector<int>& order,
                                             int64_t cap, bool reverse_registration) {
  constexpr int64_t kFirstBucketBytes = 1 << 20;
  struct Open {
    std::vector<int> members;
    int64_t bytes = 0;
    bool first = true;
  };
  std::map<DType, Open> open;
  std::vector<std::vector<int>> out;
  for (int i : order) {
    Open& b = open[params[i].t.dtype()];
    b.members.push_back(i);
    b.bytes += static_cast<int64_t>(params[i].t.nbytes());
    if (b.bytes >= (b.first ? kFirstBucketBytes : cap)) {
      out.push_back(std::move(b.members));
      b = Open{.members = {}, .bytes = 0, .first = false};
    }
  }
  for (auto& [dt, b] : open)
    if (!b.members.empty()) out.push_back(std::move(b.members));
  if (reverse_registration)
    std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.front() > y.front(); });
  return out;
}

// The buckets of `groups`: each parameter's bucket and offset, zeroed buffers.
void make_buckets(State& s, const std::vector<std::vector<int>>& groups) {
  s.buckets.clear();
  for (size_t bi = 0; bi < groups.size(); ++bi) {
    Bucket b;
    b.params = groups[bi];
    int64_t n = 0;
    for (int i : b.params) {
      s.params[i].bucket = static_cast<int>(bi);
      s.params[i].offset = n;
      b.grads.parameters.push_back(s.params[i].t);
      b.grads.offsets.push_back(n);
      n += s.params[i].t.numel();
    }
    b.grads.index = static_cast<int>(bi);
    b.grads.num_buckets = static_cast<int>(groups.size());
    const Tensor& first = s.params[b.params.front()].t;
    b.grads.buffer = zeros({n}, {.dtype = first.dtype(), .device = first.device()});
    s.buckets.push_back(std::move(b));
  }
  s.reset_iteration();
}

int64_t cap_bytes(const DDPOptions& o) { return static_cast<int64_t>(o.bucket_cap_mb * 1024 * 1024); }

// torch's rebuild after the first averaging backward: the buckets re-formed in the order the gradients arrived (rank
// 0's order, broadcast, so that every rank forms the same buckets), so the first full bucket is the first to start.
// Not with find_unused_parameters (as torch).
void rebuild_buckets(State& s) {
  s.rebuilt = true;
  const int64_t n = static_cast<int64_t>(s.params.size());
  std::vector<char> seen(s.params.size(), 0);
  for (int i : s.ready_order) seen[static_cast<size_t>(i)] = 1;
  const bool complete = static_cast<int64_t>(s.ready_order.size()) == n &&
                        std::all_of(seen.begin(), seen.end(), [](char c) { return c != 0; });
  if (s.options.find_unused_parameters || !complete) return;
  std::vector<int64_t> order(s.ready_order.begin(), s.ready_order.end());
  const Tensor t = from_vector(order, {n}, {.dtype = DType::I64});
  dist::broadcast(t, 0);
  order = t.to_vector<int64_t>();
  make_buckets(s, assign_buckets(s.params, std::vector<int>(order.begin(), order.end()), cap_bytes(s.options), false));
  s.ready_order.clear();
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<Module> module, DDPOptions options)
    : module_(std::move(module)), s_(std::make_shared<State>()) {
  HG_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  HG_CHECK(dist::is_initialized(), "DistributedDataParallel: the process group is not initialized; call "
           "hg::dist::init_process_group() first (every rank, launched with mpirun)");
  HG_CHECK(options.bucket_cap_mb > 0, "DistributedDataParallel: bucket_cap_mb ", options.bucket_cap_mb,
           " must be positive (torch's default is 25)");
  register_module("module", module_);
  State& s = *s_;
  s.options = options;
  s.world = dist::get_world_size();
  std::unordered_set<const TensorImpl*> seen;  // a parameter shared by two layers is averaged once
  for (auto& [name, t] : module_->named_parameters()) {
    if (!t.requires_grad() || !seen.insert(t.unsafe_impl()).second) continue;
    HG_CHECK(s.params.empty() || t.device() == s.params.front().t.device(), "DistributedDataParallel: parameter '",
             name, "' is on ", t.device().str(), " but '", s.params.front().name, "' on ",
             s.params.front().t.device().str(), "; keep the module on one device (one process per device)");
    HG_CHECK(t.is_contiguous(), "DistributedDataParallel: parameter '", name, "' is not contiguous");
    s.params.push_back(Param{.t = t, .name = name});
  }
  HG_CHECK(!s.params.empty(), "DistributedDataParallel: the module has no parameter that requires grad; there is "
           "nothing to average");
  check_same_model(s.params, s.world);
  {
    NoGradGuard no_grad;
    for (const Param& p : s.params) dist::broadcast(p.t, 0);
    for (auto& [name, b] : module_->named_buffers()) {
      HG_CHECK(b.is_contiguous(), "DistributedDataParallel: buffer '", name, "' must be contiguous to be broadcast");
      dist::broadcast(b, 0);
      s.buffers.push_back(b);
    }
  }
  std::vector<int> registration(s.params.size());
  for (size_t i = 0; i < registration.size(); ++i) registration[i] = static_cast<int>(i);
  make_buckets(s, assign_buckets(s.params, registration, cap_bytes(options), true));
  const std::weak_ptr<State> weak = s_;
  for (int i = 0; i < static_cast<int>(s.params.size()); ++i)
    s.hooks.push_back(s.params[i].t.register_post_accumulate_grad_hook([weak, i](const Tensor&) { on_gradient(weak, i); }));
}

DistributedDataParallel::~DistributedDataParallel() {
  if (!s_) return;  // moved from
  for (HookHandle& h : s_->hooks) h.remove();
}

std::string DistributedDataParallel::extra_repr() const {
  std::ostringstream o;
  o << "world_size=" << s_->world << ", buckets=" << s_->buckets.size() << ", bucket_cap_mb=" << s_->options.bucket_cap_mb;
  if (s_->options.find_unused_parameters) o << ", find_unused_parameters=true";
  return o.str();
}

Module& DistributedDataParallel::module() const { return *module_; }

Tensor DistributedDataParallel::forward(const Tensor& x) {
  State& s = *s_;
  s.reset_iteration();  // a forward whose backward never ran leaves nothing behind
  if (!s.rebuilt && s.stats.backwards > 0) rebuild_buckets(s);
  if (s.options.broadcast_buffers && s.world > 1) {
    NoGradGuard no_grad;
    for (const Tensor& b : s.buffers) dist::broadcast(b, 0);
  }
  Tensor y = (*module_)(x);
  s.expect_hooks = autograd::grad_enabled() && s.require_sync;
  s.unused.clear();
  if (s.expect_hooks && s.options.find_unused_parameters) {
    std::unordered_set<const AutogradMeta*> reached;
    if (const auto root = y.grad_fn()) {
      autograd::for_each_leaf_edge(*root, [&](AutogradMeta* leaf) { reached.insert(leaf); });
    } else if (y.requires_grad()) {
      reached.insert(y.unsafe_impl()->autograd.get());
    }
    for (int i = 0; i < static_cast<int>(s.params.size()); ++i)
      if (!reached.count(s.params[i].t.unsafe_impl()->autograd.get())) s.unused.push_back(i);
  }
  return y;
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel* d) : ddp_(d), prev_(d->s_->require_sync) {
  d->s_->require_sync = false;
}
DistributedDataParallel::NoSync::~NoSync() { ddp_->s_->require_sync = prev_; }
DistributedDataParallel::NoSync DistributedDataParallel::no_sync() { return NoSync(this); }

void DistributedDataParallel::register_comm_hook(CommHook hook) {
  HG_CHECK(hook != nullptr, "DistributedDataParallel::register_comm_hook: got an empty std::function");
  HG_CHECK(!s_->comm_hook, "DistributedDataParallel::register_comm_hook: a hook is registered already; register one, "
           "once (as torch)");
  HG_CHECK(s_->stats.backwards == 0 && !s_->backward_started, "DistributedDataParallel::register_comm_hook: register "
           "the hook before the first backward (as torch)");
  s_->comm_hook = std::move(hook);
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : s_->buckets) {
    out.emplace_back();
    for (int i : b.params) out.back().push_back(s_->params[i].name);
  }
  return out;
}

const DistributedDataParallel::Stats& DistributedDataParallel::stats() const { return s_->stats; }
void DistributedDataParallel::reset_stats() { s_->stats = {}; }

}  // namespace hg::nn
