#include "amp/inspect/module_names.h"

namespace hg::amp::inspect {

ModuleNames::ModuleNames(const nn::Module* root) : root_(root) {
  if (root == nullptr) return;
  for (const auto& [path, m] : root->named_modules()) names_[m.get()] = Named{m, path};
}

ModuleName ModuleNames::current() const {
  const auto& stack = nn::Module::call_stack();
  for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
    const nn::Module* m = *it;
    if (root_ == nullptr || m == root_) return {"", m->type_name()};
    const auto found = names_.find(m);
    if (found != names_.end() && !found->second.module.expired()) return {found->second.path, m->type_name()};
  }
  return {};
}

}  // namespace hg::amp::inspect
