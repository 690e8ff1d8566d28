// HardwareProfile JSON: writer with a fixed key order and a strict reader. The reader walks the
// document with a path ("cpu.matmul[2].tokens") so every error says exactly which value is wrong,
// and refuses keys it does not know (a typo in a hand-edited fixture must not silently vanish).
#include "plan/profile.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace ferry::plan {

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

using json = nlohmann::ordered_json;

std::string MachineInfo::fingerprint() const {
  // FNV-1a 64 over the identity fields; separators keep ("ab","c") != ("a","bc").
  const std::string key = cpu_model + '\x1f' + std::to_string(cores) + '\x1f' + simd + '\x1f' + gpu_name + '\x1f' +
                          gpu_driver;
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : key) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

namespace {

// ---- writing -------------------------------------------------------------------------------------

json curve_json(const ThroughputCurve& c, bool with_threads) {
  json j;
  j["dtype"] = dtype_name(c.dtype);
  if (with_threads) j["threads"] = c.threads;
  j["rows"] = c.rows;
  j["cols"] = c.cols;
  j["tokens"] = c.tokens;
  j["gflops"] = c.gflops;
  return j;
}

json attention_json(const GpuAttentionProfile& a) {
  json j;
  j["n_head"] = a.n_head;
  j["n_kv_head"] = a.n_kv_head;
  j["head_dim"] = a.head_dim;
  json d = json::array();
  for (const AttentionPoint& pt : a.decode) d.push_back(json{{"cells", pt.cells}, {"us", pt.us}});
  j["decode"] = d;
  json f = json::array();
  for (const AttentionPoint& pt : a.prefill)
    f.push_back(json{{"tokens", pt.tokens}, {"cells", pt.cells}, {"us", pt.us}});
  j["prefill"] = f;
  return j;
}

// ---- strict reading ------------------------------------------------------------------------------

class Obj {
 public:
  Obj(const json& j, std::string path, std::string_view origin) : j_(j), path_(std::move(path)), origin_(origin) {}

  Status err(const std::string& key, const std::string& what) const {
    return make_error(ErrorCode::kCorrupt, "%.*s: %s: %s", static_cast<int>(origin_.size()), origin_.data(),
                      sub(key).c_str(), what.c_str());
  }
  std::string sub(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  bool has(const std::string& key) const { return j_.contains(key); }

  const json* get(const std::string& key) {
    seen_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  Status number(const std::string& key, double* out, double lo, double hi, bool required = true) {
    const json* v = get(key);
    if (!v) return required ? err(key, "missing") : Status::ok();
    if (!v->is_number()) return err(key, "expected a number");
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
      return err(key, "value " + fmt(x) + " out of range [" + fmt(lo) + ", " + fmt(hi) + "]");
    *out = x;
    return Status::ok();
  }
  template <typename I>
  Status integer(const std::string& key, I* out, double lo, double hi, bool required = true) {
    const json* v = get(key);
    if (!v) return required ? err(key, "missing") : Status::ok();
    if (!v->is_number_integer()) return err(key, "expected an integer");
    // Read as the widest type of its sign so byte counts above 2^53 stay exact.
    const double x = v->is_number_unsigned() ? static_cast<double>(v->get<uint64_t>())
                                             : static_cast<double>(v->get<int64_t>());
    if (x < lo || x > hi) return err(key, "value " + fmt(x) + " out of range [" + fmt(lo) + ", " + fmt(hi) + "]");
    *out = v->is_number_unsigned() ? static_cast<I>(v->get<uint64_t>()) : static_cast<I>(v->get<int64_t>());
    return Status::ok();
  }
  Status string(const std::string& key, std::string* out, bool required = true) {
    const json* v = get(key);
    if (!v) return required ? err(key, "missing") : Status::ok();
    if (!v->is_string()) return err(key, "expected a string");
    *out = v->get<std::string>();
    return Status::ok();
  }
  Status dtype(const std::string& key, DType* out) {
    std::string s;
    FERRY_RETURN_IF_ERROR(string(key, &s));
    std::optional<DType> t = dtype_from_name(s);
    if (!t || !traits(*t).weight_type) return err(key, "'" + s + "' is not a weight type");
    *out = *t;
    return Status::ok();
  }
  // Every key of the object must have been read.
  Status finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.count(it.key())) return err(it.key(), "unknown key");
    return Status::ok();
  }

