// Module files and training checkpoints as safetensors (key layout in nn/checkpoint.h).
#include "nn/checkpoint.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "core/safetensors.h"

namespace hg::nn {

namespace {

constexpr const char* kMarker = "halfgrad.checkpoint";
constexpr std::string_view kSections[] = {"model.", "optim.", "scaler.", "extra."};

void put_prefixed(std::map<std::string, Tensor>& out, const std::string& prefix, const std::map<std::string, Tensor>& in) {
  for (const auto& [k, t] : in) out.emplace(prefix + k, t);
}

Tensor i64_scalar(uint64_t bits) {
  return from_vector(std::vector<int64_t>{std::bit_cast<int64_t>(bits)}, Shape{}, {.dtype = DType::I64});
}

// A 0-d I64 entry that must be there, as its u64 bits.
uint64_t read_u64(const std::string& path, std::map<std::string, Tensor>& file, const std::string& key) {
  const auto it = file.find(key);
  HG_CHECK(it != file.end(), "load_checkpoint: '", path, "' has no entry '", key,
           "'; it is not a training checkpoint (save one with nn::save_checkpoint; a module file loads with nn::load)");
  const Tensor& t = it->second;
  HG_CHECK(t.ndim() == 0 && t.dtype() == DType::I64, "load_checkpoint: '", path, "': entry '", key, "' has shape ",
           t.shape(), " and dtype ", t.dtype(), "; it must be a 0-d I64 tensor");
  const uint64_t v = std::bit_cast<uint64_t>(t.item<int64_t>());
  file.erase(it);
  return v;
}

constexpr const char* kModelParts = "halfgrad.models";
constexpr const char* kOptimizerParts = "halfgrad.optimizers";

// "<section><part>." for a named part, "<section>" for the part "".
std::string part_prefix(const char* section, const std::string& part) {
  return part.empty() ? std::string(section) : std::string(section) + part + ".";
}

void check_part_name(const std::string& name) {
  for (char c : name)
    HG_CHECK(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-', "save_checkpoint: part name '",
             name, "' has the character '", c, "'; use letters, digits, '_' and '-'");
}

// Each part's state_dict under <section><part>. (what: "module" or "optimizer", for the errors).
template <class Parts>
void put_parts(std::map<std::string, Tensor>& all, const char* section, const char* what, const Parts& parts,
               bool named) {
  for (const auto& [name, part] : parts) {
    HG_CHECK(part != nullptr, "save_checkpoint: ", what, " part '", name, "' is null");
    if (named) {
      HG_CHECK(!name.empty(), "save_checkpoint: with several parts every part needs a name");
      check_part_name(name);
    }
    put_prefixed(all, part_prefix(section, name), part->state_dict());
  }
}

template <class Map>
std::string join_names(const Map& parts) {
  std::string out;
  for (const auto& [name, p] : parts) out += (out.empty() ? "" : ",") + name;
  return out;
}

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string name; std::getline(in, name, ',');) out.push_back(name);
  return out;
}

// Moves the entries of `section` (e.g. "model.") into out[part] by the part names the file lists.
void split_parts(const std::string& path, std::map<std::string, Tensor>& section, const std::vector<std::string>& names,
                 std::map<std::string, StateDict>& out) {
  if (names.empty()) {
    out[""] = std::move(section);
    return;
  }
  for (const std::string& n : names) out[n];
  for (auto& [key, t] : section) {
    const size_t dot = key.find('.');
    const std::string part = dot == std::string::npos ? "" : key.substr(0, dot);
    HG_CHECK(out.count(part), "load_checkpoint: '", path, "' has an entry '", key, "' of no part it lists");
    out[part].emplace(key.substr(dot + 1), std::move(t));
  }
  section.clear();
}

}  // namespace

void save(const Module& m, const std::string& path) { save_safetensors(path, m.state_dict(), {{"format", "pt"}}); }

void load(Module& m, const std::string& path, LoadOptions o) {
  SafetensorsFile f = load_safetensors(path);
  HG_CHECK(!f.metadata.count(kMarker), "load: '", path,
           "' is a training checkpoint (keys model.*, optim.*, ...); restore it with nn::load_checkpoint");
  m.load_state_dict(f.tensors, o);
}

void save_checkpoint(const std::string& path, const Module& m, const optim::Optimizer& opt, CheckpointOptions o) {
  save_checkpoint(path, CheckpointParts{.modules = {{"", &m}}, .optimizers = {{"", &opt}}}, std::move(o));
}

