#pragma once
// Kernel tables indexed by [device][dtype]: what an op looks its kernel up in. A table is one line of its
// family's contract header (ops/kernels/<family>.h):
//   HG_KERNEL_TABLE(GemmKernel, gemm_kernels, "matmul");
// Every backend is a peer with one registration entry that fills its slots of every table
// (cpu/register.cpp, cuda/register.cpp), run once by load_backend at the first lookup on its device, so a
// CPU-only program never touches the CUDA driver. Public ops look kernels up in tables and never include
// backend headers (docs/ARCHITECTURE.md, "Dispatch and registration").
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"

namespace hg {

// Which kernels a process has looked up, per table and device: a backend's test suite prints it
// (tests/gpu) to show that every kernel it registered ran. Counts distinct dtype slots.
struct KernelCoverage {
  std::string table;
  int registered = 0, called = 0;
  std::vector<DType> missing;  // registered, never looked up
};
// One row per table with a slot registered on device d (ops/dispatch.h's kernel_coverage adds the
// elementwise table's rows per op).
std::vector<KernelCoverage> table_coverage(DeviceType d);

// The floating dtypes' storage types, in one list: HG_FOR_FLOATING(X) expands to X(float) X(f16) X(bf16)
// X(double), for a kernel family's explicit instantiations; for_each_floating(f) calls
// f(type_tag<T>{}, DType) for each, for its table entries (DispatchTable::set_floating).
#define HG_FOR_FLOATING(X) X(float) X(f16) X(bf16) X(double)
template <class T> struct type_tag { using type = T; };
template <class F> void for_each_floating(F&& f) {
#define HG_VISIT_FLOATING(T) f(type_tag<T>{}, dtype_v<T>);
  HG_FOR_FLOATING(HG_VISIT_FLOATING)
#undef HG_VISIT_FLOATING
}

// Every table registers itself for table_coverage; a lookup marks its slot.
class DispatchTableBase {
 public:
  DispatchTableBase(const DispatchTableBase&) = delete;
  DispatchTableBase& operator=(const DispatchTableBase&) = delete;
  const char* name() const { return name_; }
  bool registered(DeviceType d, DType t) const { return state(d, t) & kSet; }
  bool called(DeviceType d, DType t) const { return state(d, t) & kCalled; }

 protected:
  explicit DispatchTableBase(const char* name);
  ~DispatchTableBase();
  void mark_set(DeviceType d, DType t) { state_[static_cast<int>(d)][static_cast<int>(t)] |= kSet; }
  void mark_called(DeviceType d, DType t) const {
    state_[static_cast<int>(d)][static_cast<int>(t)].fetch_or(kCalled, std::memory_order_relaxed);
  }

 private:
  static constexpr uint8_t kSet = 1, kCalled = 2;
  uint8_t state(DeviceType d, DType t) const { return state_[static_cast<int>(d)][static_cast<int>(t)].load(); }
  const char* name_;
  mutable std::atomic<uint8_t> state_[kNumDeviceTypes][kNumDTypes] = {};
};

template <class Fn>
class DispatchTable : public DispatchTableBase {
 public:
  explicit DispatchTable(const char* name) : DispatchTableBase(name) {}
  void set(DeviceType d, DType t, Fn f) {
    fns_[static_cast<int>(d)][static_cast<int>(t)] = f;
    mark_set(d, t);
  }
  // One kernel for every floating dtype (it reads the dtype from its arguments).
  void set_all_floating(DeviceType d, Fn f) {
    for_each_floating([&](auto, DType t) { set(d, t, f); });
  }
  // A kernel template's instantiation per floating dtype: `[]<class T>(type_tag<T>) { return &kernel<T>; }`.
  template <class Make>
  void set_floating(DeviceType d, Make&& make) {
    for_each_floating([&](auto tag, DType t) { set(d, t, make(tag)); });
  }
  // Whether dev has a kernel for t (after loading dev's backend): for an optional kernel that an op can do
  // without (ops/kernels/fp8.h's native FP8 GEMM). Marks nothing.
  bool has(Device dev, DType t) const { return slot(dev, t) != nullptr; }
  Fn get(Device dev, DType t) const {
    Fn f = slot(dev, t);
    if (f == nullptr && is_storage_only(t)) fail_storage_only(t, name());
    HG_CHECK(f != nullptr, name(), ": no kernel for dtype ", t, " on device ", dev,
             "; supported dtypes are the floating ones (F32, F16, BF16, F64) unless the op says otherwise");
    mark_called(dev.type, t);
    return f;
  }

 private:
  Fn slot(Device dev, DType t) const {  // loads dev's backend first (its registration fills the slot)
    load_backend(dev.type);
    return fns_[static_cast<int>(dev.type)][static_cast<int>(t)];
  }
  Fn fns_[kNumDeviceTypes][kNumDTypes] = {};
};

// Kernel calls collected for tables whose kernels take a batch (std::span<const Args>): the optimizer update,
// the grad scaler's unscale, clipping. run() calls the table once per (device, dtype), with that key's
// arguments in the order they were added (one launch on a GPU: multi-tensor kernels); run_consecutive()
// once per run of equal keys, so a kernel that accumulates sees the arguments in their order whatever
// their dtypes. Both empty the collection, which keeps its memory for the next step.
template <class Args>
class BatchedCalls {
 public:
  void add(Device d, DType t, const Args& a) { items_.push_back({d, t, a}); }
  void clear() { items_.clear(); }  // what a throw left between add() and run()

  template <class Fn>
  void run(const DispatchTable<Fn>& table) {
    for (size_t first = 0; first < items_.size(); ++first) {
      const Item& lead = items_[first];
      if (lead.taken) continue;
      batch_.clear();
      for (size_t k = first; k < items_.size(); ++k) {
        Item& it = items_[k];
        if (it.taken || !(it.device == lead.device) || it.dtype != lead.dtype) continue;
        batch_.push_back(it.args);
        it.taken = true;
      }
      table.get(lead.device, lead.dtype)(batch_);
    }
    items_.clear();
  }

  template <class Fn>
  void run_consecutive(const DispatchTable<Fn>& table) {
    for (size_t first = 0; first < items_.size();) {
      const Item& lead = items_[first];
      batch_.clear();
      size_t k = first;
      for (; k < items_.size() && items_[k].device == lead.device && items_[k].dtype == lead.dtype; ++k)
        batch_.push_back(items_[k].args);
      table.get(lead.device, lead.dtype)(batch_);
      first = k;
    }
    items_.clear();
  }

 private:
  struct Item {
    Device device;
    DType dtype;
    Args args;
    bool taken = false;
  };
  std::vector<Item> items_;
  std::vector<Args> batch_;
};

// The accessor of one kernel table, declared by one line in its contract header. Everywhere it declares
// `DispatchTable<Fn>& accessor();`; in ops/kernels/tables.cpp, which defines HG_DEFINE_KERNEL_TABLES before
// including every contract, it defines it (a function-local static table named `name`), so each table
// exists once and is built at its first use.
#ifdef HG_DEFINE_KERNEL_TABLES
#define HG_KERNEL_TABLE(Fn, accessor, name) \
  DispatchTable<Fn>& accessor() {           \
    static DispatchTable<Fn> t{name};       \
    return t;                               \
  }                                         \
  static_assert(true, "a table line ends with ;")
#else
#define HG_KERNEL_TABLE(Fn, accessor, name) DispatchTable<Fn>& accessor()
#endif

}  // namespace hg
