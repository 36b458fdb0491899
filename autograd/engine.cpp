#include <algorithm>
#include <atomic>
#include <cstdio>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd/backward_state.h"
#include "autograd/node.h"

namespace hg::autograd {
namespace {

thread_local bool t_grad_enabled = true;
std::atomic<uint64_t> g_next_seq{1};
std::atomic<int64_t> g_live_nodes{0};

// Iterative destruction: a node's edges and captured tensors would otherwise free the previous node
// inside this node's destructor, recursing once per op (a 100,000-op chain overflows the stack).
thread_local bool t_draining = false;
thread_local bool t_in_backward = false;
thread_local std::vector<std::shared_ptr<Node>> t_pending_nodes;
thread_local std::vector<BackwardFn> t_pending_fns;
thread_local std::vector<const NodeObserver*> t_node_observers;
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;  // the running backward's (queue_callback)

}  // namespace

void queue_callback(std::function<void()> f) {
  HG_CHECK(t_callbacks != nullptr, "queue_callback: no backward is running on this thread; call it from a gradient "
                                   "hook or a backward function");
  HG_CHECK(f != nullptr, "queue_callback: got an empty std::function; pass a callable");
  t_callbacks->push_back(std::move(f));
}

bool grad_enabled() { return t_grad_enabled; }
bool in_backward() { return t_in_backward; }
void set_grad_enabled(bool on) { t_grad_enabled = on; }
int64_t live_nodes() { return g_live_nodes.load(); }

ObserveBackward::ObserveBackward(NodeObserver fn) : fn_(std::move(fn)) { t_node_observers.push_back(&fn_); }
ObserveBackward::~ObserveBackward() { std::erase(t_node_observers, &fn_); }

bool should_record(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}
bool should_record(const std::vector<Tensor>& inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(Tensor& out, const char* name, const std::vector<Tensor>& inputs, BackwardFn fn, Saves saves,
            DoubleBackward twice) {
  if (!should_record(inputs)) return;
  auto node = std::make_shared<Node>();
  g_live_nodes.fetch_add(1);
  node->seq = g_next_seq.fetch_add(1);
  node->name = name;
  node->out_shape = out.shape();
  node->out_dtype = out.dtype();
  node->out_device = out.device();
  node->inputs.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    Edge e;
    if (t.defined() && t.requires_grad()) {
      auto& meta = t.unsafe_impl()->autograd;
      if (meta->grad_fn) e.node = meta->grad_fn;
      else {
        e.leaf = meta;
        e.leaf_shape = t.shape();
        e.leaf_dtype = t.dtype();
      }
    }
    node->inputs.push_back(std::move(e));
  }
  node->backward = std::move(fn);
  for (size_t i = 0; i < inputs.size() && i < 64; ++i)
    if (saves.inputs >> i & 1 && inputs[i].defined())
      node->inputs[i].saved = {inputs[i].unsafe_impl()->storage, inputs[i].version()};
  if (saves.output) node->saved_output = {out.unsafe_impl()->storage, out.version()};
  node->differentiable = twice == DoubleBackward::Yes;
  node->reads_grad_values = saves.output;
  for (size_t i = 0; i < inputs.size() && i < 64; ++i)
    if (saves.inputs >> i & 1 && inputs[i].defined() && inputs[i].requires_grad()) node->reads_grad_values = true;
  auto& meta = out.unsafe_impl()->autograd;
  if (!meta) meta = std::make_shared<AutogradMeta>();
  meta->requires_grad = true;
  meta->grad_fn = std::move(node);
}

namespace {
[[noreturn]] void fail_changed(const Node& n, int input, const Shape& shape, DType dtype, uint64_t now, uint64_t then) {
  HG_FAIL("one of the variables needed for gradient computation has been modified by an inplace operation: [",
          dtype_name(dtype), " ", shape, "], which is ", input < 0 ? "output 0" : "input " + std::to_string(input),
          " of ", n.name, ", is at version ", now, "; expected version ", then, " instead. Hint: run the "
          "in-place op on a clone(), or use its out-of-place form (add instead of add_, x = x + y instead of x += y)");
}
}  // namespace

void check_saved_versions(const Node& n) {
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const Edge& e = n.inputs[i];
    const auto st = e.saved.storage.lock();
    if (!st || st->version == e.saved.version) continue;
    // the input's shape and dtype: a leaf's own, or its producer's output's (a constant input: unknown here)
    const Shape shape = e.leaf ? e.leaf_shape : e.node ? e.node->out_shape : Shape{};
    const DType dtype = e.leaf ? e.leaf_dtype : e.node ? e.node->out_dtype : n.out_dtype;
    fail_changed(n, static_cast<int>(i), shape, dtype, st->version, e.saved.version);
  }
  if (const auto st = n.saved_output.storage.lock(); st && st->version != n.saved_output.version)
    fail_changed(n, -1, n.out_shape, n.out_dtype, st->version, n.saved_output.version);
}

}  // namespace hg::autograd

