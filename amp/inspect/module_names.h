#pragma once
// Which module an op runs in, for the inspectors that report per op (PrecisionTrace, NonFiniteOrigin):
// the innermost module on this thread's nn::Module::call_stack() that the root names.
#include <map>
#include <memory>
#include <string>

#include "nn/module.h"

namespace hg::amp::inspect {

struct ModuleName {
  std::string path;  // dotted path under the root ("features.3"); "" for the root itself or without a root
  std::string type;  // the module's type_name() ("Linear"); "" outside any module
  // The path, else the type name: "features.3", or "Net" for ops run by the root (or any module without a root).
  std::string label() const { return path.empty() ? type : path; }
};

class ModuleNames {
 public:
  // root (optional): its named_modules() are named by their paths, taken now; modules added later are not.
  explicit ModuleNames(const nn::Module* root);

  // The innermost module being called through operator() on this thread that the root names, or the root
  // itself; without a root, the innermost module (type only). {"", ""} outside any module. A named module
  // that has died is skipped (its address may have been reused).
  ModuleName current() const;

 private:
  struct Named {
    std::weak_ptr<nn::Module> module;
    std::string path;
  };
  const nn::Module* root_;
  std::map<const nn::Module*, Named> names_;
};

}  // namespace hg::amp::inspect
