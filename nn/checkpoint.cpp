// Module files and training checkpoints as safetensors (key layout in nn/checkpoint.h).
#include "nn/checkpoint.h"

#include <bit>
#include <string_view>
#include <utility>

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

}  // namespace

void save(const Module& m, const std::string& path) { save_safetensors(path, m.state_dict(), {{"format", "pt"}}); }

void load(Module& m, const std::string& path, LoadOptions o) {
  SafetensorsFile f = load_safetensors(path);
  HG_CHECK(!f.metadata.count(kMarker), "load: '", path,
           "' is a training checkpoint (keys model.*, optim.*, ...); restore it with nn::load_checkpoint");
  m.load_state_dict(f.tensors, o);
}

void save_checkpoint(const std::string& path, const Module& m, const optim::Optimizer& opt, CheckpointOptions o) {
  HG_CHECK(!o.metadata.count(kMarker), "save_checkpoint: metadata key '", kMarker, "' is halfgrad's own; rename yours");
  std::map<std::string, Tensor> all;
  put_prefixed(all, "model.", m.state_dict());
  put_prefixed(all, "optim.", opt.state_dict());
  put_prefixed(all, "scaler.", o.scaler);
  put_prefixed(all, "extra.", o.extra);
  const GeneratorState rng = default_generator().state();
  all.emplace("rng.seed", i64_scalar(rng.seed));
  all.emplace("rng.offset", i64_scalar(rng.offset));
  all.emplace("step", i64_scalar(static_cast<uint64_t>(o.step)));
  std::map<std::string, std::string> meta = o.metadata;
  meta.insert_or_assign(std::string(kMarker), std::string("1"));
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
  f.metadata.erase(kMarker);
  ck.metadata = std::move(f.metadata);
  return ck;
}

Checkpoint load_checkpoint(const std::string& path, Module& m, optim::Optimizer& opt, LoadOptions o) {
  Checkpoint ck = read_checkpoint(path);
  // The module's tensors are replaced, not written into, so this snapshot keeps the old values.
  const StateDict before = m.state_dict();
  m.load_state_dict(ck.model, o);  // checks everything before it changes anything
  try {
    opt.load_state_dict(ck.optimizer);  // all or nothing by itself
  } catch (...) {
    m.load_state_dict(before, {.strict = false});
    throw;
  }
  default_generator().set_state(ck.rng);
  return ck;
}

}  // namespace hg::nn
