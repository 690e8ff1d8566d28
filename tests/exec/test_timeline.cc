// render_svg: the SVG of `ferry bench --timeline` is well-formed without a parser (every element
// closed, tags balanced, text escaped), draws one rectangle per span at least 1 px wide, labels the
// steps and the time axis, and an empty timeline is still a valid document that says so.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "exec/timeline.h"

namespace ferry::exec {
namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

// Walks the tags: every <name ...> is closed by </name> in order or is self-closing (<.../>); the
// text between tags holds no raw '<' or '>' and no '&' that does not start an entity. Returns "" when
// well-formed, else what is wrong.
std::string check_well_formed(const std::string& svg) {
  std::vector<std::string> open;
  size_t i = 0;
  int roots = 0;
  while (i < svg.size()) {
    const size_t lt = svg.find('<', i);
    const std::string text = svg.substr(i, (lt == std::string::npos ? svg.size() : lt) - i);
    if (text.find('>') != std::string::npos) return "raw '>' in text: " + text;
    for (size_t a = text.find('&'); a != std::string::npos; a = text.find('&', a + 1)) {
      const size_t semi = text.find(';', a);
      if (semi == std::string::npos || semi - a > 6) return "bare '&' in text: " + text;
    }
    if (lt == std::string::npos) break;
    const size_t gt = svg.find('>', lt);
    if (gt == std::string::npos) return "unterminated tag";
    const std::string tag = svg.substr(lt + 1, gt - lt - 1);
    if (tag.find('<') != std::string::npos) return "'<' inside a tag: " + tag;
    if (!tag.empty() && tag[0] == '?') {
      if (tag.back() != '?') return "bad declaration";
    } else if (!tag.empty() && tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) return "unbalanced </" + name + ">";
      open.pop_back();
    } else {
      const std::string name = tag.substr(0, tag.find_first_of(" \n/"));
      if (open.empty()) ++roots;
      // Attribute values: quotes balanced, no raw '<' (checked above) or '&' without an entity.
      if (count(tag, "\"") % 2 != 0) return "odd quotes in <" + name + ">";
      if (tag.back() != '/') open.push_back(name);
    }
    i = gt + 1;
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  if (roots != 1) return "expected one root element, got " + std::to_string(roots);
  return "";
}

// The attribute `name` of the n-th element with class="span".
double span_attr(const std::string& svg, int n, const std::string& name) {
  size_t p = 0;
  for (int k = 0; k <= n; ++k) p = svg.find("class=\"span\"", p + 1);
  const size_t end = svg.find('>', p);
  const size_t a = svg.find(" " + name + "=\"", p);
  EXPECT_LT(a, end);
  return std::strtod(svg.c_str() + a + name.size() + 3, nullptr);
}

Timeline sample() {
  Timeline t;
  t.title = "tiny <llama> & friends | budget 64 MiB";
  t.steps.push_back({0, 16, 16, 0.0, 4.0});
  t.steps.push_back({1, 1, 1, 4.5, 6.0});
  t.spans.push_back({Lane::kCopy, 0.1, 1.1, 0, 16, "copy blk.0.ffn", 50u << 20});
  t.spans.push_back({Lane::kGpu, 0.2, 1.0, 0, 16, "blk.0.attn", 0});
  t.spans.push_back({Lane::kGpu, 1.2, 2.0, 0, 16, "blk.0.ffn", 0});
  t.spans.push_back({Lane::kGpu, 2.0, 2.5, 0, 16, "head", 0});
  t.spans.push_back({Lane::kCpu, 4.6, 5.5, 1, 1, "blk.1.ffn <cpu> & co", 0});
  t.spans.push_back({Lane::kHost, 5.5, 5.9, 1, 1, "wait logits", 0});
  t.spans.push_back({Lane::kGpu, 5.0, 5.0000001, 1, 1, "embed", 0});  // far below 1 px
  return t;
}

TEST(Timeline, LaneNames) {
  EXPECT_STREQ(lane_name(Lane::kCopy), "copy stream");
  EXPECT_STREQ(lane_name(Lane::kGpu), "GPU compute");
  EXPECT_STREQ(lane_name(Lane::kCpu), "CPU workers");
  EXPECT_STREQ(lane_name(Lane::kHost), "host waits");
}

TEST(Timeline, SpanKinds) {
  Span s;
  s.lane = Lane::kGpu;
  s.label = "blk.3.attn";
  EXPECT_EQ(span_kind(s), SpanKind::kAttention);
  s.label = "blk.3.ffn";
  EXPECT_EQ(span_kind(s), SpanKind::kFfn);
  s.label = "blk.3.experts[0,8)";
  EXPECT_EQ(span_kind(s), SpanKind::kFfn);
  s.label = "head";
  EXPECT_EQ(span_kind(s), SpanKind::kHeadEmbed);
  s.label = "embed";
  EXPECT_EQ(span_kind(s), SpanKind::kHeadEmbed);
  s.label = "upload x";
  EXPECT_EQ(span_kind(s), SpanKind::kOther);
  s.lane = Lane::kCopy;
  EXPECT_EQ(span_kind(s), SpanKind::kCopy);
  s.lane = Lane::kCpu;
  s.label = "blk.3.attn";
  EXPECT_EQ(span_kind(s), SpanKind::kCpuSublayer);
  s.lane = Lane::kHost;
  EXPECT_EQ(span_kind(s), SpanKind::kHostWait);
}

TEST(Timeline, WellFormedOneRectPerSpan) {
  const Timeline t = sample();
  const std::string svg = render_svg(t);
  EXPECT_EQ(check_well_formed(svg), "") << svg;
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_EQ(count(svg, "class=\"span\""), t.spans.size());
  EXPECT_EQ(count(svg, "<title>"), count(svg, "</title>"));
  // Self-contained: no external references, scripts or styles.
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  EXPECT_EQ(svg.find("href"), std::string::npos);
  EXPECT_EQ(svg.find("@import"), std::string::npos);
  // Lanes, steps, axis, legend.
  for (Lane l : {Lane::kCopy, Lane::kGpu, Lane::kCpu, Lane::kHost})
    EXPECT_NE(svg.find(std::string(">") + lane_name(l)), std::string::npos) << lane_name(l);
  EXPECT_NE(svg.find("step 0 (tier 16, 16 tokens)"), std::string::npos);
  EXPECT_NE(svg.find("step 1 (tier 1, 1 tokens)"), std::string::npos);
  EXPECT_NE(svg.find("time (ms)"), std::string::npos);
  for (const char* k : {"weight copy", "attention", "ffn / experts", "head / embed", "CPU sub-layer", "host wait"})
    EXPECT_NE(svg.find(k), std::string::npos) << k;
  EXPECT_EQ(svg.find(">other<"), std::string::npos);  // no span of that kind
}

TEST(Timeline, LabelsEscaped) {
  const std::string svg = render_svg(sample());
  EXPECT_NE(svg.find("tiny &lt;llama&gt; &amp; friends"), std::string::npos);
  EXPECT_NE(svg.find("blk.1.ffn &lt;cpu&gt; &amp; co"), std::string::npos);
  EXPECT_EQ(svg.find("<llama>"), std::string::npos);
  EXPECT_EQ(svg.find("<cpu>"), std::string::npos);
  EXPECT_EQ(svg.find("& co"), std::string::npos);
  Timeline t;
  t.title = "quote \" and ' apostrophe";
  t.spans.push_back({Lane::kGpu, 0, 1, 0, 1, "a\"b'c\x01", 0});
  const std::string s2 = render_svg(t);
  EXPECT_EQ(check_well_formed(s2), "") << s2;
  EXPECT_NE(s2.find("a&quot;b&#39;c "), std::string::npos);
}

TEST(Timeline, ColoursAndTooltips) {
  const std::string svg = render_svg(sample());
  // Copy blue, attention orange, ffn green, head purple, CPU brown, host grey.
  const char* fills[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#9e9e9e", "#9467bd"};
  size_t p = 0;
  for (const char* f : fills) {
    p = svg.find("class=\"span\"", p + 1);
    ASSERT_NE(p, std::string::npos);
    const size_t fill = svg.find("fill=\"", p);
    EXPECT_EQ(svg.substr(fill + 6, 7), f);
  }
  // The copy's tooltip: label, duration, bytes and GB/s (50 MiB in 1 ms = 52.43 GB/s).
  EXPECT_NE(svg.find("<title>copy blk.0.ffn: 1.000 ms"), std::string::npos) << svg;
  EXPECT_NE(svg.find("50.00 MiB, 52.43 GB/s"), std::string::npos);
  EXPECT_NE(svg.find("<title>blk.0.attn: 0.800 ms"), std::string::npos);
}

TEST(Timeline, FixedWidthAndMinimumOnePixel) {
  const Timeline t = sample();
  const std::string svg = render_svg(t);
  EXPECT_NE(svg.find("width=\"1600\""), std::string::npos);
  for (int i = 0; i < static_cast<int>(t.spans.size()); ++i) {
    EXPECT_GE(span_attr(svg, i, "width"), 1.0) << i;
    EXPECT_GE(span_attr(svg, i, "x"), 0.0);
    EXPECT_LE(span_attr(svg, i, "x") + span_attr(svg, i, "width"), 1600.0);
  }
  EXPECT_DOUBLE_EQ(span_attr(svg, 6, "width"), 1.0);  // the sub-pixel "embed"
  // A long timeline (10 s, 20000 spans) keeps the same width; spans stay inside it.
  Timeline big;
  for (int i = 0; i < 20000; ++i)
    big.spans.push_back({static_cast<Lane>(i % 4), i * 0.5, i * 0.5 + 0.25, i / 100, 1, "blk.1.ffn", 0});
  for (int k = 0; k < 200; ++k) big.steps.push_back({k, 1, 1, k * 50.0, k * 50.0 + 49.0});
  const std::string s2 = render_svg(big);
  EXPECT_EQ(check_well_formed(s2), "");
  EXPECT_EQ(count(s2, "class=\"span\""), big.spans.size());
  EXPECT_NE(s2.find("width=\"1600\""), std::string::npos);
  EXPECT_LE(span_attr(s2, 19999, "x") + span_attr(s2, 19999, "width"), 1600.0);
}

TEST(Timeline, OnePanelPerTierRun) {
  // The prefill chunk (tier 16) and the decode steps (tier 1) get a panel each, with its own axis.
  const std::string svg = render_svg(sample());
  EXPECT_EQ(count(svg, "class=\"panel\""), 2u);
  EXPECT_EQ(count(svg, "time (ms)"), 2u);
  EXPECT_NE(svg.find("step 0: tier 16, 16 tokens, 4.000 ms"), std::string::npos);
  EXPECT_NE(svg.find("step 1: tier 1, 1 tokens, 1.500 ms"), std::string::npos);
  // The decode panel spans 4.5..6 ms over the full plot width: its CPU span starts 1/15 in.
  EXPECT_NEAR(span_attr(svg, 4, "x"), 150 + (4.6 - 4.5) / 1.5 * 1420, 0.01);
  // Tiers 512, 1, 1, 1, 512 -> three panels; a span of an unknown step goes by time.
  Timeline t;
  const int tiers[] = {512, 1, 1, 1, 512};
  for (int i = 0; i < 5; ++i) t.steps.push_back({i, tiers[i], tiers[i], i * 10.0, i * 10.0 + 9});
  t.spans.push_back({Lane::kCopy, 21, 22, 99, 1, "copy blk.1.ffn", 1000});
  const std::string s2 = render_svg(t);
  EXPECT_EQ(count(s2, "class=\"panel\""), 3u);
  EXPECT_NE(s2.find("steps 1-3: tier 1, 3 steps"), std::string::npos);
  EXPECT_EQ(check_well_formed(s2), "");
}

TEST(Timeline, LongTitleWraps) {
  Timeline t;
  for (int i = 0; i < 30; ++i) t.title += (i ? " | " : "") + std::string("part number ") + std::to_string(i);
  t.spans.push_back({Lane::kGpu, 0, 1, 0, 1, "head", 0});
  const std::string svg = render_svg(t);
  EXPECT_EQ(check_well_formed(svg), "");
  EXPECT_NE(svg.find(">part number 0 | "), std::string::npos);
  EXPECT_NE(svg.find(">part number "), svg.rfind(">part number "));  // two lines or more
  EXPECT_NE(svg.find("part number 29<"), std::string::npos);
}

TEST(Timeline, AxisTicks) {
  Timeline t;
  t.spans.push_back({Lane::kGpu, 0, 12.3, 0, 1, "blk.0.ffn", 0});
  const std::string svg = render_svg(t);
  // 12.3 ms -> ticks every 2 ms: 0, 2, ..., 12.
  for (const char* v : {">0<", ">2<", ">4<", ">10<", ">12<"}) EXPECT_NE(svg.find(v), std::string::npos) << v;
  EXPECT_EQ(svg.find(">14<"), std::string::npos);
  Timeline small;
  small.spans.push_back({Lane::kGpu, 100.0, 100.05, 0, 1, "blk.0.ffn", 0});
  const std::string s2 = render_svg(small);
  EXPECT_NE(s2.find(">100.000<"), std::string::npos) << s2;  // 5 us steps: three decimals
  EXPECT_NE(s2.find(">100.050<"), std::string::npos);
}

TEST(Timeline, EmptyAndDegenerate) {
  Timeline empty;
  const std::string svg = render_svg(empty);
  EXPECT_EQ(check_well_formed(svg), "") << svg;
  EXPECT_NE(svg.find("no spans"), std::string::npos);
  EXPECT_EQ(count(svg, "class=\"span\""), 0u);
  // Steps but no spans; a zero-length and a reversed span; non-finite times.
  Timeline t;
  t.steps.push_back({0, 1, 1, 3.0, 3.0});
  t.spans.push_back({Lane::kGpu, 3.0, 3.0, 0, 1, "head", 0});
  t.spans.push_back({Lane::kCopy, 3.0, 2.0, 0, 1, "copy x", 100});
  t.spans.push_back({Lane::kCpu, NAN, INFINITY, 0, 1, "blk.0.ffn", 0});
  const std::string s2 = render_svg(t);
  EXPECT_EQ(check_well_formed(s2), "") << s2;
  EXPECT_EQ(count(s2, "class=\"span\""), 3u);
  EXPECT_EQ(s2.find("nan"), std::string::npos);
  EXPECT_EQ(s2.find("inf"), std::string::npos);
}

}  // namespace
}  // namespace ferry::exec
