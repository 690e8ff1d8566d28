// ferry serve (the ferry-serve binary): an OpenAI-compatible HTTP server over one model. It binds first,
// answers /health with 503 while the model loads, then serves until SIGINT / SIGTERM. stderr gets one line
// when it listens and one when it is ready (tests and scripts wait for "ready"); requests are not logged
// (GET /metrics counts them).
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "cli.h"
#include "hybrid_support.h"
#include "serve/http_server.h"
#include "serve/session.h"
#include "text/tokenizer.h"

namespace {

struct ServeArgs {
  std::string model;
  std::string alias;
  std::string host = "127.0.0.1";
  int port = 8080;
  int32_t parallel = 4;
  int32_t ctx = 4096;
  int32_t ctx_per_request = 0;
  int32_t queue = 64;
  int32_t threads = 0;
  int32_t batch = 0;
  std::string device = "cpu";
  std::string api_key;
  std::string mmproj;
  std::string chat_template_file;
  std::string test_forced_reply;
  ferry::cli::HybridArgs hybrid;
};

// The file name without folders and ".gguf": the model's id when --alias does not give one.
std::string model_id(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  const std::string ext = ".gguf";
  if (name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0)
    name.resize(name.size() - ext.size());
  return name;
}

int serve(const ServeArgs& a) {
  // A model path that cannot be read is one error line, before the server says it is listening.
  struct stat st {};
  if (::stat(a.model.c_str(), &st) != 0 || S_ISDIR(st.st_mode) || ::access(a.model.c_str(), R_OK) != 0)
    return ferry::cli::fail("cannot read model file '" + a.model + "'" +
                            (S_ISDIR(st.st_mode) ? ": it is a folder" : ": " + std::string(std::strerror(errno))));
  // SIGINT / SIGTERM go to one thread that stops the server (blocked here, before any thread starts, so
  // every thread inherits the mask); a client that vanishes mid-write must not kill the process.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  ferry::serve::HttpOptions ho;
  ho.host = a.host;
  ho.port = a.port;
  ho.api_key = a.api_key;
  // Every running or queued request holds a connection thread; a few more keep /health and /metrics
  // answering (and 429s going out) when all of those are taken.
  ho.threads = a.parallel + a.queue + 8;
  auto server = ferry::serve::HttpServer::bind(ho);
  if (!server) return ferry::cli::report(server.status());
  ferry::serve::HttpServer& http = **server;
  std::thread listener([&http] {
    if (!http.run()) std::fprintf(stderr, "error: the HTTP server stopped listening\n");
  });
  // Stopping: running and queued requests are cancelled (their clients get an error or the end of
  // their stream), then the server stops.
  std::atomic<ferry::serve::Scheduler*> scheduler{nullptr};
  std::thread stopper([&http, &scheduler, stop_signals] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (ferry::serve::Scheduler* s = scheduler.load()) s->shutdown();
    http.stop();
  });
  auto stop_all = [&] {
    pthread_kill(stopper.native_handle(), SIGTERM);
    stopper.join();
    listener.join();
  };
  std::fprintf(stderr, "ferry serve: listening on http://%s:%d (loading %s)\n", a.host.c_str(), http.port(),
               a.model.c_str());

  ferry::serve::SessionOptions so;
  so.open.model_path = a.model;
  so.open.n_ctx = a.ctx;
  so.open.n_threads = a.threads;
  so.open.n_batch = a.batch;
  so.open.device = a.device;
  so.scheduler.n_parallel = a.parallel;
  so.scheduler.ctx_per_request = a.ctx_per_request;
  so.scheduler.queue_size = a.queue;
  if (!a.chat_template_file.empty()) {
    std::ifstream in(a.chat_template_file, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in || text.str().empty()) {
      stop_all();
      return ferry::cli::fail("cannot read chat template file '" + a.chat_template_file + "'");
    }
    so.chat_template = text.str();
  }
  if (ferry::Status hs = ferry::cli::fill_open_options(a.hybrid, &so.open); !hs.is_ok()) {
    stop_all();
    return ferry::cli::report(hs);
  }
  auto session = ferry::serve::Session::open(so);
  if (!session) {
    stop_all();
    if (!a.chat_template_file.empty() && session.status().code() == ferry::ErrorCode::kCorrupt)
      return ferry::cli::fail(a.chat_template_file + ": " + session.status().message());
    return ferry::cli::report(session.status());
  }
  ferry::serve::Session& s = **session;
  if (!a.mmproj.empty()) {
    if (ferry::Status vs = s.open_vision(a.mmproj); !vs.is_ok()) {
      stop_all();
      return ferry::cli::report(vs);
    }
  }
  if (!s.chat().can_chat())
    std::fprintf(stderr, "ferry serve: warning: %s: /v1/chat/completions answers 400, /v1/completions works\n",
                 s.chat().origin().c_str());

