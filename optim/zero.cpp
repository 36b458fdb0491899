// optim::ZeroRedundantOptimizer (optim/zero.h): the partition, the shard's optimizer, the collectives of the
// parameters (all-gather) and, with reduce_scatter_gradients, of the gradients (reduce-scatter), and the
// consolidated state dict.
#include "optim/zero.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <string>

#include "autograd/node.h"
#include "core/error.h"
#include "dist/dist.h"
#include "optim/state_entries.h"

namespace hg::optim {
namespace {

// A state dict's entries as bytes, for a broadcast: per entry its key, dtype, shape and bytes (8-byte aligned).
struct Packed {
  std::vector<uint8_t> header, payload;
};

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

Packed pack(const StateDict& sd) {
  Packed p;
  put<uint64_t>(p.header, sd.size());
  for (const auto& [key, t_in] : sd) {
    const Tensor t = t_in.contiguous().cpu();
    put<uint64_t>(p.header, key.size());
    p.header.insert(p.header.end(), key.begin(), key.end());
    put<uint8_t>(p.header, static_cast<uint8_t>(t.dtype()));
    put<uint64_t>(p.header, static_cast<uint64_t>(t.ndim()));
    for (int64_t d : t.shape()) put<int64_t>(p.header, d);
    const size_t n = t.nbytes(), at = p.payload.size();
    p.payload.resize(at + (n + 7) / 8 * 8, 0);
    if (n > 0) std::memcpy(p.payload.data() + at, t.data_ptr(), n);
  }
  return p;
}

StateDict unpack(const Packed& p) {
  size_t at = 0, data = 0;
  const auto get = [&]<class T>(T) {
    T v;
    std::memcpy(&v, p.header.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  };
  StateDict sd;
  const uint64_t count = get(uint64_t{});
  for (uint64_t e = 0; e < count; ++e) {
    const uint64_t len = get(uint64_t{});
    std::string key(reinterpret_cast<const char*>(p.header.data() + at), len);
    at += len;
    const auto dt = static_cast<DType>(get(uint8_t{}));
    const uint64_t ndim = get(uint64_t{});
    std::vector<int64_t> dims;
    for (uint64_t d = 0; d < ndim; ++d) dims.push_back(get(int64_t{}));
    Tensor t = empty(Shape(dims), {.dtype = dt});
    const size_t n = t.nbytes();
    if (n > 0) std::memcpy(t.data_ptr(), p.payload.data() + data, n);
    data += (n + 7) / 8 * 8;
    sd.emplace(std::move(key), std::move(t));
  }
  return sd;
}

// "state.<i>.<name>" -> i and name; false for any other key.
bool parse_state_key(const std::string& key, int64_t& i, std::string& name) {
  if (key.rfind("state.", 0) != 0) return false;
  const size_t dot = key.find('.', 6);
  if (dot == std::string::npos || dot == 6) return false;
  const std::string digits = key.substr(6, dot - 6);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) || digits.size() > 12)
    return false;
  i = std::stoll(digits);
  name = key.substr(dot + 1);
  return true;
}

Tensor indices(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return from_vector(v, {n});
}

}  // namespace

ZeroRedundantOptimizer::ZeroRedundantOptimizer(std::vector<Tensor> params, const Optimizer& like, ZeroOptions options)
    : ZeroRedundantOptimizer(
          std::move(params), [&like](std::vector<Tensor> shard) { return like.clone_for(std::move(shard)); },
          options) {}

