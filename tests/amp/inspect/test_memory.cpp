// amp::inspect::MemoryLedger: exact bytes by role for a known model (Linear(8,4) + ReLU + Linear(4,2),
// batch 3) in F32, under O2 and under autocast BF16; activations kept by forward and released by
// backward; rows that add up to the allocator; side-by-side and CSV/JSON reports; no number changes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "amp/inspect/memory.h"
#include "amp/opt_level.h"
#include "core/allocator.h"
#include "core/rng.h"
#include "json_reader.h"
#include "nn/nn.h"
#include "ops/autocast/autocast.h"
#include "ops/loss.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace hg;
using namespace hg::amp::inspect;

namespace {

// Parameter elements of Linear(8,4) + Linear(4,2): weights and biases.
constexpr int64_t kParamElems = 8 * 4 + 4 + 4 * 2 + 2;  // 46
constexpr int64_t kBatch = 3;

struct Net {
  std::shared_ptr<nn::Linear> l1 = std::make_shared<nn::Linear>(8, 4);
  std::shared_ptr<nn::Linear> l2 = std::make_shared<nn::Linear>(4, 2);
  nn::Sequential seq{l1, std::make_shared<nn::ReLU>(), l2};
};

// The intermediate tensors of one forward, held so their sizes can be checked against the ledger.
struct Forward {
  Tensor h, r, y, loss;
};
Forward run_forward(Net& net, const Tensor& x, const Tensor& target) {
  Forward f;
  f.h = (*net.l1)(x);
  f.r = relu(f.h);
  f.y = (*net.l2)(f.r);
  f.loss = mse_loss(f.y, target);
  return f;
}

struct Data {
  Tensor x, target;
};
Data make_data() {
  manual_seed(7);
  return {randn({kBatch, 8}), randn({kBatch, 2})};
}

// Every snapshot's rows add up to what the allocator held when it was taken.
void check_adds_up(const LedgerSnapshot& s) {
  CHECK(s.total() == s.allocated);
  int64_t by_dtype = 0;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64}) by_dtype += s.dtype_bytes(dt);
  CHECK(by_dtype == s.total());
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The whitespace-separated fields of the first table line whose fields start with `start`'s.
std::vector<std::string> find_row(const std::string& table, const std::string& start) {
  const auto fields = [](const std::string& line) {
    std::istringstream in(line);
    std::vector<std::string> out;
    for (std::string f; in >> f;) out.push_back(f);
    return out;
  };
  const std::vector<std::string> want = fields(start);
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) {
    const std::vector<std::string> have = fields(line);
    if (have.size() >= want.size() && std::equal(want.begin(), want.end(), have.begin())) return have;
  }
  FAIL("no row starting with '" << start << "' in\n" << table);
  return {};
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

}  // namespace

TEST_CASE("an F32 ledger counts parameters, gradients, activations and SGD momentum exactly", "[inspect][ledger][cpu]") {
  manual_seed(1);
  Net net;
  const Data d = make_data();
  optim::SGD opt(net.seq.parameters(), {.lr = 0.1, .momentum = 0.9});
  MemoryLedger ledger({.model = &net.seq, .optimizer = &opt});
  const int64_t f32_params = 4 * kParamElems;  // 184

  const LedgerSnapshot start = ledger.snapshot("start");
  CHECK(start.at(Role::Params, DType::F32) == f32_params);  // model and optimizer share them: counted once
  CHECK(start.role_bytes(Role::Params) == f32_params);
  CHECK(start.role_bytes(Role::Grads) == 0);
  CHECK(start.role_bytes(Role::Activations) == 0);  // no begin_forward
  CHECK(start.at(Role::Other, DType::F32) >= static_cast<int64_t>(d.x.nbytes() + d.target.nbytes()));
  check_adds_up(start);

  const int64_t f32_before = memory::allocated(Device::cpu(), DType::F32);
  ledger.begin_forward();
  Forward f = run_forward(net, d.x, d.target);
  const LedgerSnapshot fwd = ledger.snapshot("forward");
  // What forward allocated and still holds, read from the allocator directly
  CHECK(fwd.at(Role::Activations, DType::F32) == memory::allocated(Device::cpu(), DType::F32) - f32_before);
  // ... at least the tensors this test holds: h and relu(h) (3x4), y (3x2), the loss (a scalar)
  CHECK(fwd.at(Role::Activations, DType::F32) >= 4 * (2 * kBatch * 4 + kBatch * 2 + 1));
  CHECK(fwd.role_bytes(Role::Activations) == fwd.at(Role::Activations, DType::F32));
  CHECK(fwd.at(Role::Other, DType::F32) == start.at(Role::Other, DType::F32));
  check_adds_up(fwd);

  f.loss.backward();
  f.h = f.r = f.y = Tensor();  // the graph released what it saved; only the loss is still held
  const LedgerSnapshot bwd = ledger.snapshot("backward");
  CHECK(bwd.at(Role::Grads, DType::F32) == f32_params);
  CHECK(bwd.role_bytes(Role::Activations) == static_cast<int64_t>(f.loss.nbytes()));
  check_adds_up(bwd);

  opt.step();
  const LedgerSnapshot stepped = ledger.snapshot("step");
  CHECK(stepped.at(Role::OptimizerState, DType::F32) == f32_params);  // one momentum buffer per parameter
  CHECK(stepped.role_bytes(Role::Masters) == 0);                       // F32 parameters are their own masters
  CHECK(stepped.step_counters == 0);                                    // SGD counts no steps
  check_adds_up(stepped);
}

