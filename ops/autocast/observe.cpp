#include "ops/autocast/observe.h"

#include <algorithm>

namespace hg::amp {

namespace {
struct ThreadObservers {
  std::vector<OpObserver*> list;
  int depth = 0;  // live observed calls (0 or 1): nested ops are part of the observed one
};
thread_local ThreadObservers tls;
}  // namespace

ObserveOps::ObserveOps(OpObserver& o) : o_(&o) { tls.list.push_back(o_); }
ObserveOps::~ObserveOps() { std::erase(tls.list, o_); }

namespace observe {
bool wanted() { return !tls.list.empty() && tls.depth == 0; }
void enter() { ++tls.depth; }
void leave() { --tls.depth; }
void report(const OpCall& call, const Tensor& output) {
  for (size_t i = 0; i < tls.list.size(); ++i) tls.list[i]->on_op(call, output);
}
}  // namespace observe

}  // namespace hg::amp
