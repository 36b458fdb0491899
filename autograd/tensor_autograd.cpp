// The autograd members of Tensor.
#include "autograd/node.h"

namespace hg {

bool Tensor::requires_grad() const {
  const auto& m = impl().autograd;
  return m && m->requires_grad;
}

Tensor& Tensor::requires_grad_(bool on) {
  auto& m = impl().autograd;
  HG_CHECK(!(m && m->grad_fn), "requires_grad_: only leaf tensors can change requires_grad (this one was made "
                               "by '", m ? m->grad_fn->name : "", "'); use detach() to get a leaf");
  HG_CHECK(!on || is_floating(dtype()), "requires_grad_: dtype ", dtype(),
           " cannot require gradients; only floating dtypes can");
  if (!m) m = std::make_shared<AutogradMeta>();
  m->requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const {
  const auto& m = impl().autograd;
  return !(m && m->grad_fn);
}

Tensor Tensor::grad() const {
  const auto& m = impl().autograd;
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) {
  auto& m = impl().autograd;
  HG_CHECK(!g.defined() || (g.shape() == shape() && g.dtype() == dtype() && g.device() == device()),
           "set_grad: gradient shape ", g.defined() ? g.shape().str() : "", " dtype ",
           g.defined() ? dtype_name(g.dtype()) : "", " must match the tensor's shape ", shape(), " dtype ", dtype());
  if (!m) m = std::make_shared<AutogradMeta>();
  m->set_grad(g);
}

void Tensor::zero_grad() {
  if (auto& m = impl().autograd) m->set_grad(Tensor());
}

GradUnscale Tensor::grad_unscale() const {
  const auto& m = impl().autograd;
  return m ? m->grad_unscale : GradUnscale{};
}

void Tensor::set_grad_unscale(const GradUnscale& f) const {
  const auto& m = impl().autograd;
  HG_CHECK(m && m->grad.defined(), "set_grad_unscale: the tensor has no gradient to carry the factor; run backward "
           "(or set_grad) first");
  m->grad_unscale = f;
}

std::shared_ptr<Node> Tensor::grad_fn() const {
  const auto& m = impl().autograd;
  return m ? m->grad_fn : nullptr;
}

void Tensor::backward(const Tensor& seed, BackwardOptions opts) const { autograd::run_backward(*this, seed, opts); }

Tensor Tensor::detach() const { return alias_strided(*this, shape(), impl().strides, storage_offset()); }

HookHandle Tensor::register_hook(GradHook hook) const {
  HG_CHECK(requires_grad(), "register_hook: the tensor does not require grad, so no gradient will reach a hook; "
                            "call requires_grad_() first");
  HG_CHECK(hook != nullptr, "register_hook: got an empty std::function; pass a callable");
  const auto& m = impl().autograd;
  std::shared_ptr<HookList<GradHook>>& list = m->grad_fn ? m->grad_fn->hooks : m->hooks;
  if (!list) list = std::make_shared<HookList<GradHook>>();
  return HookHandle(list->add(std::move(hook)), list);
}

HookHandle Tensor::register_post_accumulate_grad_hook(PostAccumulateGradHook hook) const {
  HG_CHECK(requires_grad(), "register_post_accumulate_grad_hook: the tensor does not require grad, so no gradient "
                            "will be accumulated into it; call requires_grad_() first");
  HG_CHECK(is_leaf(), "register_post_accumulate_grad_hook: only leaf tensors accumulate gradients (this one was made "
                      "by '", grad_fn()->name, "'); use register_hook for a non-leaf");
  HG_CHECK(hook != nullptr, "register_post_accumulate_grad_hook: got an empty std::function; pass a callable");
  auto& list = impl().autograd->post_accumulate_hooks;
  if (!list) list = std::make_shared<HookList<std::function<void()>>>();
  // weakly held: the list lives in this tensor's own metadata
  return HookHandle(list->add([w = std::weak_ptr<TensorImpl>(impl_ptr()), hook = std::move(hook)] {
                      if (auto p = w.lock()) hook(Tensor(std::move(p)));
                    }),
                    list);
}

}  // namespace hg