 private:
  static std::string fmt(double x) {
    char b[64];
    std::snprintf(b, sizeof b, "%g", x);
    return b;
  }
  const json& j_;
  std::string path_;
  std::string_view origin_;
  std::set<std::string> seen_;
};

constexpr double kBig = 1e15;

Status read_object(Obj& parent, const std::string& key, const json** out) {
  const json* v = parent.get(key);
  if (!v) return parent.err(key, "missing");
  if (!v->is_object()) return parent.err(key, "expected an object");
  *out = v;
  return Status::ok();
}

Status read_array(Obj& parent, const std::string& key, const json** out) {
  const json* v = parent.get(key);
  if (!v) return parent.err(key, "missing");
  if (!v->is_array()) return parent.err(key, "expected an array");
  *out = v;
  return Status::ok();
}

Status read_curve(const json& j, const std::string& path, std::string_view origin, bool with_threads,
                  ThroughputCurve* c) {
  if (!j.is_object()) return make_error(ErrorCode::kCorrupt, "%.*s: %s: expected an object",
                                        static_cast<int>(origin.size()), origin.data(), path.c_str());
  Obj o(j, path, origin);
  FERRY_RETURN_IF_ERROR(o.dtype("dtype", &c->dtype));
  if (with_threads) FERRY_RETURN_IF_ERROR(o.integer("threads", &c->threads, 1, 4096));
  FERRY_RETURN_IF_ERROR(o.integer("rows", &c->rows, 0, kBig, false));
  FERRY_RETURN_IF_ERROR(o.integer("cols", &c->cols, 0, kBig, false));
  const json* tokens = nullptr;
  const json* gflops = nullptr;
  FERRY_RETURN_IF_ERROR(read_array(o, "tokens", &tokens));
  FERRY_RETURN_IF_ERROR(read_array(o, "gflops", &gflops));
  if (tokens->empty()) return o.err("tokens", "empty");
  if (tokens->size() != gflops->size())
    return o.err("gflops", "has " + std::to_string(gflops->size()) + " values for " + std::to_string(tokens->size()) +
                               " token counts");
  for (size_t i = 0; i < tokens->size(); ++i) {
    const json& t = (*tokens)[i];
    const json& g = (*gflops)[i];
    const std::string idx = "[" + std::to_string(i) + "]";
    if (!t.is_number_integer() || t.get<int64_t>() < 1 || t.get<int64_t>() > 1 << 20)
      return o.err("tokens" + idx, "expected an integer token count in [1, 1048576]");
    if (!g.is_number() || !std::isfinite(g.get<double>()) || g.get<double>() <= 0 || g.get<double>() > 1e9)
      return o.err("gflops" + idx, "expected a positive GFLOP/s value");
    const int32_t tv = static_cast<int32_t>(t.get<int64_t>());
    if (!c->tokens.empty() && tv <= c->tokens.back()) return o.err("tokens" + idx, "token counts must increase");
    c->tokens.push_back(tv);
    c->gflops.push_back(g.get<double>());
  }
  return o.finish();
}

// gpu.attention: the head configuration, decode points (cells increasing) and prefill points
// ((tokens, cells) increasing, tokens >= 2, tokens <= cells). At least one point in all.
Status read_attention(const json& j, std::string_view origin, GpuAttentionProfile* a) {
  if (!j.is_object()) return make_error(ErrorCode::kCorrupt, "%.*s: gpu.attention: expected an object",
                                        static_cast<int>(origin.size()), origin.data());
  Obj o(j, "gpu.attention", origin);
  FERRY_RETURN_IF_ERROR(o.integer("n_head", &a->n_head, 1, 4096));
  FERRY_RETURN_IF_ERROR(o.integer("n_kv_head", &a->n_kv_head, 1, 4096));
  FERRY_RETURN_IF_ERROR(o.integer("head_dim", &a->head_dim, 1, 4096));
  if (a->n_head % a->n_kv_head != 0) return o.err("n_kv_head", "must divide n_head");
  for (const char* key : {"decode", "prefill"}) {
    const bool decode = key[0] == 'd';
    const json* arr = nullptr;
    FERRY_RETURN_IF_ERROR(read_array(o, key, &arr));
    std::vector<AttentionPoint>& pts = decode ? a->decode : a->prefill;
    for (size_t i = 0; i < arr->size(); ++i) {
      const std::string path = std::string("gpu.attention.") + key + "[" + std::to_string(i) + "]";
      if (!(*arr)[i].is_object())
        return make_error(ErrorCode::kCorrupt, "%.*s: %s: expected an object", static_cast<int>(origin.size()),
                          origin.data(), path.c_str());
      Obj e((*arr)[i], path, origin);
      AttentionPoint pt;
      if (!decode) FERRY_RETURN_IF_ERROR(e.integer("tokens", &pt.tokens, 2, 1 << 20));
      FERRY_RETURN_IF_ERROR(e.integer("cells", &pt.cells, 1, 1 << 30));
      FERRY_RETURN_IF_ERROR(e.number("us", &pt.us, 1e-3, 1e9));
      FERRY_RETURN_IF_ERROR(e.finish());
      if (pt.tokens > pt.cells) return e.err("cells", "fewer cells than tokens");
      if (!pts.empty()) {
        const AttentionPoint& prev = pts.back();
        if (decode && pt.cells <= prev.cells) return e.err("cells", "cell counts must increase");
        if (!decode && (pt.tokens < prev.tokens || (pt.tokens == prev.tokens && pt.cells <= prev.cells)))
          return e.err("tokens", "points must increase by (tokens, cells)");
      }
      pts.push_back(pt);
    }
  }
  if (a->decode.empty() && a->prefill.empty()) return o.err("decode", "no decode or prefill point");
  return o.finish();
}

}  // namespace