ZeroRedundantOptimizer::ZeroRedundantOptimizer(std::vector<Tensor> params, Factory make_shard_optimizer,
                                               ZeroOptions options)
    : options_(options), params_(std::move(params)) {
  HG_CHECK(dist::is_initialized(), "ZeroRedundantOptimizer: the process group is not initialized; call "
           "hg::dist::init_process_group() first (every rank, launched with mpirun)");
  HG_CHECK(make_shard_optimizer != nullptr, "ZeroRedundantOptimizer: the optimizer factory is empty");
  rank_ = dist::get_rank();
  world_ = dist::get_world_size();
  HG_CHECK(static_cast<int64_t>(params_.size()) >= world_, "ZeroRedundantOptimizer: ", params_.size(),
           " parameter(s) for ", world_, " ranks; every rank needs at least one to update (use fewer ranks, or a "
           "plain optimizer)");
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    HG_CHECK(p.defined() && p.requires_grad() && p.is_leaf(), "ZeroRedundantOptimizer: parameter ", i,
             " is not a leaf tensor that requires grad");
    HG_CHECK(p.is_contiguous(), "ZeroRedundantOptimizer: parameter ", i, " is not contiguous");
    HG_CHECK(p.device() == params_.front().device(), "ZeroRedundantOptimizer: parameter ", i, " is on ",
             p.device().str(), " but parameter 0 on ", params_.front().device().str(), "; keep the model on one device");
  }
  // torch's partition: largest first (ties in order), each to the rank with the fewest elements so far
  std::vector<size_t> order(params_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params_[a].numel() > params_[b].numel(); });
  std::vector<int64_t> load(static_cast<size_t>(world_), 0);
  owner_.assign(params_.size(), 0);
  for (size_t i : order) {
    const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owner_[i] = r;
    load[static_cast<size_t>(r)] += params_[i].numel();
  }
  std::vector<Tensor> shard;
  local_i_.assign(params_.size(), -1);
  for (size_t i = 0; i < params_.size(); ++i)
    if (owner_[i] == rank_) {
      local_i_[i] = static_cast<int64_t>(shard.size());
      shard.push_back(params_[i]);
    }
  local_ = make_shard_optimizer(std::move(shard));
  HG_CHECK(local_ != nullptr, "ZeroRedundantOptimizer: the factory returned no optimizer");
  if (!gradients_sharded()) return;
  {  // no DDP makes the ranks' parameters equal: rank 0's, as DDP would
    NoGradGuard no_grad;
    for (const Tensor& p : params_) dist::broadcast(p, 0);
  }
  fresh_.assign(params_.size(), 0);
  held_.assign(params_.size(), Tensor());
  // Each parameter's gradient hook runs before the backward adds the new gradient to grad(): the gradient this rank
  // already holds (its shard's reduced average, from an earlier backward) is set aside, so that grad() receives this
  // backward's local gradient alone, which is what the reduction must see.
  for (size_t i = 0; i < params_.size(); ++i)
    hooks_.push_back(params_[i].register_hook([this, i](const Tensor&) {
      if (!fresh_[i]) {
        fresh_[i] = 1;
        held_[i] = params_[i].grad();
        params_[i].zero_grad();
      }
      if (!reduce_queued_) {
        reduce_queued_ = true;  // once per backward, after every gradient is in place
        autograd::queue_callback([this] {
          reduce_queued_ = false;
          reduce_scatter_grads();
        });
      }
      return Tensor();
    }));
}

// From the parameters' dtypes now (amp::initialize may convert them after construction): one slab per dtype, in
// the order the dtypes first appear.
std::vector<ZeroRedundantOptimizer::Slab> ZeroRedundantOptimizer::slabs() const {
  std::vector<Slab> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto s = std::find_if(out.begin(), out.end(), [&](const Slab& x) { return x.dtype == params_[i].dtype(); });
    if (s == out.end()) {
      out.push_back({.dtype = params_[i].dtype(), .members = std::vector<std::vector<size_t>>(
                                                      static_cast<size_t>(world_))});
      s = out.end() - 1;
    }
    s->members[static_cast<size_t>(owner_[i])].push_back(i);
  }
  for (Slab& s : out)
    for (const auto& m : s.members) {
      int64_t n = 0;
      for (size_t i : m) n += params_[i].numel();
      s.per_rank = std::max(s.per_rank, n);
    }
  return out;
}

ZeroRedundantOptimizer::~ZeroRedundantOptimizer() {
  for (HookHandle& h : hooks_) h.remove();
}

// Every rank's gradients of this backward, slab by slab, each divided by the world size (as DDP's default reduction
// does), summed over the ranks part by part: rank r receives part r, the averaged gradients of its own parameters,
// added to what it held before the backward (gradient accumulation). A parameter this backward gave no gradient
// adds zeros; the other ranks' parameters' gradients are dropped.
void ZeroRedundantOptimizer::reduce_scatter_grads() {
  NoGradGuard no_grad;
  for (const Slab& s : slabs()) {
    const Tensor flat = zeros({s.per_rank * world_}, {.dtype = s.dtype, .device = params_.front().device()});
    for (int r = 0; r < world_; ++r) {
      int64_t at = r * s.per_rank;
      for (size_t i : s.members[static_cast<size_t>(r)]) {
        const Tensor& p = params_[i];
        const Tensor g = fresh_[i] ? p.grad() : Tensor();
        if (g.defined()) {
          HG_CHECK(g.dtype() == p.dtype() && g.numel() == p.numel() && g.device() == p.device(), "ZeroRedundantOptimizer: "
                   "the gradient of parameter ", i, " is ", g.dtype(), " ", g.shape(), " on ", g.device(), " but the "
                   "parameter is ", p.dtype(), " ", p.shape(), " on ", p.device());
          flat.narrow(0, at, p.numel()).copy_(g.reshape({-1}));
        }
        at += p.numel();
      }
    }
    flat.mul_(1.0 / world_);
    const Tensor mine = empty({s.per_rank}, {.dtype = s.dtype, .device = params_.front().device()});
    dist::reduce_scatter_tensor(mine, flat, dist::ReduceOp::Sum);
    int64_t at = 0;
    for (size_t i : s.members[static_cast<size_t>(rank_)]) {
      Tensor p = params_[i];
      const Tensor avg = mine.narrow(0, at, p.numel()).view(p.shape());
      at += p.numel();
      const Tensor before = fresh_[i] ? held_[i] : p.grad();
      if (before.defined()) {
        before.add_(avg);
        p.set_grad(before);
      } else {
        p.set_grad(avg);
      }
    }
    for (int r = 0; r < world_; ++r)
      if (r != rank_)
        for (size_t i : s.members[static_cast<size_t>(r)]) params_[i].zero_grad();
  }
  std::fill(fresh_.begin(), fresh_.end(), 0);
  std::fill(held_.begin(), held_.end(), Tensor());
}

