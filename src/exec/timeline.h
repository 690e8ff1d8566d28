// Timeline: what the executor's lanes (copy stream, compute stream, CPU workers) did over a few steps,
// as spans in milliseconds from one origin, so `ferry bench --timeline out.svg` can draw the overlap
// (or its absence) of weight copies, GPU compute and CPU compute. The HybridRunner fills it when
// given one (HybridRunner::set_timeline); render_svg draws it. Device spans come from timing events
// measured against an event recorded at the step's start, CPU spans from the host clock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::exec {

enum class Lane : uint8_t { kCopy, kGpu, kCpu, kHost };  // kHost: host waits / syncs

const char* lane_name(Lane lane);  // "copy stream", "GPU compute", "CPU workers", "host waits"

struct Span {
  Lane lane = Lane::kGpu;
  double t0_ms = 0;       // from the timeline's origin
  double t1_ms = 0;
  int32_t step = 0;       // index of the step (0-based, in recording order)
  int32_t tier = 0;       // tokens of the step's tier
  std::string label;      // "L3.ffn", "copy L7.ffn", "embed", ...
  uint64_t bytes = 0;     // copies: bytes moved
};

struct StepMark {
  int32_t step = 0;
  int32_t tier = 0;
  int32_t n_tokens = 0;
  double t0_ms = 0, t1_ms = 0;  // host wall clock of run()
};

struct Timeline {
  int32_t max_steps = 8;         // recording stops after this many steps
  std::vector<Span> spans;
  std::vector<StepMark> steps;
  std::string title;             // model, budget, plan summary

  bool full() const { return static_cast<int32_t>(steps.size()) >= max_steps; }
};

// What a span's colour says: the lane for copies, CPU work and host waits; for GPU compute, the
// sub-layer kind read from the label ("blk.3.attn", "blk.3.ffn", "head", "embed", ...).
enum class SpanKind : uint8_t { kCopy, kAttention, kFfn, kHeadEmbed, kCpuSublayer, kHostWait, kOther };
SpanKind span_kind(const Span& span);
const char* span_kind_name(SpanKind kind);  // legend text: "weight copy", "attention", ...

// An SVG document: one row per lane, one rectangle per span (colour per kind), step boundaries,
// a time axis in ms, the title, and a legend. Empty timeline => a valid SVG that says so.
std::string render_svg(const Timeline& t);

}  // namespace ferry::exec
