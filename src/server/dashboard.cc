#include "server/dashboard.h"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "core/error.h"
#include "core/file_io.h"
#include "core/log.h"
#include "engine/deploy.h"
#include "server/connections.h"
#include "server/dataset_job.h"
#include "server/http.h"
#include "server/slurm.h"

namespace bks::server {

namespace fs = std::filesystem;

namespace {

bool loopback(const std::string& host) { return host == "127.0.0.1" || host == "localhost" || host == "::1"; }

std::string random_token() {
  std::random_device rd;
  std::string t;
  for (int i = 0; i < 32; ++i) t += "0123456789abcdef"[rd() % 16];
  return t;
}

// Equal strings, in time that does not depend on where they differ.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned diff = a.size() != b.size();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

int serve(ServeOptions o) {
  if (o.port < 0 || o.port > 65535) input_error("--port must be between 0 and 65535, got {}", o.port);
  if (o.max_viewers < 1 || o.max_viewers > 100000)
    input_error("--max-viewers must be between 1 and 100000, got {}", o.max_viewers);
  if (!loopback(o.host) && o.token.empty()) o.token = random_token();
  std::error_code ec;
  fs::create_directories(fs::path(o.data_dir) / "imports", ec);
  if (ec) input_error("{}: cannot create the data directory ({})", o.data_dir, ec.message());
  o.data_dir = fs::canonical(o.data_dir).string();
  // What packing children killed mid-write left (training runs clean their own at start).
  for (const auto& d : fs::directory_iterator(fs::path(o.data_dir) / "datasets", ec))
    if (d.is_directory(ec)) remove_stale_temporaries(d.path().string());
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ServerConfig cfg;
  cfg.data_dir = o.data_dir;
  cfg.binary = o.binary;
  cfg.slots = o.slots > 0 ? o.slots : std::max(1, cores / 2);
  cfg.threads_per_job = o.threads > 0 ? o.threads : std::max(1, cores / cfg.slots);
  if (o.scheduler != "local" && o.scheduler != "slurm")
    input_error("--scheduler must be local or slurm, got '{}'", o.scheduler);
  cfg.slurm = o.scheduler == "slurm";
  if (cfg.slurm) slurm::check_cluster();  // before anything listens: a cluster that is not there is said now

  // SIGINT / SIGTERM are taken by a thread (below), not by whichever thread they hit.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  Store store((fs::path(o.data_dir) / "bakusoku.db").string());
  std::vector<std::string> roots{(fs::path(o.data_dir) / "imports").string()};
  for (const auto& r : o.import_roots) roots.push_back(r);
  Scheduler scheduler(store, cfg,
                      [&](const json& job, const std::string& job_dir, const std::function<void(double)>& progress,
                          const std::atomic<bool>& cancelled) {
                        auto d = store.get("datasets", job.at("dataset_id").get<int64_t>());
                        if (!d) throw InputError("its dataset was deleted");
                        // In a child: a dataset file that crashes its reader must not take the server down.
                        const std::string out =
                            (fs::path(o.data_dir) / "datasets" / std::to_string((*d)["id"].get<int64_t>())).string();
                        pack_in_child({cfg.binary, (*d)["spec"], out, roots, job_dir}, progress, cancelled);
                      });
  Classifier classifier;
  Context ctx{store, scheduler, classifier, roots, o.data_dir, static_cast<uintmax_t>(o.max_uploads_mb) << 20};

  httplib::Server http;
  ServerConnections connections(http, o.max_viewers);  // workers, keep-alive, socket options
  http.set_payload_max_length(16 << 20);
  const std::string token = o.token;
  http.set_pre_routing_handler([token](const httplib::Request& req, httplib::Response& res) {
    if (req.path.rfind("/api/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    // Before the token: a request from another site is refused even when it carries one.
    if (auto refusal = cross_site_refusal(req, !token.empty())) {
      reply_error(res, *refusal);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (token.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string given = req.get_param_value("token");
    std::string auth = req.get_header_value("Authorization");
    if (auth.rfind("Bearer ", 0) == 0) given = auth.substr(7);
    if (same_secret(given, token)) return httplib::Server::HandlerResponse::Unhandled;
    reply(res, 401, {{"error", "this server needs its token: 'Authorization: Bearer TOKEN' or ?token=TOKEN"}});
    return httplib::Server::HandlerResponse::Handled;
  });
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const char* why = res.status == 404   ? "no such resource"
                      : res.status == 413 ? "the request is larger than 16 MB"
                      : res.status == 405 ? "method not allowed"
                                          : "bad request";
    json err{{"error", fmt::format("{} {}: {}", req.method, req.path, why)}};
    // An upload too large names what was uploaded.
    if (res.status == 413)
      err["field"] =
          req.path == "/api/weights"                             ? "weights"
          : req.path.find("/classify_many") != std::string::npos ? "images"
          : req.path.find("/classify") != std::string::npos || req.path.find("/visualize") != std::string::npos
              ? "image"
              : "body";
    reply(res, res.status, err);
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    reply(res, 500, {{"error", "internal error: " + what}});
  });
  add_static_routes(http);
  add_dataset_routes(http, ctx);
  add_model_routes(http, ctx);
  add_job_routes(http, ctx);
  add_event_routes(http, ctx, o.max_viewers);
  add_classify_routes(http, ctx);
  add_sample_routes(http, ctx);
  add_optimize_routes(http, ctx);
  add_deploy_routes(http, ctx);
  add_upload_routes(http, ctx);
  // What deploy can build here: BF16 needs AVX-512 BF16 or AMX (the page offers what is listed).
  const json precisions = cpu_has_bf16() ? json{"fp32", "bf16", "int8"} : json{"fp32", "int8"};
  http.Get("/api/status", [&](const httplib::Request&, httplib::Response& res) {
    handle(res, [&] {
      return json{
          {"version", BKS_VERSION},   {"slots", cfg.slots},      {"threads_per_job", cfg.threads_per_job},
          {"data_dir", o.data_dir},   {"import_roots", roots},   {"resources", {{"cpu_slots", cfg.slots}, {"gpus", 0}}},
          {"scheduler", o.scheduler}, {"precisions", precisions}};
    });
  });

  int port = o.port;
  if (port == 0) {
    port = http.bind_to_any_port(o.host);
    if (port < 0) input_error("cannot listen on {}", o.host);
  } else if (!http.bind_to_port(o.host, port)) {
    input_error("cannot listen on {}:{} (in use, or not an address of this machine)", o.host, port);
  }
  if (!connections.raise_backlog())
    log::warn("bakusoku serve: cannot raise the listen backlog; bursts of connections may wait");
  std::string url =
      fmt::format("http://{}:{}/", o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host, port);
  fmt::print("bakusoku serve: {}{}\n", url, o.token.empty() ? "" : "?token=" + o.token);
  if (cfg.slurm)
    fmt::print("  data: {}  (training jobs go to Slurm with sbatch, {} CPU(s) each)\n", o.data_dir,
               cfg.threads_per_job);
  else
    fmt::print("  data: {}  ({} job slot(s), {} thread(s) each)\n", o.data_dir, cfg.slots, cfg.threads_per_job);
  if (!o.token.empty()) fmt::print("  every API call needs the token: {}\n", o.token);
  std::fflush(stdout);

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    http.stop();
  });
  http.listen_after_bind();
  if (waiter.joinable()) {
    // listen returned without a signal (an error): wake the waiter so it can end.
    pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();
  }
  fmt::print("bakusoku serve: stopping; running jobs snapshot and stop\n");
  return 0;
}

}  // namespace bks::server