namespace hg {

Node::~Node() {
  autograd::g_live_nodes.fetch_sub(1);
  using namespace autograd;
  for (Edge& e : inputs)
    if (e.node) t_pending_nodes.push_back(std::move(e.node));
  if (backward) t_pending_fns.push_back(std::move(backward));
  if (t_draining) return;
  t_draining = true;
  while (!t_pending_nodes.empty() || !t_pending_fns.empty()) {
    if (!t_pending_fns.empty()) {
      BackwardFn f = std::move(t_pending_fns.back());
      t_pending_fns.pop_back();
    } else {
      std::shared_ptr<Node> n = std::move(t_pending_nodes.back());
      t_pending_nodes.pop_back();
    }
  }
  t_draining = false;
}

}  // namespace hg

namespace hg::autograd {
namespace {

struct BySeq {
  bool operator()(const Node* a, const Node* b) const { return a->seq < b->seq; }
};

Tensor run_hooks(const std::shared_ptr<HookList<GradHook>>& list, Tensor g) {
  if (!list) return g;
  const auto hooks = list->items;  // a copy: a hook may remove hooks
  for (const auto& [id, h] : hooks) {
    Tensor r = h(g);
    if (!r.defined()) continue;
    // torch: "hook ... has changed the size/type of value"; a wrong shape would otherwise broadcast silently
    HG_CHECK(r.shape() == g.shape() && r.dtype() == g.dtype(), "backward: a gradient hook returned shape ",
             r.shape(), " dtype ", r.dtype(), " for a gradient of shape ", g.shape(), " dtype ", g.dtype(),
             "; a hook must keep the shape and dtype");
    g = std::move(r);
  }
  return g;
}

void check_grad(const char* op, const Tensor& g, const Shape& shape, DType dtype) {
  HG_CHECK(g.shape() == shape && g.dtype() == dtype, "backward: the gradient for an input of '", op,
           "' has shape ", g.shape(), " dtype ", g.dtype(), " but the input has shape ", shape, " dtype ", dtype,
           " (a bug in that op's backward or in a hook)");
}

Tensor accumulate(const Tensor& acc, const Tensor& g) { return acc.defined() ? grad_accumulate(acc, g) : g; }

// The nodes the roots reach, each once (depth first; sort by seq where the order matters).
std::vector<const Node*> reachable(const std::vector<const Node*>& roots) {
  std::vector<const Node*> out, stack;
  std::unordered_set<const Node*> seen;
  for (const Node* r : roots)
    if (r && seen.insert(r).second) stack.push_back(r);
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    out.push_back(n);
    for (const Edge& e : n->inputs)
      if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  }
  return out;
}
}  // namespace

void for_each_leaf_edge(const Node& root, const std::function<void(AutogradMeta* leaf)>& f) {
  for (const Node* n : reachable({&root}))
    for (const Edge& e : n->inputs)
      if (e.leaf) f(e.leaf.get());
}

