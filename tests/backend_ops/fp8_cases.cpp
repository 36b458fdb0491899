// hg_backend_ops cases of FP8 scaling, MX block scaling and stochastic rounding (tests/backend_ops/cases.h).
#include "backend_ops/cases.h"

namespace hg::backend_ops {

void add_fp8_cases(std::vector<OpCase>& ops) {
  // per-tensor FP8 scaling: amax, the scale from it, the scaled casts (E4M3 saturated, E5M2 not) and the decode
  ops.push_back({"fp8_quantize", "fp8_quantize, fp8_scale_update, fp8_dequantize", Check::Exact,
                 [](DType dt) {
                   Maker m{Generator(seed_of("fp8", dt)), dt};
                   return std::vector<Case>{{"(33,17)", {m.normal({33, 17}, 30.0)}, {false}},
                                            {"(1)", {m.normal({1})}, {false}},
                                            {"large", {m.normal({kLarge}, 1e-3)}, {false}}};
                 },
                 [](const std::vector<Tensor>& in, const Case&) {
                   const Tensor a = amax(in[0]);
                   const Tensor s4 = fp8_scale_from_amax(a, DType::F8E4M3, {.margin = 0.5f});
                   const Tensor s5 = fp8_scale_from_amax(a, DType::F8E5M2, {.pow2 = true});
                   const Tensor big = mul(s5, 4.0);  // past E5M2's range: inf without saturation
                   const Tensor q4 = fp8_quantize(in[0], DType::F8E4M3, s4);
                   const Tensor q5 = fp8_quantize(in[0], DType::F8E5M2, big, {.saturate = false});
                   return std::vector<Tensor>{a, s4, s5, fp8_dequantize(q4, rdiv(1.0, s4), in[0].dtype()),
                                              fp8_dequantize(q5, rdiv(1.0, big), in[0].dtype())};
                 }});
  // MX block scaling: every format and scale rule, blocks along the last dim and dim 0 (short last blocks)
  ops.push_back({"mx_quantize", "mx_quantize, mx_dequantize", Check::Exact,
                 [](DType dt) {
                   Maker m{Generator(seed_of("mx", dt)), dt};
                   return std::vector<Case>{{"(33,70)", {m.normal({33, 70}, 30.0)}, {false}},
                                            {"large", {m.normal({kLarge}, 1e-3)}, {false}}};
                 },
                 [](const std::vector<Tensor>& in, const Case&) {
                   std::vector<Tensor> out;
                   for (const MxFormat f : {MxFormat::MXFP8_E4M3, MxFormat::MXFP8_E5M2, MxFormat::MXFP4})
                     for (const MxScaleRule r : {MxScaleRule::Floor, MxScaleRule::Up}) {
                       out.push_back(mx_dequantize(mx_quantize(in[0], f, {.rule = r}), in[0].dtype()));
                       if (in[0].ndim() == 2) out.push_back(mx_dequantize(mx_quantize(in[0], f, {.rule = r, .dim = 0}), in[0].dtype()));
                     }
                   return out;
                 }});
  // the FP8 linear layer (current scaling, HYBRID: E5M2 gradients): shapes whose m, n and k are multiples of 16
  // run the native FP8 GEMM on a device with FP8 Tensor Cores (the emulated sm_90 has them), the others the
  // decode route; both are exact products, summed in F32 by the decode route and the emulator, with an FP8
  // Tensor Core's narrower accumulator on a real GPU (Check::Fp8Gemm)
  ops.push_back({"fp8_linear", "fp8_gemm (native FP8 GEMM), fp8_quantize, fp8_scale_update, matmul, copy",
                 Check::Fp8Gemm,
                 [](DType dt) {
                   Maker m{Generator(seed_of("fp8_linear", dt)), dt};
                   return std::vector<Case>{
                       {"(32,64) w(48,64) b(48)", {m.normal({32, 64}), m.normal({48, 64}, 0.2), m.normal({48})}, {true, true, true}},
                       {"(2,16,64) w(32,64) b(32)", {m.normal({2, 16, 64}), m.normal({32, 64}, 0.2), m.normal({32})},
                        {true, true, false}},
                       {"(33,70) w(24,70) b(24)", {m.normal({33, 70}), m.normal({24, 70}, 0.2), m.normal({24})}, {true, true, true}}};
                 },
                 [](const std::vector<Tensor>& in, const Case&) {
                   auto st = std::make_shared<Fp8LinearState>(Fp8Recipe{.scaling = Fp8Scaling::Current}, in[0].device());
                   return std::vector<Tensor>{fp8_linear(in[0], in[1], in[2], st)};
                 },
                 {DType::F32, DType::BF16}});
  // stochastic rounding: the same Philox stream on both devices gives the same bits, to every narrow format
  ops.push_back({"stochastic_round", "stochastic_round", Check::Exact,
                 [](DType dt) {
                   Maker m{Generator(seed_of("stochastic_round", dt)), dt};
                   return std::vector<Case>{{"(5,77)", {m.normal({5, 77}, 3.0)}, {false}},
                                            {"large", {m.normal({kLarge}, 1e-2)}, {false}}};
                 },
                 [](const std::vector<Tensor>& in, const Case&) {
                   std::vector<Tensor> out;
                   for (const DType to : {DType::F16, DType::BF16, DType::F8E4M3, DType::F8E5M2}) {
                     Generator g(99);
                     out.push_back(stochastic_round(in[0], to, &g).to(DType::F32));
                   }
                   return out;
                 },
                 {DType::F32}});
}

}  // namespace hg::backend_ops