void ZeroRedundantOptimizer::step(const AmpStep& amp) {
  local_->step(amp);
  ++steps_;
  if (world_ == 1) return;
  // every rank's updated part of each slab, gathered into every rank's copies of the others' parameters
  NoGradGuard no_grad;
  for (const Slab& s : slabs()) {
    const Tensor mine = zeros({s.per_rank}, {.dtype = s.dtype, .device = params_.front().device()});
    int64_t at = 0;
    for (size_t i : s.members[static_cast<size_t>(rank_)]) {
      mine.narrow(0, at, params_[i].numel()).copy_(params_[i].reshape({-1}));
      at += params_[i].numel();
    }
    const Tensor all = empty({s.per_rank * world_}, {.dtype = s.dtype, .device = params_.front().device()});
    dist::all_gather_into_tensor(all, mine);
    for (int r = 0; r < world_; ++r) {
      if (r == rank_) continue;
      at = r * s.per_rank;
      for (size_t i : s.members[static_cast<size_t>(r)]) {
        params_[i].copy_(all.narrow(0, at, params_[i].numel()).view(params_[i].shape()));
        at += params_[i].numel();
      }
    }
  }
}

const std::vector<Tensor>& ZeroRedundantOptimizer::group_params(size_t group) const {
  HG_CHECK(group == 0, "ZeroRedundantOptimizer: group ", group, " does not exist; it has one group");
  return params_;
}

double ZeroRedundantOptimizer::lr(size_t group) const {
  (void)group_params(group);
  return local_->lr(0);
}
void ZeroRedundantOptimizer::set_lr(size_t group, double lr) {
  (void)group_params(group);
  local_->set_lr(0, lr);
}
double ZeroRedundantOptimizer::momentum(size_t group) const {
  (void)group_params(group);
  return local_->momentum(0);
}
void ZeroRedundantOptimizer::set_momentum(size_t group, double momentum) {
  (void)group_params(group);
  local_->set_momentum(0, momentum);
}

void ZeroRedundantOptimizer::set_param_rounding(ParamRounding rounding, uint64_t seed) {
  HG_CHECK(rounding != ParamRounding::Stochastic, "ZeroRedundantOptimizer.set_param_rounding: stochastic rounding "
           "draws from one Philox stream in parameter order, which a shard cannot continue; use Nearest or Kahan");
  local_->set_param_rounding(rounding, seed);
}

int ZeroRedundantOptimizer::owner(size_t i) const {
  HG_CHECK(i < params_.size(), "ZeroRedundantOptimizer.owner: parameter ", i, " does not exist; it has ",
           params_.size());
  return owner_[i];
}

Tensor ZeroRedundantOptimizer::compensation(size_t i) const {
  return owner(i) == rank_ ? local_->compensation(static_cast<size_t>(local_i_[i])) : Tensor();
}
Tensor ZeroRedundantOptimizer::master(size_t i) const {
  return owner(i) == rank_ ? local_->master(static_cast<size_t>(local_i_[i])) : Tensor();
}
const std::vector<Tensor>& ZeroRedundantOptimizer::state_buffers(size_t i) const {
  static const std::vector<Tensor> kNone;
  return owner(i) == rank_ ? local_->state_buffers(static_cast<size_t>(local_i_[i])) : kNone;
}
Optimizer::StepCount ZeroRedundantOptimizer::step_count(size_t i) const {
  return owner(i) == rank_ ? local_->step_count(static_cast<size_t>(local_i_[i])) : StepCount{};
}