namespace {

// What autograd::grad collects instead of accumulating into .grad: the gradients reaching the `inputs`, leaves
// (by their metadata) or non-leaves (by the node that made them, whose received gradient is theirs).
struct Capture {
  std::unordered_map<const AutogradMeta*, size_t> leaves;
  std::unordered_map<const Node*, size_t> nodes;
  std::vector<Tensor> grads;
  std::unordered_set<const Node*> needed;  // nodes from which some input is reached: the only ones run
  void add(size_t k, const Tensor& g) { grads[k] = accumulate(grads[k], g); }
};

thread_local std::shared_ptr<Node> t_running;  // the node whose backward runs now (saved_output reattaches to it)
thread_local bool t_create_graph = false;      // the running backward records the gradients' graph

[[noreturn]] void fail_not_twice_differentiable(const Node& n) {
  HG_FAIL("backward with create_graph: op '", n.name, "' has no differentiable backward in halfgrad yet, so the "
          "gradient it passes on cannot be differentiated again (double backward covers the other ops: docs/API.md, "
          "\"Higher-order gradients\"); detach() this op's input if its second derivative is not needed");
}

// Runs the graph behind `roots` backward, seeded with `seeds`. Without `capture` (Tensor::backward), gradients
// accumulate into the leaves' .grad; with it (autograd::grad), only the nodes leading to capture's inputs run and
// their gradients are returned in capture->grads, no .grad touched.
// Once per process, as torch's warning (Python shows it once per call site).
void warn_create_graph_cycle() {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  std::fprintf(stderr,
               "halfgrad warning: backward() with create_graph=true makes a reference cycle between each leaf and "
               "its .grad (the gradient's graph reaches the leaf), so neither is freed until .grad is dropped. Prefer "
               "autograd::grad(outputs, inputs, {}, {.create_graph = true}), which touches no .grad; otherwise call "
               "zero_grad() on the parameters (or the optimizer) after use. (Shown once.)\n");
}

void execute(const std::vector<Tensor>& roots, const std::vector<Tensor>& seeds, bool retain_graph, bool create_graph,
             Capture* capture) {
  if (create_graph && !capture) warn_create_graph_cycle();
  GradModeGuard grad_mode(create_graph);  // node functions record the gradients' graph under create_graph only
  struct InBackward {  // restores the flags on exit, exceptions included (backward may nest in a hook)
    bool prev = t_in_backward, prev_create = t_create_graph;
    std::shared_ptr<Node> prev_running = t_running;
    explicit InBackward(bool create) {
      t_in_backward = true;
      t_create_graph = create;
    }
    ~InBackward() {
      t_in_backward = prev;
      t_create_graph = prev_create;
      t_running = std::move(prev_running);
    }
  } in_backward_scope(create_graph);

  std::vector<std::function<void()>> callbacks;  // queue_callback's, run once everything else is done
  struct CallbackScope {  // a nested backward (in a hook) has its own list
    std::vector<std::function<void()>>* prev = t_callbacks;
    explicit CallbackScope(std::vector<std::function<void()>>* mine) { t_callbacks = mine; }
    ~CallbackScope() { t_callbacks = prev; }
  } callback_scope(&callbacks);

  // A leaf's gradient is handed over (hooks, then grad, then the post-accumulate hooks) as soon as no node that
  // may still run can add to it: `pending` counts, per leaf, the edges into it from the nodes the roots reach
  // (counted before the first node runs). A leaf whose count never reaches 0 (an edge from a node no gradient
  // reached) is handed over after the last node. Under autograd::grad a captured leaf's gradient goes to the
  // capture (after the leaf's hooks), and the other leaves get nothing.
  std::unordered_map<AutogradMeta*, std::pair<std::shared_ptr<AutogradMeta>, Tensor>> leaf_grads;
  std::unordered_map<AutogradMeta*, int64_t> pending;
  auto add_leaf = [&](const std::shared_ptr<AutogradMeta>& m, Tensor g) {
    if (capture && !capture->leaves.count(m.get())) return;
    auto& slot = leaf_grads[m.get()];
    slot.first = m;
    slot.second = slot.second.defined() ? grad_accumulate(slot.second, g) : std::move(g);
  };
  auto hand_over = [&](AutogradMeta* key) {
    const auto it = leaf_grads.find(key);
    if (it == leaf_grads.end()) return;  // no gradient reached it
    const std::shared_ptr<AutogradMeta> meta = std::move(it->second.first);
    Tensor g = run_hooks(meta->hooks, std::move(it->second.second));
    leaf_grads.erase(it);
    if (capture) return capture->add(capture->leaves.at(meta.get()), std::move(g));
    AutogradMeta& m = *meta;
    if (m.grad.defined()) m.set_grad(grad_accumulate(m.grad, g));
    // never alias a tensor the user or another leaf holds; views (reshape's backward) share storage, so
    // the storage's owners are counted, not the handle's
    else if (g.is_contiguous() && g.impl_ptr().use_count() == 1 && g.unsafe_impl()->storage.use_count() == 1)
      m.set_grad(std::move(g));
    else m.set_grad(g.clone());
    if (m.post_accumulate_hooks) {
      const auto hooks = m.post_accumulate_hooks->items;  // a copy: a hook may remove hooks
      for (const auto& [id, h] : hooks) h();
    }
  };
  // an edge into a leaf is done: g (undefined when the node gave none) added, and the leaf handed over if it was
  // the last. g is moved in: a handle left behind would make hand_over copy the gradient rather than keep it.
  auto leaf_edge_done = [&](const Edge& e, Tensor g) {
    if (g.defined()) add_leaf(e.leaf, std::move(g));
    if (--pending[e.leaf.get()] == 0) hand_over(e.leaf.get());
  };
  const auto has_post_hooks = [](const AutogradMeta& m) {
    return m.post_accumulate_hooks && !m.post_accumulate_hooks->empty();
  };
  // whether the gradient along e is wanted: always for backward(); for grad(), when it leads to an input
  const auto wanted = [&](const Edge& e) {
    if (!e.defined()) return false;
    if (!capture) return true;
    return e.leaf ? capture->leaves.count(e.leaf.get()) > 0
                  : capture->needed.count(e.node.get()) > 0 || capture->nodes.count(e.node.get()) > 0;
  };

  std::vector<const Node*> root_nodes;
  for (const Tensor& r : roots) root_nodes.push_back(r.unsafe_impl()->autograd->grad_fn.get());
  std::vector<const Node*> order = reachable(root_nodes);
  if (capture) {  // in ascending sequence order, a node's inputs are decided before it
    std::sort(order.begin(), order.end(), BySeq());
    for (const Node* n : order)
      for (const Edge& e : n->inputs)
        if (wanted(e)) {
          capture->needed.insert(n);
          break;
        }
  }
  for (const Node* n : order)
    if (!capture || capture->needed.count(n))
      for (const Edge& e : n->inputs)
        if (e.leaf) ++pending[e.leaf.get()];

  std::priority_queue<Node*, std::vector<Node*>, BySeq> ready;
  std::unordered_map<Node*, Tensor> buffers;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep;  // every node queued, alive to the end (t_running's owner)
  const auto push = [&](const std::shared_ptr<Node>& node, const Tensor& g) {
    Tensor& buf = buffers[node.get()];
    if (!buf.defined()) {
      ready.push(node.get());
      keep.emplace(node.get(), node);
    }
    buf = accumulate(buf, g);
  };
  for (size_t k = 0; k < roots.size(); ++k) {
    const auto& meta = roots[k].unsafe_impl()->autograd;
    if (!meta->grad_fn) add_leaf(meta, seeds[k]);
    else if (!capture || capture->needed.count(meta->grad_fn.get()) || capture->nodes.count(meta->grad_fn.get()))
      push(meta->grad_fn, seeds[k]);
  }
  // Casts of leaves whose backward is an exact widening (Node::widen_back_to: autocast's weight casts): run
  // together after the loop, one batched call per source dtype and device. Nothing else waits for their results
  // (their input is a leaf, whose gradient is only handed over once its last edge is done), and the result is the
  // node's own backward's bit for bit. A leaf with post-accumulate hooks is not kept waiting: its cast runs in
  // place, so the hooks (DDP's all-reduce) start during the backward. Not under create_graph (each cast records).
  std::vector<std::pair<Node*, Tensor>> widen_later;
  const auto release = [&](Node* n) {
    if (retain_graph) return;
    n->released = true;
    BackwardFn dead = std::move(n->backward);  // frees the saved tensors now
  };
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    Tensor g = run_hooks(n->hooks, std::move(buffers[n]));
    buffers.erase(n);
    if (capture) {
      if (const auto it = capture->nodes.find(n); it != capture->nodes.end()) capture->add(it->second, g);
      if (!capture->needed.count(n)) continue;  // an input of grad() that leads to no other: not run
    }
    if (!g.is_contiguous()) g = g.contiguous();  // a view's backward may pass a view on; kernels read dense memory
    HG_CHECK(!n->released, "backward: trying to run backward through the graph a second time (op '", n->name,
             "'); its saved tensors were freed. Pass {.retain_graph = true} to the first backward()");
    if (!create_graph && n->widen_back_to && n->inputs.size() == 1 && n->inputs[0].leaf &&
        g.dtype() != *n->widen_back_to && !has_post_hooks(*n->inputs[0].leaf) && wanted(n->inputs[0])) {
      widen_later.emplace_back(n, std::move(g));
      continue;
    }
    check_saved_versions(*n);
    GradMask needs(n->inputs.size());
    for (size_t i = 0; i < needs.size(); ++i) needs[i] = wanted(n->inputs[i]);
    std::vector<Tensor> grads;
    {
      // Under create_graph a node whose backward runs kernels cannot pass on a gradient that depends on the values
      // needing grad it reads (or on g): refused. Otherwise its gradients are constants, computed without grad.
      const bool twice = !create_graph || n->differentiable;
      if (!twice && (g.requires_grad() || n->reads_grad_values)) fail_not_twice_differentiable(*n);
      GradModeGuard node_mode(create_graph && n->differentiable);
      t_running = keep.at(n);
      grads = n->backward(g, needs);
      t_running.reset();
    }
    HG_CHECK(grads.size() == n->inputs.size(), "backward: op '", n->name, "' returned ", grads.size(),
             " gradients for ", n->inputs.size(), " inputs");
    for (size_t i = 0; i < t_node_observers.size(); ++i) (*t_node_observers[i])(*n, g, grads);
    for (size_t i = 0; i < grads.size(); ++i) {
      const Edge& e = n->inputs[i];
      if (!needs[i]) continue;
      if (e.leaf) {
        if (grads[i].defined()) check_grad(n->name, grads[i], e.leaf_shape, e.leaf_dtype);
        leaf_edge_done(e, std::move(grads[i]));
      } else if (e.node && grads[i].defined()) {
        check_grad(n->name, grads[i], e.node->out_shape, e.node->out_dtype);
        push(e.node, grads[i]);
      }
    }
    release(n);
  }
  if (!widen_later.empty()) {
    std::vector<Tensor> in;
    std::vector<DType> to;
    for (const auto& [n, g] : widen_later) {
      in.push_back(g);
      to.push_back(*n->widen_back_to);
    }
    std::vector<Tensor> out = grads_widened(in, to);
    for (size_t k = 0; k < widen_later.size(); ++k) {
      Node* n = widen_later[k].first;
      if (!t_node_observers.empty()) {
        const std::vector<Tensor> grads{out[k]};
        for (size_t i = 0; i < t_node_observers.size(); ++i) (*t_node_observers[i])(*n, widen_later[k].second, grads);
      }
      const Edge& e = n->inputs[0];
      check_grad(n->name, out[k], e.leaf_shape, e.leaf_dtype);
      leaf_edge_done(e, std::move(out[k]));
      release(n);
    }
  }
  // the leaves an unreached node still had an edge into (and the roots that are leaves)
  std::vector<AutogradMeta*> rest;
  rest.reserve(leaf_grads.size());
  for (const auto& [key, slot] : leaf_grads) rest.push_back(key);
  for (AutogradMeta* key : rest) hand_over(key);
  for (size_t i = 0; i < callbacks.size(); ++i) {  // by index: a callback may queue more
    std::function<void()> f = std::move(callbacks[i]);
    f();
  }
}