std::string profile_to_json(const HardwareProfile& p) {
  json j;
  j["schema"] = kProfileSchema;
  j["version"] = p.version;
  j["source"] = p.source;
  j["mode"] = p.mode;
  j["created"] = p.created;
  j["seconds"] = p.seconds;
  if (!p.notes.empty()) j["notes"] = p.notes;
  json m;
  m["cpu_model"] = p.machine.cpu_model;
  m["cores"] = p.machine.cores;
  m["logical_cpus"] = p.machine.logical_cpus;
  m["simd"] = p.machine.simd;
  m["host_memory_bytes"] = p.machine.host_memory_bytes;
  m["llc_bytes"] = p.machine.llc_bytes;
  if (!p.machine.gpu_name.empty()) {
    m["gpu_name"] = p.machine.gpu_name;
    m["gpu_driver"] = p.machine.gpu_driver;
  }
  m["fingerprint"] = p.machine.fingerprint();
  j["machine"] = m;
  json cpu;
  cpu["kernels"] = p.cpu.kernels;
  cpu["threads"] = p.cpu.threads;
  cpu["call_overhead_us"] = p.cpu.call_overhead_us;
  json bw = json::array();
  for (const BandwidthPoint& b : p.cpu.mem_bw) bw.push_back(json{{"threads", b.threads}, {"gbs", b.gbs}});
  cpu["mem_bw"] = bw;
  json mm = json::array();
  for (const ThroughputCurve& c : p.cpu.matmul) mm.push_back(curve_json(c, true));
  cpu["matmul"] = mm;
  j["cpu"] = cpu;
  if (p.link) {
    const LinkProfile& l = *p.link;
    j["link"] = json{{"h2d_gbs", l.h2d_gbs},
                     {"d2h_gbs", l.d2h_gbs},
                     {"h2d_busy_gbs", l.h2d_busy_gbs},
                     {"d2h_busy_gbs", l.d2h_busy_gbs},
                     {"h2d_pageable_gbs", l.h2d_pageable_gbs},
                     {"cpu_share_while_copying", l.cpu_share_while_copying},
                     {"host_combined_gbs", l.host_combined_gbs},
                     {"latency_us", l.latency_us}};
  }
  if (p.gpu) {
    const GpuProfile& g = *p.gpu;
    json gj;
    gj["name"] = g.name;
    gj["memory_bytes"] = g.memory_bytes;
    gj["mem_bw_gbs"] = g.mem_bw_gbs;
    gj["launch_us"] = g.launch_us;
    if (g.graph_kernel_us > 0) gj["graph_kernel_us"] = g.graph_kernel_us;
    if (g.context_bytes > 0) gj["context_bytes"] = g.context_bytes;
    json gm = json::array();
    for (const ThroughputCurve& c : g.matmul) gm.push_back(curve_json(c, false));
    gj["matmul"] = gm;
    if (g.attention) gj["attention"] = attention_json(*g.attention);
    j["gpu"] = gj;
  }
  return j.dump(2) + "\n";
}

