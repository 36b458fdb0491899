#pragma once
// The tape: every recorded op makes a Node with a global sequence number; backward() runs nodes in
// descending sequence order (a node is always created after the nodes of its inputs, so each node
// runs only once all of its consumers have contributed to its gradient). No recursion anywhere:
// neither in backward nor when a long graph is freed.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "autograd/grad_unscale.h"
#include "core/hook.h"
#include "core/tensor.h"

namespace hg {

// needs[i] tells the backward function whether input i wants a gradient; it may return an
// undefined tensor for the others.
using GradMask = std::vector<char>;
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_out, const GradMask& needs)>;

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;                    // accumulated gradient of a leaf; replace it with set_grad
  GradUnscale grad_unscale;       // the factor `grad` still carries (autograd/grad_unscale.h)
  std::shared_ptr<Node> grad_fn;  // null for a leaf
  std::shared_ptr<HookList<GradHook>> hooks;  // hooks of a leaf (a non-leaf's hooks live on its grad_fn)
  // run after a backward accumulated into `grad` (Tensor::register_post_accumulate_grad_hook); each holds its
  // tensor weakly (the tensor owns this list)
  std::shared_ptr<HookList<std::function<void()>>> post_accumulate_hooks;
  // A new gradient: the factor of the old one no longer applies.
  void set_grad(Tensor g) {
    grad = std::move(g);
    grad_unscale = {};
  }
};

// A value a node's backward reads (an input or its output), as it was when the op ran: its storage's version
// then (core/tensor.h). Empty when the backward does not read it (autograd::Saves).
struct SavedVersion {
  std::weak_ptr<Storage> storage;  // expired (or never set): nothing to check
  uint64_t version = 0;
};

struct Edge {
  std::shared_ptr<Node> node;          // the input was produced by a recorded op
  std::shared_ptr<AutogradMeta> leaf;  // or the input is a leaf that requires grad
  Shape leaf_shape;                    // the leaf's shape and dtype, to check its gradient
  DType leaf_dtype = DType::F32;
  SavedVersion saved;                  // when the backward reads this input
  bool defined() const { return node || leaf; }
};


struct Node {
  uint64_t seq = 0;
  const char* name = "";
  std::vector<Edge> inputs;
  BackwardFn backward;
  std::shared_ptr<HookList<GradHook>> hooks;  // run on the gradient of this node's output; null: none
  Shape out_shape;
  DType out_dtype = DType::F32;
  Device out_device;
  bool released = false;  // backward already ran without retain_graph
  // Set by Tensor::to(DType) when its backward is an exact widening cast of the gradient back to this dtype
  // (ops/kernels/elementwise.h's is_exact_widening: autocast's F32 weight cast to F16 has an F16 gradient made
  // F32). When such a node's input is a leaf, the engine runs all of them together at the end of the
  // backward, one batched launch per source dtype (cast_batch_kernels), instead of one cast each.
  std::optional<DType> widen_back_to;
  SavedVersion saved_output;  // when the backward reads the output; the inputs' are in their edges
  ~Node();
};

namespace autograd {

bool grad_enabled();
void set_grad_enabled(bool on);

// Turns off recording on this thread for its lifetime (thread-local, nestable).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// True when grad mode is on and some input requires grad: the op must record.
bool should_record(std::initializer_list<const Tensor*> inputs);
bool should_record(const std::vector<Tensor>& inputs);

// Which values an op's backward reads: bit i of `inputs` for input i, `output` for its result. record keeps their
// storages' versions, and the engine refuses (torch's error) to run the backward after an in-place op changed
// one of them. The default, every input, can only refuse a backward torch would run, never run a wrong one; ops
// whose backward reads less say so (Saves::none() for add, views, casts, sums).
struct Saves {
  uint64_t inputs = ~uint64_t{0};
  bool output = false;
  static Saves none() { return {0, false}; }
  static Saves output_only() { return {0, true}; }
  static Saves only(std::initializer_list<int> which, bool output = false) {
    Saves s{0, output};
    for (int i : which) s.inputs |= uint64_t{1} << i;
    return s;
  }
};

// Attaches a node to `out` (which must be freshly made by the op). fn returns one gradient per
// input, with the input's shape and dtype, or undefined where none is needed. Does nothing when
// no input requires grad or grad mode is off.
void record(Tensor& out, const char* name, const std::vector<Tensor>& inputs, BackwardFn fn, Saves saves = {});

// Refuses, with torch's error, a backward that would read a value an in-place op has changed since `n` saved it.
void check_saved_versions(const Node& n);

// Observes every node that backward() runs on this thread, in execution order, right after the node's
// backward function: the node, the gradient it received (after its hooks) and the gradients it returned
// (undefined where none). For inspectors (amp/inspect's NonFiniteOrigin names the first node whose
// gradients turned non-finite); an observer reads, it cannot change a gradient. RAII: active for the
// guard's lifetime; guards nest, and every live one is called, outermost first.
using NodeObserver = std::function<void(const Node& node, const Tensor& grad_out, const std::vector<Tensor>& grads)>;
class ObserveBackward {
 public:
  explicit ObserveBackward(NodeObserver fn);
  ~ObserveBackward();
  ObserveBackward(const ObserveBackward&) = delete;
  ObserveBackward& operator=(const ObserveBackward&) = delete;

 private:
  NodeObserver fn_;
};

// Queues f to run once the backward running on this thread has finished: every node run and every leaf's
// gradient (and post-accumulate hooks) in place, before backward() returns (torch's
// Variable._execution_engine.queue_callback). Callbacks run in the order queued; one may queue more. Only
// inside a backward (a hook or a node's backward function): an hg::Error elsewhere.
void queue_callback(std::function<void()> f);

// Calls f once for every edge into a leaf from the nodes `root` reaches (root included, each node visited once),
// with the leaf's metadata: the engine counts a leaf's edges with it, DDP finds the parameters a forward used.
void for_each_leaf_edge(const Node& root, const std::function<void(AutogradMeta* leaf)>& f);

// Runs backward from `root` (autograd/engine.cpp).
void run_backward(const Tensor& root, const Tensor& seed, BackwardOptions opts);

// Number of live nodes (for leak tests).
int64_t live_nodes();

}  // namespace autograd

// Defined in ops/: acc + g, with acc's dtype. The engine's arithmetic, with grads_widened.
Tensor grad_accumulate(const Tensor& acc, const Tensor& g);
// Defined in ops/cast.cpp: grads[k] cast to to[k], each an exact widening (Node::widen_back_to), all of one
// source dtype and device in one batched call (one launch on a GPU).
std::vector<Tensor> grads_widened(const std::vector<Tensor>& grads, const std::vector<DType>& to);

using autograd::NoGradGuard;

}  // namespace hg
