#pragma once
// Host-only rules of the CUDA backend's one-pass symmetric step (no CUDA types: unit-tested without a GPU; the
// device calls them through --expt-relaxed-constexpr). The step (symmetric.cu, docs/design.md §2) sums E_ij shifted by
// the potentials themselves, so its sums are only trusted in a range; each step's commit predicts the next step's
// log2 sums and tells it whether to run, and with what shift (launch_finalize, kernels.cuh).

#include <bit>

namespace flashot::detail::cuda {

/// The one-pass step's sums are trusted in [2^-70, 2^100]: below, the entries that ex2.ftz flushed (< 2^-126) may
/// exceed rounding; above, the sum nears overflow. Outside, the step is redone with the two-pass reductions. A
/// screened sums pass may raise the lower end to floor_log2 (the step's kSumsFloor, 2^-20): the higher it is,
/// the more entries its screen may drop (each is compared with the floor, not with its own row's sum), and the more
/// steps fall back. `screened` (device, may be null) says whether that floor applies: the finish kernel reads the
/// sums site's ScreenState::last_low (did the pass just run screened with it?), the prediction and the cold check
/// its next_low (will the next one?); where it is null or 0 the floor is kSumsMinLog2.
inline constexpr float kSumsMinLog2 = -70.f, kSumsMaxLog2 = 100.f;
inline constexpr float kSumsMax = 0x1p100f;

/// What a one-pass step does: skip its sums and go straight to the two-pass reductions, or run them with every
/// exponent raised by `shift` (log2 units, a whole number), which the finish kernel takes out again. A shift lets a
/// step whose sums spread over less than the trusted range, but sit outside it, run in one pass: in a cold d = 64
/// solve at ε = 0.1 the third step's sums reach down to 2^-150 while the largest stay near 1.
struct SumsStep {
  int skip = 0;
  float shift = 0;
};

/// A range of predicted log2 sums as order-preserving keys (zero: nothing added yet, so that a memset clears it).
struct SumsRange {
  unsigned low = 0;   // ~float_key(lowest), by atomicMax
  unsigned high = 0;  // float_key(highest), by atomicMax
};

/// What the previous step predicted for a step's log2 sums, from which the step's kernels each derive its SumsStep
/// (sums_step). The previous step's finish kernel records the range its one-pass result implies (`sums`); when
/// that step is redone instead, its commit records the two-pass result's (`fallback`) and sets `fell_back`.
/// All zero (a memset): no forecast, the step runs unshifted. For iteration 0 the host sets it (the last launch's
/// last forecast, or zero) and the cold check may replace it with its sample's range (`cold`) or `skip`.
struct SumsForecast {
  SumsRange sums, fallback;
  int fell_back = 0;
  int skip = 0;    // skip whatever the range (a sample that is not a number)
  int cold = 0;     // `sums` is the cold probe's sample, judged by decide_cold_step
  // cold: ~float_key of the lowest sum the step must hold (cold_forecast): the evenly spaced part of the sample's
  // where the step redoes its strays alone, else the sample's lowest.
  unsigned fit_low = 0;
  float floor = 0;  // the lower end of the range the step's launch trusts (kSumsMinLog2 or the screened floor)
};

/// Order-preserving key of a float (a < b ⇔ float_key(a) < float_key(b) for non-NaN values; never 0), and back.
constexpr unsigned float_key(float v) {
  const unsigned u = std::bit_cast<unsigned>(v);
  return (u & 0x80000000u) != 0 ? ~u : u | 0x80000000u;
}
constexpr float key_float(unsigned k) { return std::bit_cast<float>((k & 0x80000000u) != 0 ? k & 0x7fffffffu : ~k); }

/// Log2 units a shifted step keeps between its predicted sums and the ends of the trusted range. The prediction is
/// first order (the other side's potential is taken as it was); in an fp64 simulation of cold solves (N(0,1),
/// d = 64, ε = 0.1, n = 2k and 10k) the sums it predicted out of range came out up to 24 log2 units above the
/// prediction at the low end and 1.3 above it at the high end: the potentials rise from zero, so the soft
/// c-transform falls. A step whose sums fall outside anyway is redone (the finish kernel checks the actual sums).
inline constexpr float kShiftMargin = 4.f;

/// The rule, from the predicted range [lo, hi] of the next step's log2 sums and the lower end `floor` of the range
/// the next launch trusts: inside → run, unshifted; outside but narrower than the range less both margins → run
/// with the least whole shift that brings the offending end kShiftMargin inside; else (or NaN) → skip.
constexpr SumsStep decide_sums_step(float lo, float hi, float floor) {
  SumsStep step;
  if (lo >= floor && hi <= kSumsMaxLog2) return step;  // false for NaN
  float shift = 0;
  if (lo < floor) {
    const float up = floor + kShiftMargin - lo;  // > 0: rounded up to a whole number
    shift = static_cast<float>(static_cast<long long>(up));
    if (shift < up) shift += 1;
  } else {
    const float down = kSumsMaxLog2 - kShiftMargin - hi;  // < 0: rounded down
    shift = static_cast<float>(static_cast<long long>(down));
    if (shift > down) shift -= 1;
  }
  if (lo + shift >= floor + kShiftMargin && hi + shift <= kSumsMaxLog2 - kShiftMargin) {
    step.shift = shift;
  } else {
    step.skip = 1;
  }
  return step;
}

/// The cold step's rule (iteration 0 from zero potentials), from the range [lo, hi] of the log2 sums that the cold
/// probe's sample predicts, the lowest sum `fit_lo` ≥ lo the step must hold, and the lower end `floor` of the range
/// the launch trusts. The sample (device_step.cu, kColdSample and kColdFar) sees a cloud's dense middle, whose sums
/// are the highest, well; its isolated points, whose nearest neighbours are far and whose sums are the lowest, less
/// surely: on 100k N(0,1) points at ε = 0.1 evenly spaced points alone put the lowest log2 sum at −62.8 (d = 8) where
/// 4000 random rows reached −89.5, while their highest (−17.7) was within 2 of the rows' (−15.9; docs/benchmarks.md,
/// "Cold steps"). So the sample's highest sum, plus kColdHighMargin, is put kShiftMargin below the top of the range,
/// which leaves the lowest sums all the room the range has; the step runs shifted when fit_lo less kColdLowMargin
/// still fits, and skips (two passes) otherwise. A sample that fits with both margins runs unshifted.
///
/// fit_lo: where the cold step redoes its strays alone (the rows and columns whose sums leave the range, kernels.cuh
/// Strays), the lowest of the sample's evenly spaced part — a fair sample of the points, so the strays are expected
/// to be few — and the isolated points below it are left to the strays; else the whole sample's lowest (fit_lo = lo).
inline constexpr float kColdHighMargin = 4.f, kColdLowMargin = 8.f;

constexpr SumsStep decide_cold_step(float lo, float hi, float floor, float fit_lo) {
  SumsStep step;
  // NaN, infinities, or nothing sampled
  if (!(lo <= hi && lo <= fit_lo && fit_lo <= hi && lo > -1e30f && hi < 1e30f)) {
    step.skip = 1;
    return step;
  }
  if (lo - kColdLowMargin >= floor && hi + kColdHighMargin <= kSumsMaxLog2) return step;
  const float top = kSumsMaxLog2 - kShiftMargin - kColdHighMargin - hi;  // rounded down to a whole number
  float shift = static_cast<float>(static_cast<long long>(top));
  if (shift > top) shift -= 1;
  if (fit_lo - kColdLowMargin + shift >= floor + kShiftMargin) {
    step.shift = shift;
  } else {
    step.skip = 1;
  }
  return step;
}

/// The cold step's forecast: the sample's range as it is and the lowest sum to hold (fit_lo, decide_cold_step),
/// marked `cold` so that sums_step judges it by decide_cold_step. Shards combine their forecasts (combine_forecast:
/// lowest low and fit_low, highest high, highest floor), so the rule then judges the union of their samples.
constexpr SumsForecast cold_forecast(float lo, float hi, float floor, float fit_lo) {
  SumsForecast forecast;
  forecast.floor = floor;
  forecast.cold = 1;
  forecast.sums.low = ~float_key(lo);
  forecast.sums.high = float_key(hi);
  forecast.fit_low = ~float_key(fit_lo);
  return forecast;
}

/// A step's SumsStep from its forecast.
constexpr SumsStep sums_step(const SumsForecast& forecast) {
  if (forecast.skip != 0) return SumsStep{1, 0.f};
  if (forecast.cold != 0) {
    return decide_cold_step(key_float(~forecast.sums.low), key_float(forecast.sums.high), forecast.floor,
                            key_float(~forecast.fit_low));
  }
  const SumsRange& range = forecast.fell_back != 0 ? forecast.fallback : forecast.sums;
  if (range.high == 0) return SumsStep{};  // nothing forecast
  return decide_sums_step(key_float(~range.low), key_float(range.high), forecast.floor);
}

}  // namespace flashot::detail::cuda