Expected<HardwareProfile> parse_profile(std::string_view text, std::string_view origin) {
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    return make_error(ErrorCode::kCorrupt, "%.*s: not valid JSON (%s)", static_cast<int>(origin.size()), origin.data(),
                      e.what());
  }
  if (!doc.is_object())
    return make_error(ErrorCode::kCorrupt, "%.*s: expected a JSON object", static_cast<int>(origin.size()),
                      origin.data());
  HardwareProfile p;
  Obj root(doc, "", origin);
  std::string schema;
  FERRY_RETURN_IF_ERROR(root.string("schema", &schema));
  if (schema != kProfileSchema) return root.err("schema", "'" + schema + "' is not " + kProfileSchema);
  FERRY_RETURN_IF_ERROR(root.integer("version", &p.version, 0, 1e9));
  if (p.version != kProfileVersion)
    return root.err("version", "profile version " + std::to_string(p.version) + " is not the version this ferry reads (" +
                                   std::to_string(kProfileVersion) + "); run `ferry profile` again");
  FERRY_RETURN_IF_ERROR(root.string("source", &p.source));
  if (p.source != "measured" && p.source != "estimated") return root.err("source", "expected 'measured' or 'estimated'");
  FERRY_RETURN_IF_ERROR(root.string("mode", &p.mode, false));
  FERRY_RETURN_IF_ERROR(root.string("created", &p.created, false));
  FERRY_RETURN_IF_ERROR(root.number("seconds", &p.seconds, 0, 1e7, false));
  FERRY_RETURN_IF_ERROR(root.string("notes", &p.notes, false));

  {
    const json* j = nullptr;
    FERRY_RETURN_IF_ERROR(read_object(root, "machine", &j));
    Obj o(*j, "machine", origin);
    MachineInfo& m = p.machine;
    FERRY_RETURN_IF_ERROR(o.string("cpu_model", &m.cpu_model));
    FERRY_RETURN_IF_ERROR(o.integer("cores", &m.cores, 1, 1 << 16));
    FERRY_RETURN_IF_ERROR(o.integer("logical_cpus", &m.logical_cpus, 0, 1 << 16, false));
    FERRY_RETURN_IF_ERROR(o.string("simd", &m.simd));
    FERRY_RETURN_IF_ERROR(o.integer("host_memory_bytes", &m.host_memory_bytes, 0, 1.8e19, false));
    FERRY_RETURN_IF_ERROR(o.integer("llc_bytes", &m.llc_bytes, 0, 1.8e19, false));
    FERRY_RETURN_IF_ERROR(o.string("gpu_name", &m.gpu_name, false));
    FERRY_RETURN_IF_ERROR(o.string("gpu_driver", &m.gpu_driver, false));
    std::string fp;
    FERRY_RETURN_IF_ERROR(o.string("fingerprint", &fp, false));  // recomputed; kept for people reading
    FERRY_RETURN_IF_ERROR(o.finish());
  }
  {
    const json* j = nullptr;
    FERRY_RETURN_IF_ERROR(read_object(root, "cpu", &j));
    Obj o(*j, "cpu", origin);
    CpuProfile& c = p.cpu;
    FERRY_RETURN_IF_ERROR(o.string("kernels", &c.kernels));
    FERRY_RETURN_IF_ERROR(o.integer("threads", &c.threads, 1, 4096));
    FERRY_RETURN_IF_ERROR(o.number("call_overhead_us", &c.call_overhead_us, 0, 1e6, false));
    const json* bw = nullptr;
    FERRY_RETURN_IF_ERROR(read_array(o, "mem_bw", &bw));
    for (size_t i = 0; i < bw->size(); ++i) {
      const std::string path = "cpu.mem_bw[" + std::to_string(i) + "]";
      if (!(*bw)[i].is_object())
        return make_error(ErrorCode::kCorrupt, "%.*s: %s: expected an object", static_cast<int>(origin.size()),
                          origin.data(), path.c_str());
      Obj e((*bw)[i], path, origin);
      BandwidthPoint b;
      FERRY_RETURN_IF_ERROR(e.integer("threads", &b.threads, 1, 4096));
      FERRY_RETURN_IF_ERROR(e.number("gbs", &b.gbs, 1e-3, 1e5));
      FERRY_RETURN_IF_ERROR(e.finish());
      if (!c.mem_bw.empty() && b.threads <= c.mem_bw.back().threads) return e.err("threads", "thread counts must increase");
      c.mem_bw.push_back(b);
    }
    if (c.mem_bw.empty()) return o.err("mem_bw", "empty");
    const json* mm = nullptr;
    FERRY_RETURN_IF_ERROR(read_array(o, "matmul", &mm));
    for (size_t i = 0; i < mm->size(); ++i) {
      ThroughputCurve curve;
      FERRY_RETURN_IF_ERROR(read_curve((*mm)[i], "cpu.matmul[" + std::to_string(i) + "]", origin, true, &curve));
      for (const ThroughputCurve& other : c.matmul)
        if (other.dtype == curve.dtype && other.threads == curve.threads)
          return o.err("matmul[" + std::to_string(i) + "]", std::string("second curve for ") + dtype_name(curve.dtype) +
                                                               " at " + std::to_string(curve.threads) + " threads");
      c.matmul.push_back(std::move(curve));
    }
    if (c.matmul.empty()) return o.err("matmul", "empty");
    FERRY_RETURN_IF_ERROR(o.finish());
  }
  if (root.has("link")) {
    const json* j = nullptr;
    FERRY_RETURN_IF_ERROR(read_object(root, "link", &j));
    Obj o(*j, "link", origin);
    LinkProfile l;
    FERRY_RETURN_IF_ERROR(o.number("h2d_gbs", &l.h2d_gbs, 1e-3, 1e5));
    FERRY_RETURN_IF_ERROR(o.number("d2h_gbs", &l.d2h_gbs, 1e-3, 1e5));
    FERRY_RETURN_IF_ERROR(o.number("h2d_busy_gbs", &l.h2d_busy_gbs, 1e-3, 1e5));
    FERRY_RETURN_IF_ERROR(o.number("d2h_busy_gbs", &l.d2h_busy_gbs, 1e-3, 1e5));
    FERRY_RETURN_IF_ERROR(o.number("h2d_pageable_gbs", &l.h2d_pageable_gbs, 0, 1e5, false));
    FERRY_RETURN_IF_ERROR(o.number("cpu_share_while_copying", &l.cpu_share_while_copying, 1e-3, 1));
    FERRY_RETURN_IF_ERROR(o.number("host_combined_gbs", &l.host_combined_gbs, 1e-3, 1e5));
    FERRY_RETURN_IF_ERROR(o.number("latency_us", &l.latency_us, 0, 1e6));
    FERRY_RETURN_IF_ERROR(o.finish());
    p.link = l;
  }
  if (root.has("gpu")) {
    const json* j = nullptr;
    FERRY_RETURN_IF_ERROR(read_object(root, "gpu", &j));
    Obj o(*j, "gpu", origin);
    GpuProfile g;
    FERRY_RETURN_IF_ERROR(o.string("name", &g.name));
    FERRY_RETURN_IF_ERROR(o.integer("memory_bytes", &g.memory_bytes, 1, 1.8e19));
    FERRY_RETURN_IF_ERROR(o.number("mem_bw_gbs", &g.mem_bw_gbs, 1e-3, 1e6));
    FERRY_RETURN_IF_ERROR(o.number("launch_us", &g.launch_us, 0, 1e6));
    FERRY_RETURN_IF_ERROR(o.number("graph_kernel_us", &g.graph_kernel_us, 0, 1e6, /*required=*/false));
    FERRY_RETURN_IF_ERROR(o.integer("context_bytes", &g.context_bytes, 0, 1.8e19, /*required=*/false));
    const json* mm = nullptr;
    FERRY_RETURN_IF_ERROR(read_array(o, "matmul", &mm));
    for (size_t i = 0; i < mm->size(); ++i) {
      ThroughputCurve curve;
      FERRY_RETURN_IF_ERROR(read_curve((*mm)[i], "gpu.matmul[" + std::to_string(i) + "]", origin, false, &curve));
      for (const ThroughputCurve& other : g.matmul)
        if (other.dtype == curve.dtype)
          return o.err("matmul[" + std::to_string(i) + "]", std::string("second curve for ") + dtype_name(curve.dtype));
      g.matmul.push_back(std::move(curve));
    }
    if (g.matmul.empty()) return o.err("matmul", "empty");
    if (o.has("attention")) {  // optional (older profiles have none)
      GpuAttentionProfile a;
      FERRY_RETURN_IF_ERROR(read_attention(*o.get("attention"), origin, &a));
      g.attention = std::move(a);
    }
    FERRY_RETURN_IF_ERROR(o.finish());
    p.gpu = std::move(g);
  }
  FERRY_RETURN_IF_ERROR(root.finish());
  FERRY_RETURN_IF_ERROR(validate_profile(p, origin));
  return p;
}

