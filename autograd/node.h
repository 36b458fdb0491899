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
  // The backward is written in recorded ops (DoubleBackward::Yes), so under create_graph it records the graph of
  // the gradients it returns. A node without it that reads a value needing grad (reads_grad_values), or receives
  // a gradient needing grad, is refused under create_graph: its gradients would silently lose that dependence.
  bool differentiable = false;
  bool reads_grad_values = false;
  ~Node();
};

namespace autograd {

bool grad_enabled();
void set_grad_enabled(bool on);

// Sets grad mode on this thread for its lifetime, then restores it (thread-local, nestable; exceptions included):
// torch.set_grad_enabled as a guard.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool on) : prev_(grad_enabled()) { set_grad_enabled(on); }
  ~GradModeGuard() { set_grad_enabled(prev_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};

// Turns off recording for its lifetime (torch.no_grad).
struct NoGradGuard : GradModeGuard {
  NoGradGuard() : GradModeGuard(false) {}
};

// Turns recording on for its lifetime (torch.enable_grad): inside a NoGradGuard, or to compute a gradient
// penalty's graph in a function that may be called without grad.
struct EnableGradGuard : GradModeGuard {
  EnableGradGuard() : GradModeGuard(true) {}
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

// Whether an op's backward function is written in recorded ops (Tensor ops, with saved_output for the output), so
// that backward(create_graph) can differentiate the gradients it returns again. A backward that runs its own
// kernels says No (the default) and is refused under create_graph where that would lose a dependence. A Yes
// backward may pick a fused kernel when create_graph_active() is false, the same math.
enum class DoubleBackward : bool { No, Yes };

// Attaches a node to `out` (which must be freshly made by the op). fn returns one gradient per
// input, with the input's shape and dtype, or undefined where none is needed. Does nothing when
// no input requires grad or grad mode is off.
void record(Tensor& out, const char* name, const std::vector<Tensor>& inputs, BackwardFn fn, Saves saves = {},
            DoubleBackward twice = DoubleBackward::No);

// True inside a node's backward function run by backward(create_graph) (or autograd::grad's) on a node marked
// DoubleBackward::Yes: the function must compute its gradients with recorded ops.
bool create_graph_active();
// A backward function's saved copy of its op's output (kept detached: the output itself would make a reference
// cycle): under create_graph_active(), the same values attached to the running node, so the gradients computed
// from them depend on the op's input as the output does; otherwise `kept` itself.
Tensor saved_output(const Tensor& kept);

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

// torch.autograd.grad's options: retain_graph defaults to create_graph; allow_unused gives an undefined gradient
// for an input the outputs do not depend on (an error otherwise).
struct GradOptions {
  std::optional<bool> retain_graph = std::nullopt;
  bool create_graph = false;
  bool allow_unused = false;
};

// torch.autograd.grad: the gradients of sum_k <grad_outputs[k], outputs[k]> with respect to each of `inputs`
// (leaves or computed tensors, each requiring grad), returned in inputs' order and never accumulated into .grad.
// grad_outputs may be empty when every output has one element (seeds of 1). Only the part of the graph that leads
// to `inputs` runs; a leaf's hooks run on its gradient, post-accumulate hooks do not. With create_graph the
// returned gradients carry their own graph (a gradient penalty differentiates them again).
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, GradOptions opts = {});

// Number of live nodes (for leak tests).
int64_t live_nodes();

}  // namespace autograd

// Defined in ops/: acc + g, with acc's dtype. The engine's arithmetic, with grads_widened.
Tensor grad_accumulate(const Tensor& acc, const Tensor& g);
// Defined in ops/cast.cpp: grads[k] cast to to[k], each an exact widening (Node::widen_back_to), all of one
// source dtype and device in one batched call (one launch on a GPU).
std::vector<Tensor> grads_widened(const std::vector<Tensor>& grads, const std::vector<DType>& to);

using autograd::NoGradGuard;
using autograd::EnableGradGuard;
using autograd::GradModeGuard;

}  // namespace hg