TEST_CASE("an F32 ledger counts Adam's two moments and its step counters", "[inspect][ledger][cpu]") {
  manual_seed(2);
  Net net;
  const Data d = make_data();
  optim::Adam opt(net.seq.parameters(), {.lr = 1e-3});
  MemoryLedger ledger({.model = &net.seq, .optimizer = &opt});
  run_forward(net, d.x, d.target).loss.backward();
  opt.step();
  const int64_t peak_before = memory::peak_allocated(Device::cpu());
  const LedgerSnapshot s = ledger.snapshot("adam");
  CHECK(s.at(Role::OptimizerState, DType::F32) == 2 * 4 * kParamElems);  // exp_avg and exp_avg_sq
  CHECK(s.step_counters == 4);                                           // one per parameter tensor
  CHECK(s.at(Role::Grads, DType::F32) == 4 * kParamElems);
  CHECK(s.peak == peak_before);  // a snapshot allocates nothing
  check_adds_up(s);
}

TEST_CASE("under O2 the ledger shows F16 parameters and gradients and F32 masters", "[inspect][ledger][amp][cpu]") {
  manual_seed(3);
  Net net;
  const Data d = make_data();
  optim::SGD opt(net.seq.parameters(), {.lr = 0.1, .momentum = 0.9});
  amp::initialize(net.seq, opt, amp::OptLevel::O2, {.verbose = false});
  MemoryLedger ledger({.model = &net.seq, .optimizer = &opt});

  const LedgerSnapshot start = ledger.snapshot("O2");
  CHECK(start.at(Role::Params, DType::F16) == 2 * kParamElems);  // 92
  CHECK(start.at(Role::Params, DType::F32) == 0);
  CHECK(start.role_bytes(Role::Masters) == 0);  // made at the first step

  ledger.begin_forward();
  Forward f = run_forward(net, d.x.to(DType::F16), d.target.to(DType::F16));
  const LedgerSnapshot fwd = ledger.snapshot("O2 forward");
  CHECK(fwd.at(Role::Activations, DType::F16) >= 2 * (2 * kBatch * 4 + kBatch * 2));  // h, relu(h), y in F16
  check_adds_up(fwd);

  f.loss.backward();
  f = Forward{};
  opt.step();
  const LedgerSnapshot s = ledger.snapshot("O2 step");
  CHECK(s.at(Role::Params, DType::F16) == 2 * kParamElems);
  CHECK(s.at(Role::Grads, DType::F16) == 2 * kParamElems);
  CHECK(s.at(Role::Masters, DType::F32) == 4 * kParamElems);
  CHECK(s.at(Role::OptimizerState, DType::F32) == 4 * kParamElems);  // moments are F32 for F16 parameters
  CHECK(s.role_bytes(Role::Activations) == 0);
  check_adds_up(s);
}

