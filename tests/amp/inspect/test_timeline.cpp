// amp::inspect::ScalerTimeline: the scaler's state per step around an injected overflow.
#include <catch2/catch.hpp>

#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "amp/inspect/timeline.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace hg;
using namespace hg::amp;

TEST_CASE("the timeline shows a skipped step, the scale backing off and growing again", "[inspect][cpu]") {
  Tensor p = test::make_param({1.0, 2.0});
  optim::SGD opt({p}, {.lr = 0.125});
  GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2});
  inspect::ScalerTimeline timeline;
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::vector<double>> grads = {{1, 1}, {inf, 1}, {2, 2}, {4, 4}};  // step 1 overflows
  std::vector<double> after_overflow;
  for (int64_t step = 0; step < 4; ++step) {
    if (step == 2) after_overflow = test::values(p);
    test::set_grad(p, grads[static_cast<size_t>(step)]);
    const StepResult r = scaler.step(opt);
    scaler.update();
    timeline.record(step, scaler, r);
  }
  const auto& rows = timeline.rows();
  REQUIRE(rows.size() == 4);
  CHECK_FALSE(rows[0].skipped);
  CHECK(rows[0].scale == 1024.0);
  CHECK(rows[0].next_scale == 1024.0);
  CHECK(rows[0].growth_tracker == 1);
  CHECK(rows[1].found_inf);
  CHECK(rows[1].skipped);
  CHECK(rows[1].scale == 1024.0);
  CHECK(rows[1].next_scale == 512.0);  // backoff 0.5
  CHECK(rows[1].growth_tracker == 0);
  CHECK(rows[2].scale == 512.0);
  CHECK(rows[2].growth_tracker == 1);
  CHECK(rows[3].next_scale == 1024.0);  // two clean steps: growth 2.0
  CHECK(rows[3].growth_tracker == 0);
  CHECK(timeline.num_skipped() == 1);
  // the skipped step left the parameter as the first step made it (1 - 0.125 / 1024, 2 - 0.125 / 1024)
  CHECK(after_overflow == std::vector<double>{1.0 - 0.125 / 1024, 2.0 - 0.125 / 1024});

  test::TempDir dir("inspect_timeline");
  const std::string path = dir / "scaler.csv";
  timeline.write_csv(path);
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(lines.size() == 5);
  CHECK(lines[0] == "step,scale,next_scale,growth_tracker,hysteresis_left,found_inf,skipped");
  const auto h = [&](size_t i) { return std::to_string(rows[i].hysteresis_left); };
  CHECK(lines[2] == "1,1024,512,0," + h(1) + ",1,1");
  CHECK(lines[4] == "3,512,1024,0," + h(3) + ",0,0");

  CHECK_THROWS_WITH(timeline.record(3, scaler, StepResult(false, 1.0)),
                    Catch::Contains("ScalerTimeline::record: step 3 does not come after the last recorded step 3"));
  CHECK_THROWS_WITH(timeline.write_csv(dir / "no/such/dir.csv"),
                    Catch::Contains("ScalerTimeline::write_csv: cannot create"));
}
