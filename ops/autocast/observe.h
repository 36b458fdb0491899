#pragma once
// Op observers: the hook amp/inspect (PrecisionTrace, NonFiniteOrigin) uses to see every public op a thread
// runs, with the casts autocast made for it. The op-boundary guard amp::OpCast (ops/autocast/autocast.h)
// reports here; this file knows nothing of autocast's state, and autocast nothing of who observes.
//
// An observer is told about every public op that passes through the hook on this thread: outermost calls
// only (an op's re-entry with cast inputs and the ops it is made of are part of it), never inside backward.
// Observing changes no numbers: the same casts run with or without observers.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/autocast/policy.h"

namespace hg::amp {

struct CastRecord {
  size_t input = 0;  // which input of the op
  DType from = DType::F32, to = DType::F32;
  int64_t bytes = 0;       // size of the cast copy
  bool cacheable = false;  // an F32 leaf weight: the cast goes through the cast cache
  bool cache_hit = false;  // ... and was found there (no copy made)
};
struct OpCall {
  OpId op = OpId::Count_;
  std::vector<Tensor> inputs;        // as the caller passed them
  std::optional<CastPolicy> policy;  // the policy applied; nullopt: autocast off for these inputs
  std::vector<CastRecord> casts;
  std::vector<Tensor> ran;           // the inputs the op ran on, after the casts
  std::string note;                  // what the op adds about its numerics (fp8_linear: formats and scales)
};
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  // After the op returned `output`, on the op's thread, under NoGradGuard and ExcludeGuard (ops run
  // here neither record nor cast, and are not observed). An op that throws is not reported.
  virtual void on_op(const OpCall& call, const Tensor& output) = 0;
};
// Registers an observer on this thread for the guard's lifetime; guards nest, every live one is called.
class ObserveOps {
 public:
  explicit ObserveOps(OpObserver& o);
  ~ObserveOps();
  ObserveOps(const ObserveOps&) = delete;
  ObserveOps& operator=(const ObserveOps&) = delete;

 private:
  OpObserver* o_;
};

// For the op-boundary guard only (OpCast).
namespace observe {
// An observer is registered on this thread and no observed call is live: this call is to be reported.
bool wanted();
// An observed call starts (the ops it is made of are not reported) / ends.
void enter();
void leave();
// Tells every observer of this thread about `call` (the caller holds NoGradGuard and ExcludeGuard).
void report(const OpCall& call, const Tensor& output);
}  // namespace observe

}  // namespace hg::amp