Status validate_profile(const HardwareProfile& p, std::string_view origin) {
  auto bad = [&](const char* what) {
    return make_error(ErrorCode::kCorrupt, "%.*s: %s", static_cast<int>(origin.size()), origin.data(), what);
  };
  if (p.link.has_value() != p.gpu.has_value()) return bad("'link' and 'gpu' must be both present or both absent");
  if (p.cpu.mem_bw.empty() || p.cpu.matmul.empty()) return bad("cpu.mem_bw and cpu.matmul must not be empty");
  if (p.cpu.threads < 1) return bad("cpu.threads must be >= 1");
  if (p.link) {
    if (p.link->h2d_busy_gbs > p.link->h2d_gbs * 1.5) return bad("link.h2d_busy_gbs is far above link.h2d_gbs");
  }
  if (p.gpu && p.gpu->attention) {
    const GpuAttentionProfile& a = *p.gpu->attention;
    if (a.n_head < 1 || a.n_kv_head < 1 || a.head_dim < 1 || a.n_head % a.n_kv_head != 0)
      return bad("gpu.attention: bad head configuration");
    if (a.decode.empty() && a.prefill.empty()) return bad("gpu.attention: no decode or prefill point");
    for (const auto* pts : {&a.decode, &a.prefill})
      for (const AttentionPoint& pt : *pts)
        if (pt.cells < 1 || pt.tokens < 1 || pt.tokens > pt.cells || !(pt.us > 0) || !std::isfinite(pt.us))
          return bad("gpu.attention: a point with no cells, more tokens than cells or a time <= 0");
  }
  return Status::ok();
}

