#include "cpu/onednn.h"

#include <utility>

#include "core/convert.h"

namespace hg::cpu {

#if HG_HAS_ONEDNN
namespace {
// dnnl_cpu_isa_t values are nested bit masks: an ISA includes every ISA whose bits it contains.
bool has_isa(dnnl::cpu_isa have, dnnl::cpu_isa want) {
  const auto h = static_cast<unsigned>(have), w = static_cast<unsigned>(want);
  return (h & w) == w;
}
}  // namespace

const dnnl::engine& onednn_engine() {
  static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

std::string onednn_isa() {
  using I = dnnl::cpu_isa;
  const I isa = dnnl::get_effective_cpu_isa();  // reads DNNL_MAX_CPU_ISA on first use
  // most capable first: the first one contained in `isa` names it
  static const std::pair<I, const char*> names[] = {
      {I::avx512_core_amx, "avx512_core_amx"}, {I::avx512_core_bf16, "avx512_core_bf16"},
      {I::avx512_core_vnni, "avx512_core_vnni"}, {I::avx512_core, "avx512_core"},
      {I::avx512_mic_4ops, "avx512_mic_4ops"}, {I::avx512_mic, "avx512_mic"},
      {I::avx2_vnni, "avx2_vnni"}, {I::avx2, "avx2"}, {I::avx, "avx"}, {I::sse41, "sse41"}};
  for (const auto& [i, name] : names)
    if (has_isa(isa, i)) return name;
  return "baseline";
}

bool onednn_native(DType dt) {
  if (dt == DType::F32) return true;
  if (dt != DType::BF16) return false;
  static const bool bf16 = has_isa(dnnl::get_effective_cpu_isa(), dnnl::cpu_isa::avx512_core_bf16);
  return bf16;
}
#else
std::string onednn_isa() { return "none"; }
bool onednn_native(DType) { return false; }
#endif

std::string widened_engine(const std::string& f32_engine) {
  return std::string("widen:") + convert_isa() + "+" + f32_engine;
}

}  // namespace hg::cpu
