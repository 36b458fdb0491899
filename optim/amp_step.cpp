#include "optim/amp_step.h"

#include <algorithm>
#include <atomic>
#include <mutex>

namespace hg::optim {
namespace {

// Every live PendingUnscales, and how many entries they hold together: clipping and Optimizer::step look
// up a parameter only when some scaler left a gradient scaled.
struct Registry {
  std::mutex mu;
  std::vector<PendingUnscales*> sets;
  std::atomic<int64_t> entries{0};
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: a static scaler may outlive a function-local static
  return *r;
}

}  // namespace

std::shared_ptr<PendingUnscales> PendingUnscales::make() {
  std::shared_ptr<PendingUnscales> s(new PendingUnscales);
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().sets.push_back(s.get());
  return s;
}

PendingUnscales::~PendingUnscales() {
  clear();
  std::lock_guard<std::mutex> lock(registry().mu);
  std::erase(registry().sets, this);
}

void PendingUnscales::set(const Tensor& param, GradUnscale f) {
  const Tensor g = param.grad();
  auto [it, added] = map_.insert_or_assign(param.unsafe_impl(), Entry{param.impl_ptr(), g.impl_ptr(), f});
  if (added) ++registry().entries;
}

GradUnscale* PendingUnscales::find(const Tensor& param) {
  auto it = map_.find(param.unsafe_impl());
  if (it == map_.end()) return nullptr;
  const Entry& e = it->second;
  const Tensor g = param.grad();
  if (e.param.lock() != param.impl_ptr() || !g.defined() || e.grad.lock() != g.impl_ptr()) return nullptr;
  return &it->second.f;
}

namespace {
// The AmpStep of params with the factor find(param) gives each (null: nothing pending).
template <class Find>
AmpStep collect(const std::vector<Tensor>& params, const float* found_inf, Find find) {
  AmpStep a{.found_inf = found_inf};
  for (size_t i = 0; i < params.size(); ++i) {
    const GradUnscale* f = find(params[i]);
    if (f == nullptr) continue;
    a.unscale.resize(params.size());
    a.unscale[i] = *f;
  }
  return a;
}
}  // namespace

AmpStep PendingUnscales::take(const std::vector<Tensor>& params, const float* found_inf) {
  AmpStep a = collect(params, found_inf, [this](const Tensor& p) { return find(p); });
  drop(params);
  return a;
}

void PendingUnscales::drop(const std::vector<Tensor>& params) {
  for (const Tensor& p : params)
    if (map_.erase(p.unsafe_impl())) --registry().entries;
}

void PendingUnscales::clear() {
  registry().entries -= static_cast<int64_t>(map_.size());
  map_.clear();
}

AmpStep pending_amp_step(const std::vector<Tensor>& params) {
  return collect(params, nullptr, find_pending_unscale);
}

bool any_pending_unscale() { return registry().entries.load(std::memory_order_relaxed) != 0; }

GradUnscale* find_pending_unscale(const Tensor& param) {
  Registry& r = registry();
  if (!any_pending_unscale() || !param.defined()) return nullptr;
  std::lock_guard<std::mutex> lock(r.mu);
  for (PendingUnscales* s : r.sets)
    if (GradUnscale* f = s->find(param)) return f;
  return nullptr;
}

}  // namespace hg::optim
