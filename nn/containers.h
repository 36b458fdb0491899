#pragma once
// Containers of modules without a forward of their own (libtorch's ModuleList and ModuleDict): they register
// their modules as children, so parameters(), state_dict(), to(), train()/eval() and hooks see them, and the
// owning module's forward decides how they run. Modules go in by value or as shared_ptrs (module_ptr).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace hg::nn {

namespace detail {
// m as a T, or an hg::Error naming where it was and what it is
template <class T>
std::shared_ptr<T> as_type(const char* container, const std::string& where, const std::shared_ptr<Module>& m) {
  auto t = std::dynamic_pointer_cast<T>(m);
  HG_CHECK(t != nullptr, container, ": the module at ", where, " is a ", m->type_name(), ", not the type asked for");
  return t;
}
}  // namespace detail

// Modules in order, named "0", "1", ... (state_dict keys "0.weight", ...), as torch.nn.ModuleList.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  template <class... M>
  explicit ModuleList(M&&... modules) {
    (push_back(std::forward<M>(modules)), ...);
  }
  template <class M>
  void push_back(M&& m) {
    add_child(std::to_string(size()), module_ptr(std::forward<M>(m)));
    items_.push_back(named_children().back().second);
  }
  void extend(const ModuleList& other);  // appends other's modules (shared, not copied)
  std::string type_name() const override { return "ModuleList"; }
  int64_t size() const { return static_cast<int64_t>(items_.size()); }
  bool is_empty() const { return items_.empty(); }
  std::shared_ptr<Module> operator[](int64_t i) const;  // negative counts from the end
  std::shared_ptr<Module> ptr(int64_t i) const { return (*this)[i]; }
  template <class T>
  std::shared_ptr<T> ptr(int64_t i) const {
    return detail::as_type<T>("ModuleList", "index " + std::to_string(i), (*this)[i]);
  }
  template <class T>
  T& at(int64_t i) const {
    return *ptr<T>(i);
  }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

// Modules by name, in insertion order, as torch.nn.ModuleDict (a name is a state_dict key prefix: no dots).
class ModuleDict : public Module {
 public:
  using Items = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;
  ModuleDict() = default;
  explicit ModuleDict(const Items& items) { update(items); }
  std::string type_name() const override { return "ModuleDict"; }
  // Adds m under key, or puts it in the place of the module already there (torch's dict[key] = m).
  template <class M>
  void insert(const std::string& key, M&& m) {
    set(key, module_ptr(std::forward<M>(m)));
  }
  void update(const Items& items);
  int64_t size() const { return static_cast<int64_t>(named_children().size()); }
  bool is_empty() const { return named_children().empty(); }
  bool contains(const std::string& key) const;
  std::shared_ptr<Module> operator[](const std::string& key) const;  // an hg::Error naming the keys when absent
  template <class T>
  std::shared_ptr<T> ptr(const std::string& key) const {
    return detail::as_type<T>("ModuleDict", "key '" + key + "'", (*this)[key]);
  }
  template <class T>
  T& at(const std::string& key) const {
    return *ptr<T>(key);
  }
  std::vector<std::string> keys() const;
  std::vector<std::shared_ptr<Module>> values() const;
  const Items& items() const { return named_children(); }
  auto begin() const { return named_children().begin(); }
  auto end() const { return named_children().end(); }

 private:
  void set(const std::string& key, std::shared_ptr<Module> m);
};

}  // namespace hg::nn
