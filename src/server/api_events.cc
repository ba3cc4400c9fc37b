// Server-Sent Events for one job: each new metrics record ("metric"), the job whenever it
// changes ("job"), its process's CPU use and memory every second while it runs ("usage"),
// then "end". Every watcher has its own reader, so two browsers both see it live.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "server/http.h"
#include "server/process.h"

namespace bks::server {

namespace fs = std::filesystem;

namespace {

struct Watch {
  int64_t id;
  fs::path metrics;
  std::streamoff pos = 0;  // bytes of the metrics file already sent
  std::string last_job;
  uint64_t version = ~0ull;
  double last_usage = 0, last_cpu = -1, last_ping = 0;
};

bool send(httplib::DataSink& sink, const std::string& event, const std::string& data) {
  std::string msg = "event: " + event + "\ndata: " + data + "\n\n";
  return sink.write(msg.data(), msg.size());
}

// New complete lines of the metrics file since the last call.
std::vector<json> new_records(Watch& w) {
  std::vector<json> out;
  std::ifstream in(w.metrics, std::ios::binary);
  if (!in) return out;
  in.seekg(w.pos);
  std::string chunk((std::istreambuf_iterator<char>(in)), {});
  size_t start = 0;
  for (size_t nl = chunk.find('\n'); nl != std::string::npos; nl = chunk.find('\n', start)) {
    json r = json::parse(chunk.substr(start, nl - start), nullptr, false);
    if (!r.is_discarded() && r.is_object()) out.push_back(std::move(r));
    start = nl + 1;
  }
  w.pos += static_cast<std::streamoff>(start);
  return out;
}

}  // namespace

void add_event_routes(httplib::Server& s, Context& c) {
  s.Get(R"(/api/jobs/(\d+)/events)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle_raw(res, [&] {
      json job = row(c, "jobs", req);
      auto w = std::make_shared<Watch>();
      w->id = job["id"];
      w->metrics = fs::path(c.scheduler.job_dir(w->id)) / "run" / "metrics.jsonl";
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider("text/event-stream", [&c, w](size_t, httplib::DataSink& sink) {
        const auto dump = [](const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); };
        uint64_t seen = c.scheduler.version();
        for (const json& r : new_records(*w))
          if (!send(sink, "metric", dump(r))) return false;
        auto job = c.store.get("jobs", w->id);
        if (!job) {
          send(sink, "end", "{\"deleted\":true}");
          sink.done();
          return true;
        }
        std::string text = dump(describe_job(c, *job, false));  // with its progress
        if (text != w->last_job) {
          if (!send(sink, "job", text)) return false;
          w->last_job = text;
        }
        const std::string state = job->value("state", "");
        const double now = now_seconds();
        if (state == "running" && now - w->last_usage >= 1.0) {
          pid_t pid = c.scheduler.pid(w->id);
          double cpu = 0, rss = 0;
          if (pid > 0 && process_usage(pid, cpu, rss)) {
            double percent = w->last_cpu >= 0 ? 100.0 * (cpu - w->last_cpu) / (now - w->last_usage) : 0.0;
            if (!send(sink, "usage", dump({{"time", now}, {"cpu_percent", percent}, {"rss_mb", rss / 1e6}})))
              return false;
            w->last_cpu = cpu;
          }
          w->last_usage = now;
        }
        if (state != "queued" && state != "running") {
          for (const json& r : new_records(*w)) send(sink, "metric", dump(r));  // what the last moment wrote
          send(sink, "end", dump({{"state", state}}));
          sink.done();
          return true;
        }
        if (now - w->last_ping > 15) {  // a comment line keeps proxies from closing the stream
          if (!sink.write(": ping\n\n", 8)) return false;
          w->last_ping = now;
        }
        c.scheduler.wait_for_change(seen, 500);
        return sink.is_writable();
      });
    });
  });
}

}  // namespace bks::server
