// ProfileProgress: the profiler's progress reports, one sink for all phases. Fractions only grow
// (a phase that finishes early jumps ahead; a later report below the last one repeats the last), and
// a phase owns a span of [0, 1] that it walks in steps.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <string>

namespace ferry::plan {

class ProfileProgress {
 public:
  using Sink = std::function<void(double fraction, const std::string& what)>;
  explicit ProfileProgress(Sink sink) : sink_(std::move(sink)) {}

  // Reports `fraction` (clamped to [last, 1]) with `what`.
  void report(double fraction, const std::string& what) {
    last_ = std::max(last_, std::clamp(fraction, 0.0, 1.0));
    if (sink_) sink_(last_, prefix_ + what);
  }
  double last() const { return last_; }

  // The next `steps` reports of step() walk [begin, end).
  void begin_span(double begin, double end, size_t steps) {
    span_begin_ = begin;
    span_end_ = end;
    span_steps_ = std::max<size_t>(steps, 1);
    span_done_ = 0;
  }
  void step(const std::string& what) {
    report(span_begin_ + (span_end_ - span_begin_) * static_cast<double>(span_done_) / span_steps_, what);
    span_done_ = std::min(span_done_ + 1, span_steps_);
  }
  // Put before every report's text ("again (the machine was busy): ").
  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }

 private:
  Sink sink_;
  double last_ = 0;
  double span_begin_ = 0, span_end_ = 0;
  size_t span_steps_ = 1, span_done_ = 0;
  std::string prefix_;
};

}  // namespace ferry::plan