TEST_CASE("under autocast BF16 the cast cache holds BF16 weights and activations are BF16", "[inspect][ledger][amp][cpu]") {
  manual_seed(4);
  Net net;
  const Data d = make_data();
  MemoryLedger ledger({.model = &net.seq});
  amp::clear_cast_cache();
  ledger.begin_forward();
  Forward f;
  LedgerSnapshot inside;
  {
    amp::Autocast ac(DeviceType::CPU, DType::BF16);
    f = run_forward(net, d.x, d.target);
    inside = ledger.snapshot("BF16 forward");
  }
  const LedgerSnapshot after_region = ledger.snapshot("BF16 after region");
  CHECK(inside.at(Role::CastCache, DType::BF16) == 2 * kParamElems);  // a BF16 copy of each weight and bias
  CHECK(inside.role_bytes(Role::CastCache) == 2 * kParamElems);
  CHECK(inside.at(Role::Params, DType::F32) == 4 * kParamElems);     // the F32 parameters stay
  // x cast to BF16 (3x8), h and relu(h) (3x4) and y (3x2) in BF16; mse_loss runs in F32
  CHECK(inside.at(Role::Activations, DType::BF16) >= 2 * (kBatch * 8 + 2 * kBatch * 4 + kBatch * 2));
  CHECK(f.y.dtype() == DType::BF16);
  CHECK(f.loss.dtype() == DType::F32);
  check_adds_up(inside);
  // The region's exit clears the cache; of the weight casts the graph keeps only what backward needs:
  // w2's (3x2 gradient -> relu(h)'s gradient), not w1's (x needs no gradient) nor the biases'.
  CHECK(after_region.role_bytes(Role::CastCache) == 0);
  CHECK(after_region.at(Role::Activations, DType::BF16) == inside.at(Role::Activations, DType::BF16) + 2 * (4 * 2));
  check_adds_up(after_region);

  f.loss.backward();
  f = Forward{};
  const LedgerSnapshot bwd = ledger.snapshot("BF16 backward");
  CHECK(bwd.at(Role::Grads, DType::F32) == 4 * kParamElems);  // F32 parameters receive F32 gradients
  CHECK(bwd.role_bytes(Role::Grads) == 4 * kParamElems);
  CHECK(bwd.role_bytes(Role::Activations) == 0);
  check_adds_up(bwd);
}

TEST_CASE("taking ledgers changes no forward output, gradient or update", "[inspect][ledger][amp][cpu]") {
  struct Outcome {
    Tensor y, g1, g2, w1;
  };
  const auto train_step = [](bool with_ledger) {
    manual_seed(5);
    Net net;
    const Data d = make_data();
    optim::Adam opt(net.seq.parameters(), {.lr = 1e-2});
    MemoryLedger ledger({.model = &net.seq, .optimizer = &opt});
    Forward f;
    for (int step = 0; step < 2; ++step) {  // the second step reads Adam's state, which snapshots copy
      if (with_ledger) ledger.begin_forward();
      {
        amp::Autocast ac(DeviceType::CPU, DType::BF16);
        f = run_forward(net, d.x, d.target);
        if (with_ledger) (void)ledger.snapshot("forward");
      }
      f.loss.backward();
      if (with_ledger) (void)ledger.snapshot("backward");
      opt.step();
      if (with_ledger) (void)ledger.snapshot("step");
      if (step == 0) opt.zero_grad();
    }
    return Outcome{f.y.detach(), net.l1->weight.grad(), net.l2->weight.grad(), net.l1->weight.detach()};
  };
  const Outcome plain = train_step(false), observed = train_step(true);
  CHECK(same_bits(plain.y, observed.y));
  CHECK(same_bits(plain.g1, observed.g1));
  CHECK(same_bits(plain.g2, observed.g2));
  CHECK(same_bits(plain.w1, observed.w1));
}

