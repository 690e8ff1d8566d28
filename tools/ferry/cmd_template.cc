// ferry template: render a chat template (the model's tokenizer.chat_template, or a template file) for a
// conversation given as JSON, and print the prompt text exactly as `ferry run --chat` would tokenize it
// (--raw: as the template renders it, BOS / EOS text kept). --batch renders one request per line of a
// JSON-lines file and prints one JSON object per line, so a test can check many conversations with one
// process.
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "format/gguf.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace {

using ferry::ErrorCode;
using ferry::Expected;
using ferry::make_error;
using ferry::text::ChatRequest;
using ferry::text::ChatTemplate;
using Json = nlohmann::ordered_json;

bool read_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return !in.bad();
}

// A flag value that is JSON text, or @FILE holding it.
Expected<std::string> json_arg(const std::string& value, const char* flag) {
  if (value.empty() || value[0] != '@') return value;
  std::string text;
  if (!read_file(value.substr(1), &text))
    return make_error(ErrorCode::kNotFound, "%s: cannot read %s", flag, value.c_str() + 1);
  return text;
}

// "YYYY-MM-DD HH:MM:SS" (or "YYYY-MM-DD") -> a normalized tm (weekday and day of year filled).
std::optional<std::tm> parse_now(const std::string& text) {
  std::tm tm{};
  const char* end = strptime(text.c_str(), "%Y-%m-%d %H:%M:%S", &tm);
  if (!end || *end) {
    tm = {};
    end = strptime(text.c_str(), "%Y-%m-%d", &tm);
    if (!end || *end) return std::nullopt;
  }
  std::time_t t = timegm(&tm);
  std::tm out{};
  gmtime_r(&t, &out);
  return out;
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

struct Renderer {
  const ChatTemplate* tmpl = nullptr;
  const ferry::text::Tokenizer* tok = nullptr;  // set with -m and without --raw
  Expected<std::string> operator()(ChatRequest req) const {
    if (tok) return ferry::text::render_for_tokenizer(*tmpl, std::move(req), *tok);
    return tmpl->render(req);
  }
};

// One --batch line: {"messages": [...], "tools": [...], "add_generation_prompt": b, "bos_token": s,
// "eos_token": s, "vars": {...}, "now": "YYYY-MM-DD HH:MM:SS", "parse_tool_arguments": b} -> {"text": ...} or
// {"error": ...}.
Json render_line(const Renderer& render, const ChatRequest& defaults, const std::string& line) {
  Json in;
  try {
    in = Json::parse(line);
  } catch (const Json::exception& e) {
    return Json{{"error", std::string("invalid JSON line: ") + e.what()}};
  }
  if (!in.is_object()) return Json{{"error", "a batch line must be a JSON object"}};
  ChatRequest req = defaults;
  req.messages_json = dump(in.value("messages", Json::array()));
  if (in.contains("tools") && !in["tools"].is_null()) req.tools_json = dump(in["tools"]);
  if (in.contains("add_generation_prompt"))
    req.add_generation_prompt = in["add_generation_prompt"].is_boolean() && in["add_generation_prompt"].get<bool>();
  if (in.contains("bos_token") && in["bos_token"].is_string()) req.bos_token = in["bos_token"].get<std::string>();
  if (in.contains("eos_token") && in["eos_token"].is_string()) req.eos_token = in["eos_token"].get<std::string>();
  if (in.contains("vars")) req.extra_json = dump(in["vars"]);
  if (in.contains("parse_tool_arguments")) req.parse_tool_arguments = in["parse_tool_arguments"] == true;
  if (in.contains("now") && in["now"].is_string()) {
    auto now = parse_now(in["now"].get<std::string>());
    if (!now) return Json{{"error", "now: expected YYYY-MM-DD HH:MM:SS"}};
    req.now = *now;
  }
  auto out = render(std::move(req));
  if (!out) return Json{{"error", out.status().message()}};
  return Json{{"text", *out}};
}

}  // namespace

