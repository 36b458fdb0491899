#include "core/dispatch_table.h"

#include <algorithm>
#include <mutex>

namespace hg {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<const DispatchTableBase*> tables;
};

Registry& registry() {
  static Registry* r = new Registry;  // outlives the tables, which are function-local statics
  return *r;
}

}  // namespace

DispatchTableBase::DispatchTableBase(const char* name) : name_(name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.tables.push_back(this);
}

DispatchTableBase::~DispatchTableBase() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::erase(r.tables, this);
}

std::vector<KernelCoverage> table_coverage(DeviceType d) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<KernelCoverage> rows;
  for (const DispatchTableBase* tb : r.tables) {
    KernelCoverage row{tb->name(), 0, 0, {}};
    for (int i = 0; i < kNumDTypes; ++i) {
      const DType t = static_cast<DType>(i);
      if (!tb->registered(d, t)) continue;
      ++row.registered;
      if (tb->called(d, t)) ++row.called;
      else row.missing.push_back(t);
    }
    if (row.registered > 0) rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace hg
