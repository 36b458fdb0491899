// cpu_engines: which engine halfgrad runs for each dtype on this CPU, after the ISA caps in the
// environment (DNNL_MAX_CPU_ISA for oneDNN, HG_CONVERT_ISA for halfgrad's own loops and conversions).
//   cpu_engines            # a readable table for this CPU
//   cpu_engines --rows CAP # one tab-separated line per dtype, first column CAP (scripts/isa-caps.sh)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cli.h"
#include "core/convert.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "cpu/conv.h"
#include "cpu/gemm.h"
#include "cpu/onednn.h"

using namespace hg;

namespace {

struct Row {
  DType dtype;
  std::string gemm, conv, convert;
};

Row row_for(DType dt) {
  // F16/BF16 go through the bulk converters whenever they are widened (and in every elementwise op)
  const std::string convert = is_low_precision(dt) ? convert_isa() : "-";
  return {dt, cpu::gemm_engine(dt), cpu::conv_engine(dt), convert};
}

const char* env_or_dash(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : "-";
}

}  // namespace

int run(int argc, char** argv) {
  const bool rows = argc == 3 && std::strcmp(argv[1], "--rows") == 0;
  if (argc != 1 && !rows) {
    std::fprintf(stderr, "usage: %s [--rows CAP]\n", argv[0]);
    return 2;
  }
  const DType dtypes[] = {DType::F32, DType::BF16, DType::F16, DType::F64};
  if (rows) {
    for (DType dt : dtypes) {
      const Row r = row_for(dt);
      std::printf("%s\t%s\t%s\t%s\t%s\t%s\n", argv[2], dtype_name(dt), r.gemm.c_str(), r.conv.c_str(),
                  r.convert.c_str(), simd_tier_name(simd_tier()));
    }
    return 0;
  }
  std::printf("CPU: %s\noneDNN ISA: %s (DNNL_MAX_CPU_ISA=%s), HG_CONVERT_ISA=%s\n\n", cpu_summary().c_str(),
              cpu::onednn_isa().c_str(), env_or_dash("DNNL_MAX_CPU_ISA"), env_or_dash("HG_CONVERT_ISA"));
  std::printf("%-6s %-34s %-34s %s\n", "dtype", "GEMM (matmul, linear)", "conv2d", "conversions");
  for (DType dt : dtypes) {
    const Row r = row_for(dt);
    std::printf("%-6s %-34s %-34s %s\n", dtype_name(dt), r.gemm.c_str(), r.conv.c_str(), r.convert.c_str());
  }
  return 0;
}

int main(int argc, char** argv) {
  return example::guarded_main("cpu_engines", [&] { return run(argc, argv); });
}
