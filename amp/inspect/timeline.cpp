#include "amp/inspect/timeline.h"

#include <sstream>

#include "amp/inspect/text_file.h"
#include "core/atomic_file.h"

namespace hg::amp::inspect {

void ScalerTimeline::record(int64_t step, const GradScaler& scaler, const StepResult& result) {
  HG_CHECK(rows_.empty() || step > rows_.back().step, "ScalerTimeline::record: step ", step,
           " does not come after the last recorded step ", rows_.empty() ? 0 : rows_.back().step,
           "; record each iteration once, with increasing step numbers");
  rows_.push_back({
      .step = step,
      .scale = result.scale(),
      .next_scale = scaler.get_scale(),
      .growth_tracker = scaler.growth_tracker(),
      .hysteresis_left = scaler.hysteresis_left(),
      .found_inf = result.found_inf(),
      .skipped = !result.stepped(),
  });
}

int64_t ScalerTimeline::num_skipped() const {
  int64_t n = 0;
  for (const TimelineRow& r : rows_) n += r.skipped;
  return n;
}

void ScalerTimeline::write_csv(const std::string& path) const {
  std::ostringstream os;
  os.precision(17);
  os << "step,scale,next_scale,growth_tracker,hysteresis_left,found_inf,skipped\n";
  for (const TimelineRow& r : rows_) {
    os << r.step << ',' << json_number(r.scale) << ',' << json_number(r.next_scale) << ',' << r.growth_tracker
       << ',' << r.hysteresis_left << ',' << int{r.found_inf} << ',' << int{r.skipped} << '\n';
  }
  write_file_atomic("ScalerTimeline::write_csv", path, os.str());
}

}  // namespace hg::amp::inspect