// The seed of root: `seed`, or ones for a one-element root; checked against the root and cast to its dtype.
Tensor seed_for(const char* op, const Tensor& root, const Tensor& seed) {
  if (!seed.defined()) {
    HG_CHECK(root.numel() == 1, op, ": a seed gradient can be created implicitly only for one-element outputs, but "
             "the output has shape ", root.shape(), "; pass a seed of that shape");
    return ones(root.shape(), {.dtype = root.dtype(), .device = root.device()});
  }
  HG_CHECK(seed.shape() == root.shape(), op, ": seed shape ", seed.shape(), " does not match output shape ",
           root.shape());
  return seed.dtype() == root.dtype() ? seed : seed.to(root.dtype());
}

}  // namespace

bool create_graph_active() { return t_in_backward && t_create_graph && grad_enabled(); }

Tensor saved_output(const Tensor& kept) {
  if (!create_graph_active() || !t_running || !kept.defined()) return kept;
  Tensor y = kept.detach();
  auto meta = std::make_shared<AutogradMeta>();
  meta->requires_grad = true;
  meta->grad_fn = t_running;
  y.unsafe_impl()->autograd = std::move(meta);
  return y;
}

void run_backward(const Tensor& root, const Tensor& seed, BackwardOptions opts) {
  HG_CHECK(root.requires_grad(), "backward: this tensor does not require grad and has no grad_fn; call "
                                 "requires_grad_() on the inputs before computing it");
  const Tensor s = seed_for("backward", root, opts.create_graph || !seed.defined() ? seed : seed.detach());
  execute({root}, {s}, opts.retain_graph.value_or(opts.create_graph), opts.create_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, GradOptions opts) {
  HG_CHECK(!outputs.empty(), "autograd::grad: no outputs; pass the tensors to differentiate");
  HG_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "autograd::grad: ", grad_outputs.size(),
           " grad_outputs for ", outputs.size(), " outputs; pass one per output (or none for one-element outputs)");
  std::vector<Tensor> seeds;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Tensor& y = outputs[k];
    HG_CHECK(y.defined() && y.requires_grad(), "autograd::grad: output ", k, " does not require grad and has no "
             "grad_fn; call requires_grad_() on the inputs before computing it");
    const Tensor s = grad_outputs.empty() ? Tensor() : grad_outputs[k];
    seeds.push_back(seed_for("autograd::grad", y, opts.create_graph || !s.defined() ? s : s.detach()));
  }
  Capture capture;
  capture.grads.resize(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    HG_CHECK(x.defined() && x.requires_grad(), "autograd::grad: input ", k, " does not require grad; pass tensors "
             "that do (requires_grad_() on a leaf, or a tensor computed from one)");
    const auto& meta = x.unsafe_impl()->autograd;
    if (meta->grad_fn) capture.nodes.emplace(meta->grad_fn.get(), k);
    else capture.leaves.emplace(meta.get(), k);
  }
  HG_CHECK(capture.nodes.size() + capture.leaves.size() == inputs.size(), "autograd::grad: an input appears twice "
           "in inputs; pass each tensor once");
  execute(outputs, seeds, opts.retain_graph.value_or(opts.create_graph), opts.create_graph, &capture);
  for (size_t k = 0; k < inputs.size(); ++k)
    HG_CHECK(capture.grads[k].defined() || opts.allow_unused, "autograd::grad: input ", k, " (shape ",
             inputs[k].shape(), ") was not used to compute the outputs; pass {.allow_unused = true} to get an "
             "undefined gradient for it");
  return std::move(capture.grads);
}

}  // namespace hg::autograd