void save_checkpoint(const std::string& path, const CheckpointParts& parts, CheckpointOptions o) {
  for (const char* key : {kMarker, kModelParts, kOptimizerParts})
    HG_CHECK(!o.metadata.count(key), "save_checkpoint: metadata key '", key, "' is halfgrad's own; rename yours");
  const bool named = !(parts.modules.size() == 1 && parts.modules.count("")) ||
                     !(parts.optimizers.size() <= 1 && (parts.optimizers.empty() || parts.optimizers.count("")));
  std::map<std::string, Tensor> all;
  put_parts(all, "model.", "module", parts.modules, named);
  put_parts(all, "optim.", "optimizer", parts.optimizers, named);
  put_prefixed(all, "scaler.", o.scaler);
  put_prefixed(all, "extra.", o.extra);
  const GeneratorState rng = default_generator().state();
  all.emplace("rng.seed", i64_scalar(rng.seed));
  all.emplace("rng.offset", i64_scalar(rng.offset));
  all.emplace("step", i64_scalar(static_cast<uint64_t>(o.step)));
  std::map<std::string, std::string> meta = o.metadata;
  meta.insert_or_assign(std::string(kMarker), std::string("1"));
  if (named) {
    meta.insert_or_assign(std::string(kModelParts), join_names(parts.modules));
    meta.insert_or_assign(std::string(kOptimizerParts), join_names(parts.optimizers));
  }
  save_safetensors(path, all, meta);
}

Checkpoint read_checkpoint(const std::string& path) {
  SafetensorsFile f = load_safetensors(path);
  Checkpoint ck;
  ck.rng.seed = read_u64(path, f.tensors, "rng.seed");
  ck.rng.offset = read_u64(path, f.tensors, "rng.offset");
  ck.step = std::bit_cast<int64_t>(read_u64(path, f.tensors, "step"));
  std::map<std::string, Tensor>* dst[] = {&ck.model, &ck.optimizer, &ck.scaler, &ck.extra};
  for (auto& [key, t] : f.tensors) {
    size_t s = 0;
    while (s < std::size(kSections) && !key.starts_with(kSections[s])) ++s;
    HG_CHECK(s < std::size(kSections), "load_checkpoint: '", path, "' has an entry '", key,
             "' outside the sections model., optim., scaler., extra.; it was not written by nn::save_checkpoint");
    dst[s]->emplace(key.substr(kSections[s].size()), std::move(t));
  }
  HG_CHECK(f.metadata.count(kMarker) && f.metadata.at(kMarker) == "1", "load_checkpoint: '", path,
           "' lacks metadata ", kMarker, "=1; it was not written by this version of nn::save_checkpoint");
  const bool named = f.metadata.count(kModelParts) != 0;
  split_parts(path, ck.model, named ? split_names(f.metadata.at(kModelParts)) : std::vector<std::string>{}, ck.models);
  split_parts(path, ck.optimizer, named ? split_names(f.metadata[kOptimizerParts]) : std::vector<std::string>{},
              ck.optimizers);
  if (ck.models.count("")) ck.model = ck.models.at("");
  if (ck.optimizers.count("")) ck.optimizer = ck.optimizers.at("");
  for (const char* key : {kMarker, kModelParts, kOptimizerParts}) f.metadata.erase(key);
  ck.metadata = std::move(f.metadata);
  return ck;
}

Checkpoint load_checkpoint(const std::string& path, Module& m, optim::Optimizer& opt, LoadOptions o) {
  return load_checkpoint(path, CheckpointTargets{.modules = {{"", &m}}, .optimizers = {{"", &opt}}}, o);
}

Checkpoint load_checkpoint(const std::string& path, const CheckpointTargets& parts, LoadOptions o) {
  Checkpoint ck = read_checkpoint(path);
  const auto same_names = [](const auto& a, const auto& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const auto& x, const auto& y) {
             return x.first == y.first;
           });
  };
  HG_CHECK(same_names(ck.models, parts.modules) && same_names(ck.optimizers, parts.optimizers), "load_checkpoint: '",
           path, "' holds the modules [", join_names(ck.models), "] and optimizers [", join_names(ck.optimizers),
           "], but [", join_names(parts.modules), "] and [", join_names(parts.optimizers),
           "] were given; pass the parts it was saved with");
  // A module's tensors are replaced, not written into, so these snapshots keep the old values; an
  // optimizer's state_dict is a copy.
  std::vector<std::pair<Module*, StateDict>> done_modules;
  std::vector<std::pair<optim::Optimizer*, StateDict>> done_optimizers;
  try {
    for (const auto& [name, m] : parts.modules) {
      HG_CHECK(m != nullptr, "load_checkpoint: module part '", name, "' is null");
      StateDict before = m->state_dict();
      m->load_state_dict(ck.models.at(name), o);  // checks everything before it changes anything
      done_modules.emplace_back(m, std::move(before));
    }
    for (const auto& [name, opt] : parts.optimizers) {
      HG_CHECK(opt != nullptr, "load_checkpoint: optimizer part '", name, "' is null");
      StateDict before = parts.optimizers.size() > 1 ? opt->state_dict() : StateDict{};
      opt->load_state_dict(ck.optimizers.at(name));  // all or nothing by itself
      done_optimizers.emplace_back(opt, std::move(before));
    }
  } catch (...) {
    for (auto& [m, before] : done_modules) m->load_state_dict(before, {.strict = false});
    for (auto& [opt, before] : done_optimizers) opt->load_state_dict(before);
    throw;
  }
  default_generator().set_state(ck.rng);
  return ck;
}

}  // namespace hg::nn
