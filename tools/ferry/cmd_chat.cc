// ferry chat: a conversation with a model in the terminal. Each line is a user turn; the reply streams as
// it is generated, with the whole history in the model's chat format. Ctrl-C stops a reply (not the
// program), /reset forgets the history, /exit or end of input quits. With --mmproj (a vision-language
// model), /image PATH encodes an image and puts it in front of the next turn's text; the history keeps
// the images' embeddings, so later turns reuse them (and the scheduler their rows in the cache). Runs through the same library as
// the server (serve::Session: the scheduler with one sequence). Model messages go to stderr; stdout gets
// the replies (and the "> " prompt when stdin is a terminal).
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "engine/multimodal.h"
#include "hybrid_support.h"
#include "image/image.h"
#include "serve/session.h"

namespace {

volatile sig_atomic_t g_interrupted = 0;

void on_sigint(int) { g_interrupted = 1; }

struct ChatArgs {
  std::string model;
  std::string system;
  int32_t n_predict = -1;
  ferry::engine::SamplerParams sampling;
  int32_t threads = 0;
  int32_t ctx = 4096;
  std::string device = "cpu";
  std::string mmproj;
  ferry::cli::HybridArgs hybrid;
};

// The conversation: its messages, and the images of its user turns in order (images_in[i] of them with
// message i).
struct History {
  std::vector<ferry::text::ChatMessage> messages;
  std::vector<size_t> images_in;
  std::vector<ferry::engine::EncodedImage> images;
  void push(ferry::text::ChatMessage m, std::vector<ferry::engine::EncodedImage> imgs) {
    messages.push_back(std::move(m));
    images_in.push_back(imgs.size());
    for (auto& i : imgs) images.push_back(std::move(i));
  }
  void pop() {
    images.resize(images.size() - images_in.back());
    images_in.pop_back();
    messages.pop_back();
  }
};

// Lines from stdin through read(2), so Ctrl-C (SIGINT without SA_RESTART) interrupts a wait for input.
class LineReader {
 public:
  enum Result { kLine, kEof, kInterrupted };
  Result next(std::string* line) {
    line->clear();
    for (;;) {
      const size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        line->assign(buf_, 0, nl);
        buf_.erase(0, nl + 1);
        if (!line->empty() && line->back() == '\r') line->pop_back();
        return kLine;
      }
      char chunk[4096];
      const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof(chunk));
      if (n < 0 && errno == EINTR) return kInterrupted;
      if (n <= 0) {
        if (buf_.empty()) return kEof;
        line->swap(buf_);  // a last line without a newline
        return kLine;
      }
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  std::string buf_;
};

// Generates the assistant's reply to `history`, streaming it to stdout; Ctrl-C cancels it. Returns the
// text shown (the reply so far when stopped), or an error for a conversation the model cannot take.
ferry::Expected<std::string> reply(ferry::serve::Session& s, const History& history, const ChatArgs& a) {
  ferry::text::ChatRequest req;
  req.messages = history.messages;
  req.add_generation_prompt = true;
  ferry::serve::GenerationParams g;
  g.max_tokens = a.n_predict;
  g.sampling = a.sampling;
  std::shared_ptr<ferry::serve::Request> r;
  if (history.images.empty()) {
    FERRY_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, s.chat_prompt(std::move(req)));
    FERRY_ASSIGN_OR_RETURN(r, s.scheduler().submit(std::move(prompt), g));
  } else {
    FERRY_ASSIGN_OR_RETURN(ferry::serve::PromptInput prompt, s.chat_prompt(std::move(req), history.images));
    FERRY_ASSIGN_OR_RETURN(r, s.scheduler().submit_prompt(std::move(prompt), g));
  }
  g_interrupted = 0;
  std::string text;
  ferry::serve::RequestUpdate u;
  while (!u.finished) {
    if (g_interrupted) r->cancel();
    const size_t shown = u.text.size();
    if (!r->wait(&u, std::chrono::milliseconds(50))) continue;
    std::fwrite(u.text.data() + shown, 1, u.text.size() - shown, stdout);
    std::fflush(stdout);
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (u.reason == ferry::serve::FinishReason::kCancelled) std::fprintf(stderr, "[stopped]\n");
  if (u.reason == ferry::serve::FinishReason::kError) return u.error;
  if (u.reason == ferry::serve::FinishReason::kLength && a.n_predict < 0)
    std::fprintf(stderr, "[the conversation filled the context of %d tokens: /reset to start over]\n",
                 s.scheduler().ctx_per_request());
  return u.text;
}

int chat(const ChatArgs& a) {
  ferry::serve::SessionOptions so;
  so.open.model_path = a.model;
  so.open.n_ctx = a.ctx;
  so.open.n_threads = a.threads;
  so.open.device = a.device;
  so.scheduler.n_parallel = 1;
  so.scheduler.queue_size = 1;
  if (ferry::Status hs = ferry::cli::fill_open_options(a.hybrid, &so.open); !hs.is_ok()) return ferry::cli::report(hs);
  auto session = ferry::serve::Session::open(so);
  if (!session) return ferry::cli::report(session.status());
  ferry::serve::Session& s = **session;
  if (!s.chat().can_chat()) return ferry::cli::fail("ferry chat: " + s.chat().origin());
  if (!a.mmproj.empty())
    if (ferry::Status vs = s.open_vision(a.mmproj); !vs.is_ok()) return ferry::cli::report(vs);

  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a read waiting for input returns EINTR
  sigaction(SIGINT, &sa, nullptr);

  const bool tty = ::isatty(STDIN_FILENO) != 0;
  std::fprintf(stderr, "ferry chat: %s (%s). /reset forgets the conversation, %s/exit or Ctrl-D quits, Ctrl-C stops a reply.\n",
               a.model.c_str(), s.chat().origin().c_str(), s.has_vision() ? "/image PATH adds an image, " : "");
  History history;
  std::vector<ferry::engine::EncodedImage> pending;  // /image: for the next user turn
  auto reset = [&] {
    history = History{};
    pending.clear();
    if (!a.system.empty()) history.push({"system", a.system}, {});
  };
  reset();
  LineReader in;
  std::string line;
  for (;;) {
    if (tty) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    const LineReader::Result got = in.next(&line);
    if (got == LineReader::kEof) break;
    if (got == LineReader::kInterrupted) {
      std::fprintf(stderr, "\n(Ctrl-C stops a reply; /exit or Ctrl-D quits)\n");
      continue;
    }
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      reset();
      std::fprintf(stderr, "[conversation cleared]\n");
      continue;
    }
    if (line.rfind("/image", 0) == 0 && (line.size() == 6 || line[6] == ' ')) {
      const std::string path = line.size() > 7 ? line.substr(7) : std::string();
      if (!s.has_vision()) {
        std::fprintf(stderr, "error: /image needs a vision-language model and its projector (--mmproj)\n");
      } else if (path.empty()) {
        std::fprintf(stderr, "usage: /image PATH (JPEG or PNG)\n");
      } else if (auto img = ferry::image::decode_file(path); !img) {
        std::fprintf(stderr, "error: %s\n", img.status().message().c_str());
      } else if (auto enc = s.encode_image(*img); !enc) {
        std::fprintf(stderr, "error: %s\n", enc.status().message().c_str());
      } else {
        std::fprintf(stderr, "[image %s: %d x %d -> %d tokens, encoded in %.0f ms on %s; it goes with your next message]\n",
                     path.c_str(), img->width, img->height, enc->n_tokens(), enc->encode_ms, enc->device.c_str());
        if (!enc->note.empty()) std::fprintf(stderr, "note: %s\n", enc->note.c_str());
        pending.push_back(std::move(*enc));
      }
      continue;
    }
    if (line[0] == '/') {
      std::fprintf(stderr, "unknown command %s (/reset, /exit%s)\n", line.c_str(), s.has_vision() ? ", /image PATH" : "");
      continue;
    }
    std::string content;
    for (size_t i = 0; i < pending.size(); ++i) content += ferry::engine::kImageMarker;
    content += line;
    history.push({"user", content}, std::move(pending));
    pending.clear();
    auto text = reply(s, history, a);
    if (!text) {
      std::fprintf(stderr, "error: %s\n", text.status().message().c_str());
      history.pop();  // the turn that did not fit (or failed) is not kept, nor its images
      continue;
    }
    history.push({"assistant", *text}, {});
  }
  return 0;
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  ChatArgs a;
  a.sampling.temp = 0.7f;
  CLI::App app{"Chat with a model in the terminal: /reset, /exit, Ctrl-C stops a reply.", "ferry chat"};
  app.add_option("-m,--model", a.model, "GGUF model file")->required();
  app.add_option("--system", a.system, "system message at the start of the conversation");
  app.add_option("-n,--n-predict", a.n_predict, "most tokens per reply (-1: until the model ends it)")
      ->check(CLI::Range(-1, INT32_MAX));
  const CLI::Validator finite = ferry::cli::finite_number();
  app.add_option("--temp", a.sampling.temp, "temperature (0: greedy)")->check(finite)->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--top-k", a.sampling.top_k, "top-k (<= 0: off)")->capture_default_str();
  app.add_option("--top-p", a.sampling.top_p, "top-p (>= 1: off)")->check(finite)->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  app.add_option("--min-p", a.sampling.min_p, "min-p (0: off)")->check(finite)->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  app.add_option("-s,--seed", a.sampling.seed, "sampling seed")->capture_default_str();
  app.add_option("-t,--threads", a.threads, "CPU threads (0: physical cores)")->check(CLI::Range(0, 4096));
  app.add_option("-c,--ctx-size", a.ctx, "context in tokens for the whole conversation (0: the model's)")
      ->check(CLI::Range(0, INT32_MAX))->capture_default_str();
  app.add_option("--device", a.device, "where to compute")
      ->check(CLI::IsMember({"cpu", "ref", "ref-exact", "cuda", "emulated"}))->capture_default_str();
  app.add_option("--mmproj", a.mmproj,
                 "vision-language models: the multimodal projector GGUF (vision tower); /image PATH then adds images");
  ferry::cli::add_hybrid_options(app, &a.hybrid, false);
  int code = 0;
  if (!ferry::cli::parse(app, argc, argv, &code)) return code;
  try {
    return chat(a);
  } catch (const std::exception& e) {
    return ferry::cli::fail(std::string("unexpected failure: ") + e.what());
  }
}
