#include "nn/containers.h"

#include <sstream>

namespace hg::nn {

void ModuleList::extend(const ModuleList& other) {
  HG_CHECK(&other != this, "ModuleList: extend with itself; copy its modules into a vector first");
  for (const auto& m : other) push_back(m);
}

std::shared_ptr<Module> ModuleList::operator[](int64_t i) const {
  const int64_t n = size();
  HG_CHECK(i >= -n && i < n, "ModuleList: index ", i, " is out of range for ", n, " modules");
  return items_[static_cast<size_t>(i < 0 ? i + n : i)];
}

void ModuleDict::update(const Items& items) {
  for (const auto& [key, m] : items) set(key, m);
}

void ModuleDict::set(const std::string& key, std::shared_ptr<Module> m) {
  HG_CHECK(m != nullptr, "ModuleDict: the module for key '", key, "' is null");
  if (contains(key)) replace_module(key, std::move(m));
  else add_child(key, std::move(m));
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [k, m] : named_children())
    if (k == key) return true;
  return false;
}

std::shared_ptr<Module> ModuleDict::operator[](const std::string& key) const {
  for (const auto& [k, m] : named_children())
    if (k == key) return m;
  std::ostringstream known;
  for (const auto& [k, m] : named_children()) known << (known.tellp() > 0 ? ", " : "") << "'" << k << "'";
  HG_FAIL("ModuleDict: no module under key '", key, "'; the keys are ", known.str().empty() ? "none" : known.str());
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, m] : named_children()) out.push_back(k);
  return out;
}

std::vector<std::shared_ptr<Module>> ModuleDict::values() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [k, m] : named_children()) out.push_back(m);
  return out;
}

}  // namespace hg::nn
