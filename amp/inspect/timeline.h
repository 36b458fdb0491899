#pragma once
// ScalerTimeline: the loss scaler's state step by step -- the scale, its growth tracker, whether the
// gradients held an inf/NaN and whether the step was skipped -- to see dynamic loss scaling back off
// on an overflow and grow again (torch.amp.GradScaler's algorithm, amp/grad_scaler.h).
//
//   hg::amp::inspect::ScalerTimeline timeline;
//   for (int64_t step = 0; ...; ++step) {
//     scaler.scale(loss).backward();
//     const auto r = scaler.step(opt);
//     scaler.update();
//     timeline.record(step, scaler, r);       // after update(): reads the new scale (a sync on a GPU)
//   }
//   timeline.write_csv("scaler.csv");
#include <cstdint>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"

namespace hg::amp::inspect {

struct TimelineRow {
  int64_t step = 0;
  double scale = 0;           // the scale this step's gradients carried (StepResult::scale())
  double next_scale = 0;      // the scaler's scale when recorded (after update(): the next step's)
  int64_t growth_tracker = 0;   // clean steps in a row since the last change (after update())
  // Overflows still tolerated before a back-off (Megatron's hysteresis). At 0 or below every further
  // overflow in a row backs off, so it goes negative over consecutive overflows (-1 after two with the
  // default hysteresis 1, as Apex's counter does) and returns to `hysteresis` at the next clean step.
  int64_t hysteresis_left = 0;
  bool found_inf = false;     // some gradient was inf/NaN
  bool skipped = false;       // the optimizer did not step
};

class ScalerTimeline {
 public:
  // Call once per iteration after scaler.update(). Steps must increase.
  void record(int64_t step, const GradScaler& scaler, const StepResult& result);
  const std::vector<TimelineRow>& rows() const { return rows_; }
  int64_t num_skipped() const;
  void clear() { rows_.clear(); }
  // step,scale,next_scale,growth_tracker,hysteresis_left,found_inf,skipped (flags as 0/1); atomic.
  void write_csv(const std::string& path) const;

 private:
  std::vector<TimelineRow> rows_;
};

}  // namespace hg::amp::inspect
