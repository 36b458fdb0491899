#include "amp/inspect/memory.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <iomanip>
#include <set>
#include <sstream>
#include <utility>

#include "amp/inspect/text_file.h"
#include "core/allocator.h"
#include "core/atomic_file.h"
#include "ops/autocast/autocast.h"

namespace hg::amp::inspect {

namespace {

constexpr const auto& kDTypes = kAllDTypes;  // core/dtype.h
constexpr Role kRoles[] = {Role::Params,     Role::Masters,   Role::Grads,       Role::OptimizerState, Role::Buffers,
                           Role::ExtraState, Role::CastCache, Role::Activations, Role::Other};
constexpr size_t idx(Role r) { return static_cast<size_t>(r); }
constexpr size_t idx(DType dt) { return static_cast<size_t>(dt); }

std::vector<Tensor> all_params(const LedgerSources& s) {
  std::vector<Tensor> out;
  if (s.model != nullptr) out = s.model->parameters();
  if (s.optimizer != nullptr) {
    const std::vector<Tensor> p = s.optimizer->parameters();
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

// Adds each storage on the ledger's device once, by the dtype it was allocated for (as
// memory::allocated(dev, dtype) counts it), so a view or a tensor shared by the model and the optimizer
// is not counted twice.
class StorageCounter {
 public:
  explicit StorageCounter(LedgerSnapshot& s) : s_(s) {}
  void add(Role r, const Tensor& t) {
    if (!t.defined()) return;
    const Storage* st = t.unsafe_impl()->storage.get();
    if (st == nullptr || !(st->device == s_.device) || !seen_.insert(st).second) return;
    s_.bytes[idx(r)][idx(st->dtype)] += static_cast<int64_t>(st->nbytes);
  }

 private:
  LedgerSnapshot& s_;
  std::set<const Storage*> seen_;
};

// The optimizer's live buffers (momentum, moments, Kahan compensations) and device step counters, without
// copies; masters are counted through master(i). Host step counters are integers, not tensor memory: only counted.
void count_optimizer_state(const optim::Optimizer& opt, StorageCounter& counter, LedgerSnapshot& s) {
  for (size_t i = 0; i < opt.parameters().size(); ++i) {
    for (const Tensor& b : opt.state_buffers(i)) counter.add(Role::OptimizerState, b);
    if (const Tensor c = opt.compensation(i); c.defined()) counter.add(Role::OptimizerState, c);
    const optim::Optimizer::StepCount c = opt.step_count(i);
    if (c.device.defined()) counter.add(Role::OptimizerState, c.device);
    else if (c.host > 0) ++s.step_counters;
  }
}

}  // namespace

const char* role_name(Role r) {
  switch (r) {
    case Role::Params: return "params";
    case Role::Masters: return "masters";
    case Role::Grads: return "grads";
    case Role::OptimizerState: return "optimizer_state";
    case Role::Buffers: return "buffers";
    case Role::ExtraState: return "extra_state";
    case Role::CastCache: return "cast_cache";
    case Role::Activations: return "activations";
    case Role::Other: return "other";
  }
  return "?";
}

int64_t LedgerSnapshot::role_bytes(Role r) const {
  int64_t n = 0;
  for (DType dt : kDTypes) n += at(r, dt);
  return n;
}

int64_t LedgerSnapshot::dtype_bytes(DType dt) const {
  int64_t n = 0;
  for (Role r : kRoles) n += at(r, dt);
  return n;
}

int64_t LedgerSnapshot::total() const {
  int64_t n = 0;
  for (Role r : kRoles) n += role_bytes(r);
  return n;
}

MemoryLedger::MemoryLedger(LedgerSources s) : sources_(s) {
  for (const Tensor& p : all_params(sources_))
    HG_CHECK(p.device() == sources_.device, "MemoryLedger: a parameter of shape ", p.shape(), " lives on ", p.device(),
             " but the ledger counts ", sources_.device, "; pass .device = the model's device");
}

MemoryLedger::ByDType MemoryLedger::unaccounted(LedgerSnapshot& s) const {
  const Device dev = sources_.device;
  ByDType held{};
  for (DType dt : kDTypes) held[idx(dt)] = memory::allocated(dev, dt);
  s.allocated = memory::allocated(dev);
  s.peak = memory::peak_allocated(dev);

  StorageCounter counter(s);
  const std::vector<Tensor> params = all_params(sources_);
  for (const Tensor& p : params) counter.add(Role::Params, p);
  for (const Tensor& p : params) counter.add(Role::Grads, p.grad());
  if (sources_.optimizer != nullptr) {
    for (size_t i = 0; i < sources_.optimizer->parameters().size(); ++i)
      counter.add(Role::Masters, sources_.optimizer->master(i));
    count_optimizer_state(*sources_.optimizer, counter, s);
  }
  if (sources_.model != nullptr) {
    for (const auto& [name, b] : sources_.model->named_buffers()) counter.add(Role::Buffers, b);
    for (const auto& [name, m] : sources_.model->named_modules())
      for (const auto& [k, t] : m->extra_state()) counter.add(Role::ExtraState, t);
  }
  for (DType dt : kDTypes) s.bytes[idx(Role::CastCache)][idx(dt)] = amp::cast_cache_bytes(dt);

  ByDType rest{};
  for (DType dt : kDTypes) {
    rest[idx(dt)] = held[idx(dt)] - s.dtype_bytes(dt);
    HG_CHECK(rest[idx(dt)] >= 0, "MemoryLedger::snapshot: the roles hold ", s.dtype_bytes(dt), " bytes of ", dt,
             " but the allocator of ", dev, " holds ", held[idx(dt)],
             "; the cast cache may hold casts of another device's tensors: snapshot one device at a time");
  }
  return rest;
}

void MemoryLedger::begin_forward() {
  LedgerSnapshot scratch;
  scratch.device = sources_.device;
  mark_ = unaccounted(scratch);
}

LedgerSnapshot MemoryLedger::snapshot(std::string label) const {
  HG_CHECK(!label.empty(), "MemoryLedger::snapshot: empty label; name the snapshot (\"F32 forward\"), it heads "
                           "its column in print_ledgers");
  LedgerSnapshot s{.label = std::move(label), .device = sources_.device};
  const ByDType rest = unaccounted(s);
  for (DType dt : kDTypes) {
    // Bytes in no role that appeared since the mark; what in no role disappeared since is not subtracted
    // from them (the caller may have freed an input).
    const int64_t grown = mark_ ? std::max<int64_t>(0, rest[idx(dt)] - (*mark_)[idx(dt)]) : 0;
    s.bytes[idx(Role::Activations)][idx(dt)] = grown;
    s.bytes[idx(Role::Other)][idx(dt)] = rest[idx(dt)] - grown;
  }
  return s;
}

// --- reports ---

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes > -1024 && bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  size_t u = 0;
  for (v /= 1024; (v >= 1024 || v <= -1024) && u + 1 < std::size(units); ++u) v /= 1024;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

namespace {

// (role, dtype) pairs where some ledger holds bytes, in role then dtype order.
std::vector<std::pair<Role, DType>> nonzero_rows(const std::vector<LedgerSnapshot>& ledgers) {
  std::vector<std::pair<Role, DType>> rows;
  for (Role r : kRoles)
    for (DType dt : kDTypes)
      if (std::any_of(ledgers.begin(), ledgers.end(), [&](const LedgerSnapshot& l) { return l.at(r, dt) != 0; }))
        rows.emplace_back(r, dt);
  return rows;
}

std::string ratio_text(int64_t num, int64_t den) {
  if (den == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", static_cast<double>(num) / static_cast<double>(den));
  return buf;
}

std::string percent_text(int64_t part, int64_t whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0);
  return buf;
}

void check_ledgers(const char* op, const std::vector<LedgerSnapshot>& ledgers) {
  HG_CHECK(!ledgers.empty(), op, ": no ledgers; pass at least one MemoryLedger::snapshot()");
}

// One table row: role and dtype left-aligned, then right-aligned cells of the given widths.
void table_row(std::ostream& os, const std::string& role, const std::string& dtype, const std::vector<std::string>& cells,
               const std::vector<size_t>& widths) {
  os << std::left << std::setw(17) << role << std::setw(6) << dtype << std::right;
  for (size_t i = 0; i < cells.size(); ++i) os << std::setw(static_cast<int>(widths[i])) << cells[i];
  os << '\n';
}

void step_counter_note(std::ostream& os, const std::vector<LedgerSnapshot>& ledgers) {
  for (const LedgerSnapshot& l : ledgers)
    if (l.step_counters > 0)
      os << "(" << l.label << ": " << l.step_counters << " optimizer step counters, host integers, not in the table)\n";
}

}  // namespace

void LedgerSnapshot::print(std::ostream& os) const {
  const std::vector<size_t> widths = {12, 9};
  os << "memory ledger \"" << label << "\" on " << device << '\n';
  table_row(os, "role", "dtype", {"size", "share"}, widths);
  const int64_t sum = total();
  for (const auto& [r, dt] : nonzero_rows({*this}))
    table_row(os, role_name(r), dtype_name(dt), {format_bytes(at(r, dt)), percent_text(at(r, dt), sum)}, widths);
  table_row(os, "total", "", {format_bytes(sum), percent_text(sum, sum)}, widths);
  table_row(os, "peak", "", {format_bytes(peak), ""}, widths);
  step_counter_note(os, {*this});
}

void print_ledgers(std::ostream& os, const std::vector<LedgerSnapshot>& ledgers) {
  check_ledgers("print_ledgers", ledgers);
  const LedgerSnapshot& first = ledgers.front();
  std::vector<std::string> header;
  for (const LedgerSnapshot& l : ledgers) header.push_back(l.label);
  for (size_t i = 1; i < ledgers.size(); ++i) header.push_back(ledgers[i].label + "/" + first.label);
  std::vector<size_t> widths;
  for (const std::string& h : header) widths.push_back(std::max<size_t>(h.size(), 10) + 2);

  // The cells of one row: each ledger's bytes, then each ratio to the first ledger.
  const auto cells = [&](auto&& value) {
    std::vector<std::string> out;
    for (const LedgerSnapshot& l : ledgers) out.push_back(format_bytes(value(l)));
    for (size_t i = 1; i < ledgers.size(); ++i) out.push_back(ratio_text(value(ledgers[i]), value(first)));
    return out;
  };
  table_row(os, "role", "dtype", header, widths);
  for (const auto& row : nonzero_rows(ledgers)) {
    const Role role = row.first;  // no structured bindings: clang before 16 cannot capture them
    const DType dtype = row.second;
    table_row(os, role_name(role), dtype_name(dtype),
              cells([role, dtype](const LedgerSnapshot& l) { return l.at(role, dtype); }), widths);
  }
  table_row(os, "total", "", cells([](const LedgerSnapshot& l) { return l.total(); }), widths);
  table_row(os, "peak", "", cells([](const LedgerSnapshot& l) { return l.peak; }), widths);
  step_counter_note(os, ledgers);
}

void write_ledgers_csv(const std::string& path, const std::vector<LedgerSnapshot>& ledgers) {
  check_ledgers("write_ledgers_csv", ledgers);
  std::ostringstream os;
  os << "label,device,role,dtype,bytes\n";
  for (const LedgerSnapshot& l : ledgers) {
    const std::string prefix = csv_field(l.label) + ',' + l.device.str() + ',';
    for (const auto& [r, dt] : nonzero_rows({l})) os << prefix << role_name(r) << ',' << dtype_name(dt) << ',' << l.at(r, dt) << '\n';
    os << prefix << "total,all," << l.total() << '\n';
    os << prefix << "peak,all," << l.peak << '\n';
  }
  write_file_atomic("write_ledgers_csv", path, os.str());
}

namespace {

std::string ledger_json(const LedgerSnapshot& l) {
  std::vector<std::string> roles, rows;
  for (Role r : kRoles) roles.push_back(json_string(role_name(r)) + ": " + std::to_string(l.role_bytes(r)));
  for (const auto& [r, dt] : nonzero_rows({l}))
    rows.push_back("{\"role\": " + json_string(role_name(r)) + ", \"dtype\": " + json_string(dtype_name(dt)) +
                   ", \"bytes\": " + std::to_string(l.at(r, dt)) + "}");
  std::ostringstream os;
  os << "{\"label\": " << json_string(l.label) << ", \"device\": " << json_string(l.device.str())
     << ", \"allocated\": " << l.allocated << ", \"peak\": " << l.peak << ", \"total\": " << l.total()
     << ", \"step_counters\": " << l.step_counters << ", \"roles\": {" << join(roles, ", ") << "}, \"rows\": ["
     << join(rows, ", ") << "]}";
  return os.str();
}

}  // namespace

void write_ledgers_json(const std::string& path, const std::vector<LedgerSnapshot>& ledgers) {
  check_ledgers("write_ledgers_json", ledgers);
  std::vector<std::string> items;
  for (const LedgerSnapshot& l : ledgers) items.push_back("  " + ledger_json(l));
  write_file_atomic("write_ledgers_json", path, "[\n" + join(items, ",\n") + "\n]\n");
}

}  // namespace hg::amp::inspect
