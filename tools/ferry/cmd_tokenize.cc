// ferry tokenize: print the token ids of a text as the model's tokenizer encodes it (BOS added and
// special-token text parsed by default, as llama.cpp's llama-tokenize). --lines FILE encodes every line
// of FILE on its own (escapes \n \t \r \\ \xNN unescaped) and prints one JSON array per line, so a test
// can check hundreds of strings with one process start. --dump-vocab prints, as one JSON object, every
// token's text (hex bytes, with and without special rendering), the special ids and the EOG set.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "format/gguf.h"
#include "text/tokenizer.h"

namespace {

using ferry::ErrorCode;
using ferry::Expected;
using ferry::make_error;

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// \n \t \r \\ \xNN -> the character or byte; any other escape is an error (a typo should not pass).
Expected<std::string> unescape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    if (i + 1 >= s.size()) return make_error(ErrorCode::kInvalidArgument, "dangling '\\' at the end");
    const char c = s[++i];
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case 'x': {
        const int hi = i + 1 < s.size() ? hex_digit(s[i + 1]) : -1;
        const int lo = i + 2 < s.size() ? hex_digit(s[i + 2]) : -1;
        if (hi < 0 || lo < 0) return make_error(ErrorCode::kInvalidArgument, "\\x needs two hex digits");
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        break;
      }
      default: return make_error(ErrorCode::kInvalidArgument, "unknown escape '\\%c'", c);
    }
  }
  return out;
}

std::string json_ids(const std::vector<ferry::text::Token>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

// A piece as a readable, quoted string: printable ASCII and UTF-8 as is, the rest escaped.
std::string quote_piece(const std::string& p) {
  std::string s = "'";
  for (unsigned char c : p) {
    if (c == '\n') s += "\\n";
    else if (c == '\t') s += "\\t";
    else if (c == '\r') s += "\\r";
    else if (c == '\\') s += "\\\\";
    else if (c == '\'') s += "\\'";
    else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      s += buf;
    } else {
      s += static_cast<char>(c);
    }
  }
  return s + "'";
}

std::string hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * s.size());
  for (unsigned char c : s) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::string dump_vocab(const ferry::text::Tokenizer& t) {
  const auto& sp = t.special();
  std::string out = "{\"n_vocab\": " + std::to_string(t.vocab_size()) + ", \"bos\": " + std::to_string(sp.bos) +
                    ", \"eos\": " + std::to_string(sp.eos) + ", \"eot\": " + std::to_string(sp.eot) +
                    ", \"pad\": " + std::to_string(sp.pad) + ", \"unk\": " + std::to_string(sp.unk) +
                    ", \"add_bos\": " + (sp.add_bos ? "true" : "false") +
                    ", \"add_eos\": " + (sp.add_eos ? "true" : "false") + ", \"eog\": [";
  bool first = true;
  for (int32_t id = 0; id < t.vocab_size(); ++id) {
    if (!t.is_eog(id)) continue;
    out += (first ? "" : ", ") + std::to_string(id);
    first = false;
  }
  for (const bool special : {false, true}) {
    out += special ? "],\n\"pieces_special\": [" : "],\n\"pieces\": [";
    for (int32_t id = 0; id < t.vocab_size(); ++id) {
      if (id) out += ", ";
      out += "\"" + hex(t.token_to_piece(id, special)) + "\"";
    }
  }
  return out + "]}\n";
}

bool read_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return !in.bad();
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  CLI::App app{"Print the token ids of a text, as the model's tokenizer encodes it.", "ferry tokenize"};
  std::string model, prompt, file, lines;
  bool json = false, no_bos = false, no_parse_special = false, escape = false, pieces = false, timing = false,
       vocab = false;
  app.add_option("-m,--model", model, "GGUF model file")->required();
  app.add_option("-p,--prompt", prompt, "text to tokenize");
  app.add_option("-f,--file", file, "file whose whole content is tokenized");
  app.add_option("--lines", lines,
                 "tokenize each line of this file (escapes \\n \\t \\r \\\\ \\xNN); one JSON array per line");
  app.add_flag("--json", json, "print the ids as one JSON array");
  app.add_flag("--no-bos", no_bos, "do not add BOS/EOS even when the vocabulary asks for them");
  app.add_flag("--no-parse-special", no_parse_special, "treat special-token text (e.g. <|im_start|>) as plain text");
  app.add_flag("-e,--escape", escape, "process escapes (\\n \\t \\r \\\\ \\xNN) in --prompt");
  app.add_flag("--pieces", pieces, "print one line per token: id and its text");
  app.add_flag("--timing", timing, "print load and tokenize times to stderr");
  app.add_flag("--dump-vocab", vocab, "print every token's text (hex), the special ids and the EOG set as JSON");
  int rc = 0;
  if (!ferry::cli::parse(app, argc, argv, &rc)) return rc;

  const int n_inputs = !app.get_option("--prompt")->empty() + !file.empty() + !lines.empty() + vocab;
  if (n_inputs != 1)
    return ferry::cli::usage_error("give exactly one of -p TEXT, -f FILE, --lines FILE or --dump-vocab");
  if (json && pieces) return ferry::cli::usage_error("--json and --pieces do not go together");

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto mf = ferry::gguf::ModelFile::open(model);
  if (!mf) return ferry::cli::report(mf.status());
  auto tok = ferry::text::Tokenizer::from_gguf(**mf);
  if (!tok) return ferry::cli::report(tok.status());
  const auto t1 = Clock::now();
  const ferry::text::Tokenizer& t = **tok;
  const bool add_special = !no_bos;
  const bool parse_special = !no_parse_special;

  std::string out;
  size_t n_tokens = 0;
  if (vocab) {
    out = dump_vocab(t);
  } else if (!lines.empty()) {
    std::string content;
    if (!read_file(lines, &content)) return ferry::cli::fail("cannot read " + lines);
    size_t line_no = 0;
    for (size_t pos = 0; pos < content.size();) {
      size_t nl = content.find('\n', pos);
      if (nl == std::string::npos) nl = content.size();
      ++line_no;
      auto text = unescape(content.substr(pos, nl - pos));
      if (!text) return ferry::cli::fail(lines + ":" + std::to_string(line_no) + ": " + text.status().message());
      const auto ids = t.encode(*text, add_special, parse_special);
      n_tokens += ids.size();
      out += json_ids(ids);
      out += '\n';
      pos = nl + 1;
    }
  } else {
    std::string text;
    if (!file.empty()) {
      if (!read_file(file, &text)) return ferry::cli::fail("cannot read " + file);
    } else if (escape) {
      auto un = unescape(prompt);
      if (!un) return ferry::cli::usage_error("--prompt: " + un.status().message());
      text = std::move(*un);
    } else {
      text = prompt;
    }
    const auto ids = t.encode(text, add_special, parse_special);
    n_tokens = ids.size();
    if (json) {
      out = json_ids(ids) + "\n";
    } else if (pieces) {
      for (auto id : ids) out += std::to_string(id) + " " + quote_piece(t.token_to_piece(id, true)) + "\n";
    } else {
      for (size_t i = 0; i < ids.size(); ++i) out += (i ? " " : "") + std::to_string(ids[i]);
      out += "\n";
    }
  }
  const auto t2 = Clock::now();
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (timing) {
    const auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    std::fprintf(stderr, "load %.1f ms, tokenize %.1f ms (%zu tokens)\n", ms(t0, t1), ms(t1, t2), n_tokens);
  }
  return 0;
}