  ferry::serve::ServedModel m;
  m.engine = &s.engine();
  m.scheduler = &s.scheduler();
  m.chat = &s.chat();
  m.id = a.alias.empty() ? model_id(a.model) : a.alias;
  if (!a.test_forced_reply.empty()) {
    for (int32_t t : s.engine().tokenizer().encode(a.test_forced_reply, false, true))
      m.test_forced_reply.push_back(t);
  }
  if (s.has_vision()) {
    ferry::serve::Session* sp = &s;
    m.encode_image = [sp](const ferry::image::RgbImage& img) { return sp->encode_image(img); };
  }
  const uint64_t budget = so.open.vram_budget.value_or(0);
  ferry::runtime::Runtime* rt = &s.runtime();
  m.memory = [rt, budget] {
    ferry::serve::MemoryFigures f;
    f.resident_bytes = ferry::serve::resident_bytes();
    f.vram_peak_bytes = rt->vram_peak_process().peak_bytes;
    f.vram_budget_bytes = budget;
    return f;
  };
  scheduler.store(&s.scheduler());
  http.set_model(m);
  std::fprintf(stderr, "ferry serve: ready: %s on %s, %d parallel, %d tokens per request, at http://%s:%d\n",
               m.id.c_str(), s.runtime().device().c_str(), a.parallel, s.scheduler().ctx_per_request(),
               a.host.c_str(), http.port());
  listener.join();
  pthread_kill(stopper.native_handle(), SIGTERM);  // wakes the stopper if the server ended by itself
  stopper.join();
  std::fprintf(stderr, "ferry serve: stopped\n");
  return 0;
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  ServeArgs a;
  CLI::App app{"OpenAI-compatible HTTP server: /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics.",
               "ferry serve"};
  app.add_option("-m,--model", a.model, "GGUF model file")->required();
  app.add_option("--alias", a.alias, "the model's id in the API (default: the file name without .gguf)");
  app.add_option("--host", a.host, "address to listen on (0.0.0.0: every interface)")->capture_default_str();
  app.add_option("--port", a.port, "port to listen on (0: any free port, printed at start)")
      ->check(CLI::Range(0, 65535))->capture_default_str();
  app.add_option("--parallel,--np", a.parallel, "requests generated at once (continuous batching)")
      ->check(CLI::Range(1, 256))->capture_default_str();
  app.add_option("-c,--ctx-size", a.ctx, "KV cache cells shared by all requests (0: the model's training context)")
      ->check(CLI::Range(0, INT32_MAX))->capture_default_str();
  app.add_option("--ctx-per-request", a.ctx_per_request,
                 "most tokens of one request, prompt and reply (default: ctx-size / parallel)")
      ->check(CLI::Range(0, INT32_MAX));
  app.add_option("--queue", a.queue, "requests that may wait for a sequence; more get 429")
      ->check(CLI::Range(0, 100000))->capture_default_str();
  app.add_option("--api-key", a.api_key, "require \"Authorization: Bearer KEY\" on every endpoint but /health");
  app.add_option("--mmproj", a.mmproj,
                 "vision-language models: the multimodal projector GGUF; chat messages may then carry image_url "
                 "parts (data: URLs)");
  app.add_option("-t,--threads", a.threads, "CPU threads (0: physical cores)")->check(CLI::Range(0, 4096));
  app.add_option("-b,--batch-size", a.batch,
                 "most tokens per step (default: 1024 with the whole model on a GPU, else 512)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--device", a.device, "where to compute")
      ->check(CLI::IsMember({"cpu", "ref", "ref-exact", "cuda", "emulated"}))->capture_default_str();
  app.add_option("--chat-template-file", a.chat_template_file,
                 "a Jinja chat template to use instead of the model's (its tool-call format is detected from it)");
  app.add_option("--test-forced-reply", a.test_forced_reply,
                 "for tests: every chat reply is this text's tokens (chosen in place of sampling), then ends")
      ->group("");  // hidden from --help
  ferry::cli::add_hybrid_options(app, &a.hybrid, false);
  int code = 0;
  if (!ferry::cli::parse(app, argc, argv, &code)) return code;
  try {
    return serve(a);
  } catch (const std::exception& e) {
    return ferry::cli::fail(std::string("unexpected failure: ") + e.what());
  }
}