int cmd_template(int argc, char** argv) {
  CLI::App app{"Render a chat template for a conversation and print the prompt text.", "ferry template"};
  std::string model, template_file, messages, prompt, system, tools, bos, eos, vars, now, batch;
  bool no_gen = false, raw = false, json = false, show = false;
  auto* m_opt = app.add_option("-m,--model", model, "GGUF model whose tokenizer.chat_template is rendered");
  auto* t_opt = app.add_option("--template", template_file, "a Jinja template file instead of a model's");
  m_opt->excludes(t_opt);
  app.add_option("--messages", messages, "the conversation: a JSON array of {role, content, ...} (or @FILE)");
  app.add_option("-p,--prompt", prompt, "one user message (instead of --messages)");
  app.add_option("--system", system, "a system message before -p");
  app.add_option("--tools", tools, "JSON array of tools, OpenAI style (or @FILE)");
  app.add_flag("--no-generation-prompt", no_gen, "do not open the assistant's turn at the end");
  app.add_option("--bos", bos, "text of bos_token (default: the model's BOS token)");
  app.add_option("--eos", eos, "text of eos_token (default: the model's EOS token)");
  app.add_option("--vars", vars,
                 "JSON object of more template variables, e.g. {\"enable_thinking\": false} (or @FILE)");
  app.add_option("--now", now, "the time strftime_now() sees: \"YYYY-MM-DD HH:MM:SS\" (default: the local time)");
  app.add_flag("--raw", raw,
               "with -m: keep the BOS / EOS text the template writes (ferry run drops it when the "
               "tokenizer adds those tokens itself)");
  app.add_flag("--json", json, "print {\"text\": ...} instead of the bare text");
  app.add_option("--batch", batch,
                 "render each line of this JSON-lines file (one request object per line); "
                 "print one {\"text\"} or {\"error\"} object per line");
  app.add_flag("--print-template", show, "print the template source and exit");
  int rc = 0;
  if (!ferry::cli::parse(app, argc, argv, &rc)) return rc;
  if (model.empty() && template_file.empty()) return ferry::cli::usage_error("give -m MODEL or --template FILE");
  const bool have_prompt = !app.get_option("--prompt")->empty();
  if (!show && batch.empty() && messages.empty() && !have_prompt)
    return ferry::cli::usage_error("give --messages JSON, -p TEXT or --batch FILE");
  if (have_prompt + !messages.empty() + !batch.empty() > 1)
    return ferry::cli::usage_error("--messages, -p and --batch do not go together");

  std::unique_ptr<ferry::gguf::ModelFile> file;
  std::unique_ptr<ferry::text::Tokenizer> tok;
  std::string source;
  if (!model.empty()) {
    auto mf = ferry::gguf::ModelFile::open(model);
    if (!mf) return ferry::cli::report(mf.status());
    file = std::move(*mf);
    source = file->get_string_or("tokenizer.chat_template", "");
    if (source.empty()) return ferry::cli::fail(model + " has no chat template (tokenizer.chat_template)");
    auto t = ferry::text::Tokenizer::from_gguf(*file);
    if (!t) return ferry::cli::report(t.status());
    tok = std::move(*t);
  } else if (!read_file(template_file, &source)) {
    return ferry::cli::fail("cannot read " + template_file);
  }
  if (show) {
    std::fwrite(source.data(), 1, source.size(), stdout);
    return 0;
  }
  auto tmpl = ChatTemplate::parse(source);
  if (!tmpl) return ferry::cli::fail(tmpl.status().message());

  ChatRequest req;
  req.add_generation_prompt = !no_gen;
  if (tok && !raw) {
    req.bos_token = bos;
    req.eos_token = eos;
  } else {
    auto text_of = [&](ferry::text::Token id) {
      return tok && id >= 0 ? tok->token_to_piece(id, true) : std::string();
    };
    req.bos_token = app.get_option("--bos")->empty() && tok ? text_of(tok->special().bos) : bos;
    req.eos_token = app.get_option("--eos")->empty() && tok ? text_of(tok->special().eos) : eos;
  }
  for (auto [flag, value, target] :
       {std::tuple{"--tools", &tools, &req.tools_json}, std::tuple{"--vars", &vars, &req.extra_json},
        std::tuple{"--messages", &messages, &req.messages_json}}) {
    if (value->empty()) continue;
    auto text = json_arg(*value, flag);
    if (!text) return ferry::cli::report(text.status());
    *target = std::move(*text);
  }
  if (!now.empty()) {
    auto t = parse_now(now);
    if (!t) return ferry::cli::usage_error("--now: expected \"YYYY-MM-DD HH:MM:SS\"");
    req.now = *t;
  }
  Renderer render{&*tmpl, raw ? nullptr : tok.get()};

  if (!batch.empty()) {
    std::string content;
    if (!read_file(batch, &content)) return ferry::cli::fail("cannot read " + batch);
    std::istringstream lines(content);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.empty()) continue;
      std::string out = dump(render_line(render, req, line)) + "\n";
      std::fwrite(out.data(), 1, out.size(), stdout);
    }
    return 0;
  }
  if (have_prompt) {
    if (!system.empty()) req.messages.push_back({"system", system});
    req.messages.push_back({"user", prompt});
  }
  auto out = render(req);
  if (!out) return ferry::cli::report(out.status());
  std::string text = json ? dump(Json{{"text", *out}}) + "\n" : *out;
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}
