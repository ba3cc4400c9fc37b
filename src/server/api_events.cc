// Server-Sent Events for one job: each new metrics record ("metric"), the job whenever it
// changes ("job"), each CPU and memory measurement the scheduler makes while it runs
// ("usage", usage_log.h), then "end". Both files are sent from their start, so a page opened
// late has the whole history. Every watcher has its own reader, so two browsers both see it
// live.
//
// A stream holds one of the server's HTTP workers while it is open (cpp-httplib runs the
// content provider on the connection's thread), so streams have their own budget
// (--max-viewers): the worker pool is sized for that many viewers plus the API, and a viewer
// beyond it gets 503 with Retry-After instead of a worker the API needs.

#include <fmt/format.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>

#include "server/http.h"
#include "server/usage_log.h"

namespace bks::server {

namespace fs = std::filesystem;

namespace {

// The job is described again at least this often even when nothing announced a change.
constexpr double kDescribeEverySeconds = 5.0;

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

// A file of JSON lines that a stream sends as it grows.
struct Tail {
  fs::path file;
  std::streamoff pos = 0;  // bytes of whole lines already sent
};

struct Watch {
  int64_t id;
  Tail metrics, usage;
  std::unique_ptr<Seat> seat;
  std::string last_job, state;
  uint64_t described_version = ~0ull;  // the scheduler's version when the job was last read
  double described_at = 0, last_ping = 0;
};

bool send(httplib::DataSink& sink, const std::string& event, const std::string& data) {
  std::string msg = "event: " + event + "\ndata: " + data + "\n\n";
  return sink.write(msg.data(), msg.size());
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// New complete lines of the file since the last call.
std::vector<json> new_records(Tail& w) {
  std::vector<json> out;
  std::error_code ec;
  const auto size = fs::file_size(w.file, ec);
  if (ec || static_cast<std::streamoff>(size) <= w.pos) return out;  // nothing new: skip opening it
  std::ifstream in(w.file, std::ios::binary);
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
  const std::vector<json> records = new_records(w.metrics);
  for (const json& r : records)
    if (!send(sink, "metric", dump(r))) return false;
  for (const json& u : new_records(w.usage))
    if (!send(sink, "usage", dump(u))) return false;
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
  if (w.state != "queued" && w.state != "running") {
    for (const json& r : new_records(w.metrics)) send(sink, "metric", dump(r));  // what the last moment wrote
    for (const json& u : new_records(w.usage)) send(sink, "usage", dump(u));
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
      w->metrics.file = metrics_file(c, w->id);
      w->usage.file = fs::path(c.scheduler.job_dir(w->id)) / kUsageFile;
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
