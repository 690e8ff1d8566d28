// ferry chat: a conversation with a model in the terminal. Each line is a user turn; the reply streams as
// it is generated, with the whole history in the model's chat format. Ctrl-C stops a reply (not the
// program), /reset forgets the history, /exit or end of input quits. Runs through the same library as
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
#include "hybrid_support.h"
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
  ferry::cli::HybridArgs hybrid;
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
ferry::Expected<std::string> reply(ferry::serve::Session& s, const std::vector<ferry::text::ChatMessage>& history,
                                   const ChatArgs& a) {
  ferry::text::ChatRequest req;
  req.messages = history;
  req.add_generation_prompt = true;
  FERRY_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, s.chat_prompt(std::move(req)));
  ferry::serve::GenerationParams g;
  g.max_tokens = a.n_predict;
  g.sampling = a.sampling;
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<ferry::serve::Request> r, s.scheduler().submit(std::move(prompt), g));
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

  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a read waiting for input returns EINTR
  sigaction(SIGINT, &sa, nullptr);

  const bool tty = ::isatty(STDIN_FILENO) != 0;
  std::fprintf(stderr, "ferry chat: %s (%s). /reset forgets the conversation, /exit or Ctrl-D quits, Ctrl-C stops a reply.\n",
               a.model.c_str(), s.chat().origin().c_str());
  std::vector<ferry::text::ChatMessage> history;
  auto reset = [&] {
    history.clear();
    if (!a.system.empty()) history.push_back({"system", a.system});
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
    if (line[0] == '/') {
      std::fprintf(stderr, "unknown command %s (/reset, /exit)\n", line.c_str());
      continue;
    }
    history.push_back({"user", line});
    auto text = reply(s, history, a);
    if (!text) {
      std::fprintf(stderr, "error: %s\n", text.status().message().c_str());
      history.pop_back();  // the turn that did not fit (or failed) is not kept
      continue;
    }
    history.push_back({"assistant", *text});
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
  ferry::cli::add_hybrid_options(app, &a.hybrid, false);
  int code = 0;
  if (!ferry::cli::parse(app, argc, argv, &code)) return code;
  try {
    return chat(a);
  } catch (const std::exception& e) {
    return ferry::cli::fail(std::string("unexpected failure: ") + e.what());
  }
}
