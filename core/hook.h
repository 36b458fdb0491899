#pragma once
// Hooks with a handle that removes them (torch's RemovableHandle), for Tensor::register_hook and
// nn::Module::register_forward_hook:
//
//   HookHandle h = x.register_hook([](const Tensor& g) { return g * 0.5; });
//   ...
//   h.remove();  // the hook no longer runs; safe after x is gone, and a second remove() does nothing
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace hg {

// Hooks in registration order, each with a process-unique id.
template <class Hook>
struct HookList {
  std::vector<std::pair<uint64_t, Hook>> items;

  uint64_t add(Hook h) {
    static std::atomic<uint64_t> next{1};
    const uint64_t id = next.fetch_add(1, std::memory_order_relaxed);
    items.emplace_back(id, std::move(h));
    return id;
  }
  bool remove(uint64_t id) {
    return std::erase_if(items, [id](const auto& item) { return item.first == id; }) != 0;
  }
  bool empty() const { return items.empty(); }
  size_t size() const { return items.size(); }
};

class HookHandle {
 public:
  HookHandle() = default;
  // `list` owns the hook; the handle does not keep it alive.
  template <class Hook>
  HookHandle(uint64_t id, const std::shared_ptr<HookList<Hook>>& list)
      : id_(id), remover_([weak = std::weak_ptr<HookList<Hook>>(list)](uint64_t id) {
          const auto l = weak.lock();
          return l != nullptr && l->remove(id);
        }) {}

  // Unregisters the hook; true when this call removed it.
  bool remove() {
    if (!remover_) return false;
    const auto r = std::move(remover_);
    remover_ = nullptr;
    return r(id_);
  }
  uint64_t id() const { return id_; }

 private:
  uint64_t id_ = 0;
  std::function<bool(uint64_t)> remover_;
};

}  // namespace hg
