// Server-Sent Events for one job: each new metrics record ("metric"), the job whenever it
// changes ("job"), its process's CPU use and memory every second while it runs ("usage"),
// then "end". Every watcher has its own reader, so two browsers both see it live.
//
// A stream holds one of the server's HTTP workers while it is open (cpp-httplib runs the
// content provider on the connection's thread), so streams have their own budget
// (--max-viewers): the worker pool is sized for that many viewers plus the API, and a viewer
// beyond it gets 503 with Retry-After instead of a worker the API needs.
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>

#include "server/http.h"
#include "server/process.h"

namespace bks::server {

namespace fs = std::filesystem;

namespace {

// The job is described again at least this often even when nothing announced a change.
constexpr double kDescribeEverySeconds = 5.0;

// A job's usage, measured once a second for all its viewers: summing a process tree reads
// every process's /proc entries, which hundreds of viewers must not each repeat.
struct TreeUsage {
  double at = 0, cpu = 0, rss = 0;
  int processes = 0;
};

bool shared_tree_usage(pid_t pid, double now, double& cpu, double& rss, int& processes, double& measured_at) {
  static std::mutex mu;
  static std::map<pid_t, TreeUsage> recent;
  std::lock_guard lock(mu);
  for (auto it = recent.begin(); it != recent.end();)  // forget what ended long ago
    it = now - it->second.at > 60 ? recent.erase(it) : std::next(it);
  TreeUsage& u = recent[pid];
  if (now - u.at >= 0.9) {
    if (!process_tree_usage(pid, u.cpu, u.rss, &u.processes)) {
      recent.erase(pid);
      return false;
    }
    u.at = now;
  }
  cpu = u.cpu;
  rss = u.rss;
  processes = u.processes;
  measured_at = u.at;
  return true;
}

struct ViewerBudget {
  explicit ViewerBudget(int max) : max(max) {}
  const int max;
  std::atomic<int> open{0};
};

// One open stream's share of the budget, given back when the stream's state goes.
class Seat {
 public:
  explicit Seat(std::shared_ptr<ViewerBudget> b) : budget_(std::move(b)) {}
  ~Seat() { budget_->open.fetch_sub(1); }
  Seat(const Seat&) = delete;
  Seat& operator=(const Seat&) = delete;

 private:
  std::shared_ptr<ViewerBudget> budget_;
};

std::unique_ptr<Seat> take_seat(const std::shared_ptr<ViewerBudget>& b) {
  int open = b->open.load();
  do {
    if (open >= b->max) return nullptr;
  } while (!b->open.compare_exchange_weak(open, open + 1));
  return std::make_unique<Seat>(b);
}

struct Watch {
  int64_t id;
  fs::path metrics;
  std::unique_ptr<Seat> seat;
  std::streamoff pos = 0;  // bytes of the metrics file already sent
  std::string last_job, state;
  uint64_t described_version = ~0ull;  // the scheduler's version when the job was last read
  double described_at = 0, last_usage = 0, last_cpu = -1, last_cpu_at = 0, last_ping = 0;
};

bool send(httplib::DataSink& sink, const std::string& event, const std::string& data) {
  std::string msg = "event: " + event + "\ndata: " + data + "\n\n";
  return sink.write(msg.data(), msg.size());
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// New complete lines of the metrics file since the last call.
std::vector<json> new_records(Watch& w) {
  std::vector<json> out;
  std::error_code ec;
  const auto size = fs::file_size(w.metrics, ec);
  if (ec || static_cast<std::streamoff>(size) <= w.pos) return out;  // nothing new: skip opening it
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

// One wake of a stream: what is new since the last. False when the viewer has gone.
bool stream_step(Context& c, Watch& w, httplib::DataSink& sink) {
  const uint64_t seen = c.scheduler.version();
  const std::vector<json> records = new_records(w);
  for (const json& r : records)
    if (!send(sink, "metric", dump(r))) return false;
  const double now = now_seconds();
  // The job changes only when the scheduler says so or new records move its progress;
  // reading the store on every wake of every viewer is what hundreds of viewers cannot afford.
  if (!records.empty() || seen != w.described_version || now - w.described_at >= kDescribeEverySeconds) {
    auto job = c.store.get("jobs", w.id);
    if (!job) {
      send(sink, "end", "{\"deleted\":true}");
      sink.done();
      return true;
    }
    w.described_version = seen;
    w.described_at = now;
    w.state = job->value("state", "");
    std::string text = dump(describe_job(c, *job, false));  // with its progress
    if (text != w.last_job) {
      if (!send(sink, "job", text)) return false;
      w.last_job = std::move(text);
    }
  }
  if (w.state == "running" && now - w.last_usage >= 1.0) {
    pid_t pid = c.scheduler.pid(w.id);
    double cpu = 0, rss = 0, at = 0;
    int processes = 0;
    // The whole job: under mpirun, the launcher and every rank.
    if (pid > 0 && shared_tree_usage(pid, now, cpu, rss, processes, at)) {
      // A rank that ended takes its CPU time out of the sum: no negative use.
      const double percent = w.last_cpu >= 0 && at > w.last_cpu_at
                                 ? std::max(0.0, 100.0 * (cpu - w.last_cpu) / (at - w.last_cpu_at))
                                 : 0.0;
      if (!send(sink, "usage",
                dump({{"time", now}, {"cpu_percent", percent}, {"rss_mb", rss / 1e6}, {"processes", processes}})))
        return false;
      w.last_cpu = cpu;
      w.last_cpu_at = at;
    }
    w.last_usage = now;
  }
  if (w.state != "queued" && w.state != "running") {
    for (const json& r : new_records(w)) send(sink, "metric", dump(r));  // what the last moment wrote
    send(sink, "end", dump({{"state", w.state}}));
    sink.done();
    return true;
  }
  if (now - w.last_ping > 15) {  // a comment line keeps proxies from closing the stream
    if (!sink.write(": ping\n\n", 8)) return false;
    w.last_ping = now;
  }
  c.scheduler.wait_for_change(seen, 500);
  return sink.is_writable();
}

}  // namespace

void add_event_routes(httplib::Server& s, Context& c, int max_viewers) {
  auto budget = std::make_shared<ViewerBudget>(max_viewers);
  s.Get(R"(/api/jobs/(\d+)/events)", [&c, budget](const httplib::Request& req, httplib::Response& res) {
    handle_raw(res, [&] {
      json job = row(c, "jobs", req);
      auto w = std::make_shared<Watch>();
      w->seat = take_seat(budget);
      if (!w->seat) {
        res.set_header("Retry-After", "10");
        throw ApiError(503, "",
                       fmt::format("{} live charts are open, the most this server streams at once (bakusoku serve "
                                   "--max-viewers); close one or try again later",
                                   budget->max));
      }
      w->id = job["id"];
      w->metrics = metrics_file(c, w->id);
      res.set_header("Cache-Control", "no-cache");
      // The provider runs after this handler has returned: it needs its own error boundary.
      res.set_chunked_content_provider("text/event-stream", [&c, w](size_t, httplib::DataSink& sink) {
        try {
          return stream_step(c, *w, sink);
        } catch (const std::exception& e) {
          send(sink, "error", dump({{"error", std::string("internal error: ") + e.what()}}));
          return false;
        }
      });
    });
  });
}

}  // namespace bks::server
