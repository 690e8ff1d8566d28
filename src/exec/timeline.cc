// Timeline rendering: lane names, span kinds and the self-contained SVG of `ferry bench --timeline`
// (no fonts, scripts or styles from outside; tooltips are plain <title> children, which browsers show
// on hover). Time maps linearly onto a fixed plot width, so long timelines shrink instead of growing.
#include "exec/timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <map>
#include <utility>

namespace ferry::exec {

const char* lane_name(Lane lane) {
  switch (lane) {
    case Lane::kCopy: return "copy stream";
    case Lane::kGpu: return "GPU compute";
    case Lane::kCpu: return "CPU workers";
    case Lane::kHost: return "host waits";
  }
  return "?";
}

SpanKind span_kind(const Span& s) {
  switch (s.lane) {
    case Lane::kCopy: return SpanKind::kCopy;
    case Lane::kCpu: return SpanKind::kCpuSublayer;
    case Lane::kHost: return SpanKind::kHostWait;
    case Lane::kGpu: break;
  }
  const std::string& l = s.label;
  auto has = [&](const char* w) { return l.find(w) != std::string::npos; };
  if (has("attn")) return SpanKind::kAttention;
  if (has("ffn") || has("expert") || has("router")) return SpanKind::kFfn;
  if (has("head") || has("embed") || has("output")) return SpanKind::kHeadEmbed;
  return SpanKind::kOther;
}

const char* span_kind_name(SpanKind k) {
  switch (k) {
    case SpanKind::kCopy: return "weight copy";
    case SpanKind::kAttention: return "attention";
    case SpanKind::kFfn: return "ffn / experts";
    case SpanKind::kHeadEmbed: return "head / embed";
    case SpanKind::kCpuSublayer: return "CPU sub-layer";
    case SpanKind::kHostWait: return "host wait";
    case SpanKind::kOther: return "other";
  }
  return "?";
}

namespace {

constexpr SpanKind kKinds[] = {SpanKind::kCopy,        SpanKind::kAttention, SpanKind::kFfn,  SpanKind::kHeadEmbed,
                               SpanKind::kCpuSublayer, SpanKind::kHostWait,  SpanKind::kOther};
constexpr Lane kLanes[] = {Lane::kCopy, Lane::kGpu, Lane::kCpu, Lane::kHost};

const char* kind_colour(SpanKind k) {
  switch (k) {
    case SpanKind::kCopy: return "#1f77b4";         // blue
    case SpanKind::kAttention: return "#ff7f0e";    // orange
    case SpanKind::kFfn: return "#2ca02c";          // green
    case SpanKind::kHeadEmbed: return "#9467bd";    // purple
    case SpanKind::kCpuSublayer: return "#8c564b";  // brown
    case SpanKind::kHostWait: return "#9e9e9e";     // grey
    case SpanKind::kOther: return "#17becf";        // teal
  }
  return "#000000";
}

// Geometry (px). The plot is kPlotW wide whatever the time range.
constexpr double kWidth = 1600;
constexpr double kLeft = 150;   // lane names
constexpr double kRight = 30;
constexpr double kPlotW = kWidth - kLeft - kRight;
constexpr double kLaneH = 26;
constexpr double kLaneGap = 6;
constexpr double kPanelLanes = 52;   // panel top to its first lane: header and two rows of step labels
constexpr double kPanelAxis = 48;    // last lane to the panel's bottom: the time axis
constexpr double kPanelGap = 14;
constexpr size_t kTitleChars = 190;  // wrap the title (at " | ") past this many characters

void appendf(std::string* out, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void appendf(std::string* out, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (static_cast<size_t>(n) < sizeof buf) {
    out->append(buf, static_cast<size_t>(n));
    return;
  }
  std::string big(static_cast<size_t>(n) + 1, '\0');
  va_start(ap, fmt);
  std::vsnprintf(big.data(), big.size(), fmt, ap);
  va_end(ap);
  big.resize(static_cast<size_t>(n));
  *out += big;
}

// Text and attribute escaping (labels come from tensor names and titles: anything may be in them).
std::string esc(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default:
        // Control characters are not allowed in XML 1.0 text.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') o += ' ';
        else o += c;
    }
  }
  return o;
}

std::string bytes_text(uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1ull << 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(b) / 1024);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

// A "nice" tick step (1, 2 or 5 x 10^k) giving about `target` ticks over `range`.
double tick_step(double range, int target) {
  const double raw = range / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

// Total time covered by the union of [t0, t1) intervals.
double union_ms(std::vector<std::pair<double, double>> iv) {
  std::sort(iv.begin(), iv.end());
  double total = 0, cur0 = 0, cur1 = 0;
  bool open = false;
  for (const auto& [a, b] : iv) {
    if (!open || a > cur1) {
      if (open) total += cur1 - cur0;
      cur0 = a;
      cur1 = b;
      open = true;
    } else {
      cur1 = std::max(cur1, b);
    }
  }
  if (open) total += cur1 - cur0;
  return total;
}

double lane_y(double top, Lane lane) { return top + kPanelLanes + static_cast<int>(lane) * (kLaneH + kLaneGap); }

// A run of consecutive steps of one tier (a prefill chunk, the decode steps), drawn as its own panel
// with its own time axis: a 1 s prefill chunk next to 5 ms decode steps would otherwise leave the
// decode steps a few pixels.
struct Section {
  size_t step0 = 0, step1 = 0;  // [step0, step1) in Timeline::steps
  std::vector<size_t> spans;    // indices in Timeline::spans
  double lo = INFINITY, hi = -INFINITY;
};

std::vector<Section> split_sections(const Timeline& t) {
  std::vector<Section> sec;
  std::map<int32_t, size_t> of_step;  // StepMark::step -> section
  for (size_t i = 0; i < t.steps.size(); ++i) {
    if (sec.empty() || t.steps[i].tier != t.steps[i - 1].tier) {
      sec.emplace_back();
      sec.back().step0 = i;
    }
    sec.back().step1 = i + 1;
    of_step.emplace(t.steps[i].step, sec.size() - 1);
  }
  if (sec.empty()) sec.emplace_back();
  for (size_t k = 0; k < t.spans.size(); ++k) {
    const Span& s = t.spans[k];
    size_t at = sec.size() - 1;
    if (auto it = of_step.find(s.step); it != of_step.end()) {
      at = it->second;
    } else if (std::isfinite(s.t0_ms)) {  // by time: the last section starting at or before it
      for (size_t q = 0; q < sec.size(); ++q)
        if (sec[q].step1 > sec[q].step0 && t.steps[sec[q].step0].t0_ms <= s.t0_ms) at = q;
    }
    sec[at].spans.push_back(k);
  }
  auto widen = [](Section& q, double v) {
    if (std::isfinite(v)) {
      q.lo = std::min(q.lo, v);
      q.hi = std::max(q.hi, v);
    }
  };
  for (Section& q : sec) {
    for (size_t i = q.step0; i < q.step1; ++i) widen(q, t.steps[i].t0_ms), widen(q, t.steps[i].t1_ms);
    for (size_t k : q.spans) widen(q, t.spans[k].t0_ms), widen(q, t.spans[k].t1_ms);
    if (!std::isfinite(q.lo)) q.lo = q.hi = 0;
    if (q.hi - q.lo < 1e-6) q.hi = q.lo + 1;  // a single instant still gets a 1 ms axis
  }
  return sec;
}

// The title in lines of at most kTitleChars, broken at " | " where possible.
std::vector<std::string> wrap_title(const std::string& title) {
  std::vector<std::string> lines;
  std::string cur;
  size_t p = 0;
  while (p <= title.size()) {
    size_t q = title.find(" | ", p);
    const std::string part = title.substr(p, q == std::string::npos ? std::string::npos : q - p);
    if (!cur.empty() && cur.size() + 3 + part.size() > kTitleChars) {
      lines.push_back(cur);
      cur.clear();
    }
    cur += (cur.empty() ? "" : " | ") + part;
    if (q == std::string::npos) break;
    p = q + 3;
  }
  lines.push_back(cur);
  for (std::string& l : lines)
    if (l.size() > 2 * kTitleChars) l = l.substr(0, 2 * kTitleChars) + "...";
  return lines;
}

// One panel: header, lanes with their busy share, spans, step boundaries, time axis. Returns its height.
double render_section(const Timeline& t, const Section& q, double top, std::string* out) {
  std::string& o = *out;
  const double lo = q.lo, hi = q.hi, range = hi - lo;
  auto clean = [&](double v) { return std::isfinite(v) ? v : lo; };
  auto xof = [&](double ms) { return kLeft + (clean(ms) - lo) / range * kPlotW; };
  const int n_lanes = static_cast<int>(std::size(kLanes));
  const double lanes_bottom = top + kPanelLanes + n_lanes * (kLaneH + kLaneGap) - kLaneGap;
  const double axis_y = lanes_bottom + 8;

  o += "<g class=\"panel\">\n";
  if (q.step1 > q.step0) {
    const StepMark& a = t.steps[q.step0];
    const StepMark& b = t.steps[q.step1 - 1];
    const size_t n = q.step1 - q.step0;
    if (n == 1)
      appendf(&o, "<text x=\"10\" y=\"%.1f\" font-weight=\"bold\">step %d: tier %d, %d tokens, %.3f ms</text>\n",
              top + 12, a.step, a.tier, a.n_tokens, clean(a.t1_ms) - clean(a.t0_ms));
    else
      appendf(&o, "<text x=\"10\" y=\"%.1f\" font-weight=\"bold\">steps %d-%d: tier %d, %zu steps, %.3f ms (%.3f ms a step)</text>\n",
              top + 12, a.step, b.step, a.tier, n, clean(b.t1_ms) - clean(a.t0_ms),
              (clean(b.t1_ms) - clean(a.t0_ms)) / static_cast<double>(n));
  } else {
    appendf(&o, "<text x=\"10\" y=\"%.1f\" font-weight=\"bold\">no step marks</text>\n", top + 12);
  }

  // Lane rows: background band, name and busy share (union of its spans over the panel's range).
  for (Lane lane : kLanes) {
    const double y = lane_y(top, lane);
    std::vector<std::pair<double, double>> iv;
    for (size_t k : q.spans) {
      const Span& s = t.spans[k];
      if (s.lane == lane) iv.emplace_back(clean(s.t0_ms), std::max(clean(s.t0_ms), clean(s.t1_ms)));
    }
    const double busy = union_ms(std::move(iv));
    appendf(&o, "<rect class=\"lane\" x=\"%.0f\" y=\"%.1f\" width=\"%.0f\" height=\"%.0f\" fill=\"%s\"/>\n", kLeft,
            y, kPlotW, kLaneH, static_cast<int>(lane) % 2 ? "#f4f4f4" : "#ebebeb");
    appendf(&o, "<text x=\"10\" y=\"%.1f\" font-weight=\"bold\">%s<title>%s: busy %.3f of %.3f ms</title></text>\n",
            y + 12, lane_name(lane), lane_name(lane), busy, range);
    appendf(&o, "<text x=\"10\" y=\"%.1f\" fill=\"#555555\">busy %.0f %%</text>\n", y + 24, 100 * busy / range);
  }

  // Spans: one rectangle each, at least 1 px wide, with a tooltip.
  for (size_t k : q.spans) {
    const Span& s = t.spans[k];
    const double t0 = clean(s.t0_ms), t1 = std::max(t0, clean(s.t1_ms));
    const double x0 = xof(t0);
    const double w = std::max(1.0, xof(t1) - x0);
    const double dur = t1 - t0;
    const SpanKind kind = span_kind(s);
    std::string tip = s.label.empty() ? std::string(span_kind_name(kind)) : s.label;
    char buf[256];
    std::snprintf(buf, sizeof buf, ": %.3f ms (%.3f to %.3f ms), step %d, tier %d", dur, t0, t1, s.step, s.tier);
    tip += buf;
    if (s.bytes > 0) {
      tip += ", " + bytes_text(s.bytes);
      if (dur > 0) {
        std::snprintf(buf, sizeof buf, ", %.2f GB/s", static_cast<double>(s.bytes) / (dur * 1e-3) / 1e9);
        tip += buf;
      }
    }
    appendf(&o, "<rect class=\"span\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\"><title>%s</title></rect>\n",
            x0, lane_y(top, s.lane) + 2, w, kLaneH - 4, kind_colour(kind), esc(tip).c_str());
  }

  // Step boundaries: a line at each step's start and a dashed one at the panel's last step's end;
  // labels on two staggered rows.
  for (size_t i = q.step0; i < q.step1; ++i) {
    const StepMark& m = t.steps[i];
    const double x = xof(m.t0_ms);
    const double ly = top + 30 + static_cast<double>((i - q.step0) % 2) * 14;
    appendf(&o, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#333333\" stroke-width=\"0.8\"/>\n", x,
            ly - 10, x, lanes_bottom);
    appendf(&o,
            "<text x=\"%.2f\" y=\"%.1f\" font-size=\"10\">step %d (tier %d, %d tokens)<title>step %d: tier %d, %d "
            "tokens, run() %.3f ms</title></text>\n",
            x + 2, ly, m.step, m.tier, m.n_tokens, m.step, m.tier, m.n_tokens, clean(m.t1_ms) - clean(m.t0_ms));
  }
  if (q.step1 > q.step0) {
    const double x = xof(t.steps[q.step1 - 1].t1_ms);
    appendf(&o, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#333333\" stroke-width=\"0.8\" "
            "stroke-dasharray=\"3,2\"/>\n", x, top + kPanelLanes - 4, x, lanes_bottom);
  }

  // Time axis in ms, ticks at 1, 2 or 5 x 10^k.
  appendf(&o, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#000000\" stroke-width=\"1\"/>\n", kLeft,
          axis_y, kLeft + kPlotW, axis_y);
  const double step = tick_step(range, 10);
  const int decimals = std::clamp(static_cast<int>(-std::floor(std::log10(step))), 0, 6);
  for (int64_t i = static_cast<int64_t>(std::ceil(lo / step - 1e-9)); i * step <= hi + step * 1e-9; ++i) {
    const double v = static_cast<double>(i) * step;
    const double x = xof(v);
    appendf(&o, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#000000\" stroke-width=\"1\"/>", x,
            axis_y, x, axis_y + 5);
    appendf(&o, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%.*f</text>\n", x, axis_y + 17, decimals,
            std::fabs(v) < step * 1e-9 ? 0.0 : v);
  }
  appendf(&o, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#444444\">time (ms)</text>\n",
          kLeft + kPlotW / 2, axis_y + 34);
  o += "</g>\n";
  return axis_y + 40 - top;
}

}  // namespace

std::string render_svg(const Timeline& t) {
  const bool empty = t.spans.empty() && t.steps.empty();
  const std::vector<std::string> title = wrap_title(t.title.empty() ? std::string("ferry timeline") : t.title);
  const double head = 22 + 18.0 * static_cast<double>(title.size() - 1);  // baseline of the last title line
  const std::vector<Section> sec = empty ? std::vector<Section>{} : split_sections(t);
  // Panels start below the subtitle and legend.
  const double panels_top = head + 46;
  const double panel_h = kPanelLanes + std::size(kLanes) * (kLaneH + kLaneGap) - kLaneGap + kPanelAxis;
  const double height =
      empty ? head + 60 : panels_top + static_cast<double>(sec.size()) * (panel_h + kPanelGap) - kPanelGap + 10;

  std::string o;
  o.reserve(4096 + t.spans.size() * 256);
  appendf(&o, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  appendf(&o,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
          "font-family=\"sans-serif\" font-size=\"11\">\n",
          kWidth, height, kWidth, height);
  appendf(&o, "<rect class=\"bg\" x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", kWidth, height);
  for (size_t i = 0; i < title.size(); ++i)
    appendf(&o, "<text x=\"10\" y=\"%.0f\" font-size=\"14\" font-weight=\"bold\">%s</text>\n", 22 + 18.0 * i,
            esc(title[i]).c_str());
  if (empty) {
    appendf(&o, "<text x=\"10\" y=\"%.0f\" fill=\"#555555\">empty timeline: no spans were recorded</text>\n", head + 30);
    appendf(&o, "</svg>\n");
    return o;
  }

  // Subtitle: what is drawn.
  double lo = INFINITY, hi = -INFINITY;
  for (const Section& q : sec) lo = std::min(lo, q.lo), hi = std::max(hi, q.hi);
  appendf(&o,
          "<text x=\"10\" y=\"%.0f\" fill=\"#444444\">%zu spans over %zu steps, %.3f to %.3f ms; %zu panel%s (one per "
          "run of steps of a tier), each with its own time scale</text>\n",
          head + 18, t.spans.size(), t.steps.size(), lo, hi, sec.size(), sec.size() == 1 ? "" : "s");

  // Legend: every kind, "other" only when present.
  bool used[std::size(kKinds)] = {};
  for (const Span& s : t.spans) used[static_cast<int>(span_kind(s))] = true;
  double lx = 10;
  o += "<g class=\"legend\">\n";
  for (SpanKind k : kKinds) {
    if (k == SpanKind::kOther && !used[static_cast<int>(k)]) continue;
    appendf(&o, "<rect class=\"key\" x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/>", lx, head + 26,
            kind_colour(k));
    appendf(&o, "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n", lx + 16, head + 36, span_kind_name(k));
    lx += 16 + 7.0 * static_cast<double>(std::string(span_kind_name(k)).size()) + 18;
  }
  o += "</g>\n";

  double y = panels_top;
  for (const Section& q : sec) y += render_section(t, q, y, &o) + kPanelGap;
  o += "</svg>\n";
  return o;
}

}  // namespace ferry::exec