// Each rank in turn broadcasts its shard's state entries, renamed to the parameters' global indices (torch also
// broadcasts every rank's state); rank `to` keeps them.
void ZeroRedundantOptimizer::consolidate_state_dict(int to) {
  HG_CHECK(to >= 0 && to < world_, "ZeroRedundantOptimizer.consolidate_state_dict: rank ", to, " does not exist; "
           "the world has ", world_, " rank(s)");
  std::vector<int64_t> global;  // local index -> global index
  for (size_t i = 0; i < params_.size(); ++i)
    if (owner_[i] == rank_) global.push_back(static_cast<int64_t>(i));
  StateDict mine;
  for (auto& [key, t] : local_->state_dict()) {
    int64_t j = 0;
    std::string name;
    if (parse_state_key(key, j, name))
      mine.emplace(detail::state_key(static_cast<size_t>(global.at(static_cast<size_t>(j))), name.c_str()), t);
  }
  StateDict all;
  for (int r = 0; r < world_; ++r) {
    Packed p;
    if (r == rank_) p = pack(mine);
    if (world_ > 1) {
      dist::broadcast_bytes(p.header, r);
      dist::broadcast_bytes(p.payload, r);
    }
    if (rank_ == to) all.merge(unpack(p));
  }
  consolidated_.clear();
  consolidated_to_ = to;
  consolidated_at_ = steps_;
  if (rank_ == to) consolidated_ = std::move(all);
}

StateDict ZeroRedundantOptimizer::state_dict() const {
  HG_CHECK(consolidated_to_ >= 0, "ZeroRedundantOptimizer.state_dict: each rank holds the state of its own shard; "
           "call consolidate_state_dict(to) on every rank first, then state_dict() on rank `to` (torch's protocol)");
  HG_CHECK(consolidated_to_ == rank_, "ZeroRedundantOptimizer.state_dict: the state was consolidated on rank ",
           consolidated_to_, ", not on this rank ", rank_, "; call state_dict() there, or consolidate_state_dict(",
           rank_, ") on every rank");
  HG_CHECK(consolidated_at_ == steps_, "ZeroRedundantOptimizer.state_dict: ", steps_ - consolidated_at_,
           " step(s) were taken since consolidate_state_dict(); consolidate again (every rank) before saving");
  StateDict sd = consolidated_;
  for (auto& [key, t] : local_->state_dict())  // the options (now: a scheduler may have changed lr since)
    if (key.rfind("group.", 0) == 0) sd[key] = t;
  sd["group.0.params"] = indices(static_cast<int64_t>(params_.size()));
  return sd;
}

void ZeroRedundantOptimizer::load_state_dict(const StateDict& sd) {
  const int64_t n = static_cast<int64_t>(params_.size());
  StateDict shard;
  for (const auto& [key, t] : sd) {
    int64_t i = 0;
    std::string name;
    if (parse_state_key(key, i, name)) {
      HG_CHECK(i < n, "ZeroRedundantOptimizer.load_state_dict: entry '", key, "' is for parameter ", i, " but the "
               "optimizer has ", n, "; the state dict belongs to other parameters");
      if (owner_[static_cast<size_t>(i)] == rank_)
        shard.emplace(detail::state_key(static_cast<size_t>(local_i_[static_cast<size_t>(i)]), name.c_str()), t);
    } else if (key == "group.0.params") {
      const Tensor want = indices(n);
      HG_CHECK(t.defined() && t.dtype() == DType::I64 && t.ndim() == 1 && t.numel() == n &&
                   std::memcmp(t.contiguous().data_ptr(), want.data_ptr(), static_cast<size_t>(n) * 8) == 0,
               "ZeroRedundantOptimizer.load_state_dict: entry 'group.0.params' lists ",
               t.defined() ? t.numel() : 0, " parameter(s), but the optimizer has ", n, " (indices 0 to ", n - 1,
               "); the state dict belongs to other parameters");
      shard.emplace(key, indices(static_cast<int64_t>(local_->parameters().size())));
    } else {
      shard.emplace(key, t);  // options, and what the shard's optimizer rejects by name
    }
  }
  // all or nothing over the ranks too: an entry only its owner checks fails there, and every rank keeps its state
  const StateDict before = world_ > 1 ? local_->state_dict() : StateDict{};
  std::string failed;
  try {
    local_->load_state_dict(shard);
  } catch (const Error& e) {
    failed = e.what();
  }
  if (world_ > 1) {
    const Tensor bad = full({1}, failed.empty() ? -1.0 : static_cast<double>(rank_), {.dtype = DType::F64});
    dist::all_reduce(bad, dist::ReduceOp::Max);
    const int first = static_cast<int>(bad.item<double>());
    if (failed.empty() && first >= 0) {
      local_->load_state_dict(before);
      HG_FAIL("ZeroRedundantOptimizer.load_state_dict: rank ", first, " (the highest that failed) rejected its shard of the state dict (its "
              "error says why); no rank changed its state");
    }
  }
  if (!failed.empty()) throw Error(failed);
  consolidated_to_ = -1;
  consolidated_.clear();
}

}  // namespace hg::optim