TEST_CASE("ledgers print side by side with ratios and write CSV and JSON", "[inspect][ledger][cpu]") {
  manual_seed(6);
  Net a, b;
  optim::SGD opt_b(b.seq.parameters(), {.lr = 0.1});
  amp::initialize(b.seq, opt_b, amp::OptLevel::O2, {.verbose = false});
  const LedgerSnapshot f32 = MemoryLedger({.model = &a.seq}).snapshot("F32");
  const LedgerSnapshot o2 = MemoryLedger({.model = &b.seq, .optimizer = &opt_b}).snapshot("O2, F16");

  std::ostringstream one;
  f32.print(one);
  CHECK_THAT(one.str(), Catch::Contains("memory ledger \"F32\" on cpu"));
  char share[16];
  std::snprintf(share, sizeof share, "%.1f%%", 100.0 * 184 / static_cast<double>(f32.total()));
  CHECK(find_row(one.str(), "params F32") == std::vector<std::string>{"params", "F32", "184", "B", share});

  std::ostringstream side;
  print_ledgers(side, {f32, o2});
  const std::string t = side.str();
  CHECK_THAT(t, Catch::Contains("O2, F16/F32"));  // the ratio column
  // params F32: 184 B and none under O2 (ratio 0); params F16: none in F32 (no ratio), 92 B under O2
  CHECK(find_row(t, "params F32") == std::vector<std::string>{"params", "F32", "184", "B", "0", "B", "0.00x"});
  CHECK(find_row(t, "params F16") == std::vector<std::string>{"params", "F16", "0", "B", "92", "B", "-"});
  const std::vector<std::string> total = find_row(t, "total");
  REQUIRE(total.size() == 6);
  CHECK(total[3] + " " + total[4] == format_bytes(o2.total()));

  test::TempDir dir("inspect_ledger");
  write_ledgers_csv(dir / "ledger.csv", {f32, o2});
  const std::vector<std::string> lines = read_lines(dir / "ledger.csv");
  REQUIRE(!lines.empty());
  CHECK(lines[0] == "label,device,role,dtype,bytes");
  CHECK(std::count(lines.begin(), lines.end(), "F32,cpu,params,F32,184") == 1);
  CHECK(std::count(lines.begin(), lines.end(), "\"O2, F16\",cpu,params,F16,92") == 1);
  CHECK(std::count(lines.begin(), lines.end(), "F32,cpu,total,all," + std::to_string(f32.allocated)) == 1);

  write_ledgers_json(dir / "ledger.json", {f32, o2});
  std::ifstream in(dir / "ledger.json");
  std::stringstream text;
  text << in.rdbuf();
  const test::Json j = test::JsonReader(text.str()).parse();
  REQUIRE(j.array.size() == 2);
  CHECK(j[1]["label"].str == "O2, F16");
  CHECK(j[1]["roles"]["params"].number == 2 * kParamElems);
  double sum = 0;
  for (const test::Json& row : j[0]["rows"].array) sum += row["bytes"].number;
  CHECK(sum == j[0]["total"].number);
  CHECK(j[0]["total"].number == j[0]["allocated"].number);
}

TEST_CASE("the ledger rejects bad input with errors that say what to do", "[inspect][ledger][cpu]") {
  Net net;
  CHECK_THROWS_WITH(MemoryLedger({.model = &net.seq, .device = Device::cuda()}),
                    Catch::Contains("MemoryLedger: a parameter of shape") && Catch::Contains("lives on cpu") &&
                        Catch::Contains("pass .device"));
  MemoryLedger ledger({.model = &net.seq});
  CHECK_FALSE(ledger.forward_begun());
  CHECK_THROWS_WITH(ledger.snapshot(""), Catch::Contains("MemoryLedger::snapshot: empty label"));
  std::ostringstream os;
  CHECK_THROWS_WITH(print_ledgers(os, {}), Catch::Contains("print_ledgers: no ledgers"));
  test::TempDir dir("inspect_ledger_err");
  CHECK_THROWS_WITH(write_ledgers_csv(dir / "no/such/dir.csv", {ledger.snapshot("x")}),
                    Catch::Contains("write_ledgers_csv: cannot create"));
  CHECK_THROWS_WITH(write_ledgers_json(dir / "x.json", {}), Catch::Contains("write_ledgers_json: no ledgers"));
}

TEST_CASE("format_bytes picks binary units", "[inspect][ledger][cpu]") {
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(4 << 20) == "4.00 MiB");
  CHECK(format_bytes(int64_t{5} << 30) == "5.00 GiB");
}