Expected<HardwareProfile> load_profile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::kNotFound, "cannot open profile '%s': %s", path.c_str(), std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return make_error(ErrorCode::kIo, "cannot read profile '%s'", path.c_str());
  const std::string text = ss.str();
  if (text.size() > (64u << 20)) return make_error(ErrorCode::kCorrupt, "profile '%s' is too large", path.c_str());
  return parse_profile(text, path);
}

namespace {
Status make_dirs(const std::string& dir) {
  if (dir.empty()) return Status::ok();
  std::string cur;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
        return make_error(ErrorCode::kIo, "cannot create directory '%s': %s", cur.c_str(), std::strerror(errno));
    }
    if (i < dir.size()) cur += dir[i];
  }
  return Status::ok();
}
}  // namespace

Status save_profile(const HardwareProfile& p, const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) FERRY_RETURN_IF_ERROR(make_dirs(path.substr(0, slash)));
  // Write then rename, so a reader never sees half a profile; the temporary name is this process's, so
  // two processes saving at once do not write into one file.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return make_error(ErrorCode::kIo, "cannot write '%s': %s", tmp.c_str(), std::strerror(errno));
    out << profile_to_json(p);
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      return make_error(ErrorCode::kIo, "cannot write '%s'", tmp.c_str());
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return make_error(ErrorCode::kIo, "cannot rename '%s' to '%s': %s", tmp.c_str(), path.c_str(), std::strerror(err));
  }
  return Status::ok();
}

std::string profile_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::string(xdg) + "/ferry";
  const char* home = std::getenv("HOME");
  if (home && *home) return std::string(home) + "/.cache/ferry";
  return "";
}

std::string cached_profile_path(const MachineInfo& m) {
  const std::string dir = profile_cache_dir();
  if (dir.empty()) return "";
  return dir + "/profile-" + m.fingerprint() + ".json";
}

}  // namespace ferry::plan
