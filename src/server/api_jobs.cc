// /api/jobs: the queue (list, show with progress and log), abort / resume / clone / delete,
// metrics, and downloads of each job's prototxt and snapshots.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "core/error.h"
#include "server/http.h"
#include "server/process.h"

namespace bks::server {

namespace fs = std::filesystem;

namespace {

int64_t job_id(const httplib::Request& req) {
  try {
    return std::stoll(req.matches[1].str());
  } catch (const std::exception&) {
    throw ApiError(404, "", "no such job");
  }
}

// Runs a scheduler call on job `id` that row() found. A second request may delete the job
// in between (the scheduler then throws InputError "no job"): that is a 404 like any
// missing job; other refusals (the job's state does not allow it) are 409.
json on_existing_job(Context& c, int64_t id, const std::function<json()>& change) {
  try {
    return change();
  } catch (const InputError& e) {
    if (!c.store.get("jobs", id)) throw ApiError(404, "", fmt::format("no job {}", id));
    throw ApiError(409, "", e.what());
  }
}

// Every record of a metrics file; lines that are not JSON objects (a run killed mid-write)
// are skipped.
json read_metrics(const fs::path& file) {
  json out = json::array();
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    json j = parse_bounded_json(line);
    if (!j.is_discarded() && j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

namespace {

// A training run's last train and test records, and its test record of best accuracy.
struct LastRecords {
  json train, test, best_test;
};

// Folds one metrics record into `r`.
void take_record(LastRecords& r, json rec) {
  if (rec.value("phase", "") != "test") {
    r.train = std::move(rec);
    return;
  }
  const auto it = rec.find("accuracy");
  if (it != rec.end() && it->is_number() &&
      (r.best_test.is_null() || it->get<double>() > r.best_test["accuracy"].get<double>()))
    r.best_test = rec;
  r.test = std::move(rec);
}

// The metrics file as last seen: its inode, size and time (equal stamps, equal records).
struct Stamp {
  ino_t inode = 0;
  off_t size = -1;
  time_t sec = 0;
  long nsec = 0;
  bool operator==(const Stamp&) const = default;
};
std::optional<Stamp> stamp_of(const fs::path& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return std::nullopt;
  return Stamp{st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
}

// Job pages and the jobs list poll every second or two: a metrics file is read once, then
// only what was appended since (a resume rewrites the file, a new inode, and it is read
// again from the start).
class LastRecordsCache {
 public:
  LastRecords get(const fs::path& file) {
    const std::optional<Stamp> stamp = stamp_of(file);
    if (!stamp) return {};
    std::lock_guard lock(mu_);
    Entry& e = entries_[file.string()];
    if (e.stamp == *stamp) return e.records;
    if (e.stamp.inode != stamp->inode || stamp->size < e.offset) e = Entry{};
    std::ifstream in(file, std::ios::binary);
    in.seekg(e.offset);
    for (std::string line; std::getline(in, line);) {
      if (in.eof()) break;  // no newline yet: the trainer is still writing it
      e.offset += static_cast<off_t>(line.size()) + 1;
      json r = parse_bounded_json(line);
      if (!r.is_discarded() && r.is_object()) take_record(e.records, std::move(r));
    }
    e.stamp = *stamp;
    return e.records;
  }

 private:
  struct Entry {
    Stamp stamp;
    off_t offset = 0;  // bytes of whole lines read
    LastRecords records;
  };
  std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;  // one per job ever shown
};

LastRecordsCache& last_records_cache() {
  static LastRecordsCache cache;
  return cache;
}

}  // namespace

fs::path metrics_file(Context& c, int64_t job) { return fs::path(c.scheduler.job_dir(job)) / "run" / "metrics.jsonl"; }

json describe_job(Context& c, json job, bool full) {
  const fs::path dir = c.scheduler.job_dir(job["id"]);
  if (job.value("kind", "") == "train") {
    LastRecords last = last_records_cache().get(metrics_file(c, job["id"]));
    if (!last.train.is_null()) {
      // A record without a numeric iteration (a child writing garbage) gives no progress
      // rather than a type error.
      const double max_iter = job.value("max_iter", 0.0);
      if (max_iter > 0 && last.train.contains("iter") && last.train["iter"].is_number())
        job["progress"] = std::min(1.0, last.train["iter"].get<double>() / max_iter);
      job["last_train"] = std::move(last.train);
    }
    if (!last.test.is_null()) job["last_test"] = std::move(last.test);
    if (!last.best_test.is_null()) job["best_test"] = std::move(last.best_test);
    if (full) {
      json snaps = json::array();
      for (auto& [iter, path] : snapshot_files((dir / "run").string(), "safetensors")) {
        std::error_code ec;  // a snapshot the trainer just replaced: left out, not a 500
        const auto bytes = fs::file_size(path, ec);
        if (!ec) snaps.push_back({{"iter", iter}, {"bytes", bytes}});
      }
      job["snapshots"] = snaps;
    }
  }
  if (job.value("kind", "") == "optimize" && job.value("state", "") == "running" && job.contains("started")) {
    // The search starts no candidate after its budget: time spent against it (an upper bound
    // on the work left; the search may end sooner).
    const double budget = 60 * job["spec"].value("budget_minutes", 15.0);
    job["progress"] = std::clamp((now_seconds() - job.value("started", 0.0)) / budget, 0.0, 0.99);
  }
  if (full && job.value("state", "") == "running")
    job["log_tail"] = last_lines(tail_file((dir / "output.txt").string(), 8192), 20);
  return job;
}

void send_file(httplib::Response& res, const fs::path& p, const std::string& type, const std::string& download_name) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw ApiError(404, "", "no file " + p.filename().string());
  res.set_content(std::string(std::istreambuf_iterator<char>(in), {}), type);
  if (!download_name.empty()) res.set_header("Content-Disposition", "attachment; filename=\"" + download_name + "\"");
}

namespace {

// GET /api/jobs, which every open jobs page polls: its body (about 1 KB per job) is sent
// again as it is until a job changes in the store or a running job's metrics file changes;
// serializing it per request made a hundred jobs cost a millisecond each time.
class JobListCache {
 public:
  std::string body(Context& c) {
    std::lock_guard lock(mu_);
    if (c.store.version("jobs") == version_ && running_stamps(c, running_) == stamps_) return body_;
    std::vector<json> jobs = c.store.list("jobs", &version_);
    running_.clear();
    for (const json& j : jobs)
      if (j.value("state", "") == "running") running_.push_back(j["id"]);
    stamps_ = running_stamps(c, running_);  // before reading: a later change rebuilds again
    json out = json::array();
    for (json& j : jobs) {
      j.erase("log_tail");  // most of a finished job's document; the job's own page shows it
      out.push_back(describe_job(c, std::move(j), false));
    }
    body_ = out.dump(-1, ' ', false, json::error_handler_t::replace);
    return body_;
  }

 private:
  static std::vector<std::optional<Stamp>> running_stamps(Context& c, const std::vector<int64_t>& ids) {
    std::vector<std::optional<Stamp>> out;
    for (int64_t id : ids) out.push_back(stamp_of(metrics_file(c, id)));
    return out;
  }
  std::mutex mu_;
  uint64_t version_ = UINT64_MAX;  // of the store's jobs when body_ was made
  std::vector<int64_t> running_;   // jobs running then: only their metrics change
  std::vector<std::optional<Stamp>> stamps_;
  std::string body_;
};

}  // namespace

void add_job_routes(httplib::Server& s, Context& c) {
  s.Get("/api/jobs", [&c, cache = std::make_shared<JobListCache>()](const httplib::Request&, httplib::Response& res) {
    handle_raw(res, [&] { res.set_content(cache->body(c), "application/json"); });
  });
  s.Get(R"(/api/jobs/(\d+))", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(res, [&] { return describe_job(c, row(c, "jobs", req), true); });
  });
  // State changes the scheduler refuses (InputError: not in a state that allows it): 409.
  for (auto [verb, change] : {std::pair{"abort", &Scheduler::abort}, std::pair{"resume", &Scheduler::resume}})
    s.Post(std::string(R"(/api/jobs/(\d+)/)") + verb,
           [&c, change = change](const httplib::Request& req, httplib::Response& res) {
             handle(res, [&] {
               row(c, "jobs", req);
               const int64_t id = job_id(req);
               return on_existing_job(c, id, [&] { return (c.scheduler.*change)(id); });
             });
           });
  s.Post(R"(/api/jobs/(\d+)/clone)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(
        res,
        [&] {
          json j = row(c, "jobs", req);
          if (j.value("kind", "") != "train") throw ApiError(409, "", "only training jobs can be cloned");
          const int64_t id = job_id(req);
          return on_existing_job(c, id, [&] { return c.scheduler.clone(id); });
        },
        201);
  });
  s.Delete(R"(/api/jobs/(\d+))", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(res, [&] {
      json j = row(c, "jobs", req);
      if (j.value("kind", "") == "dataset")
        throw ApiError(409, "", "this job packs a dataset; delete the dataset instead");
      const int64_t id = job_id(req);
      on_existing_job(c, id, [&] {
        c.scheduler.remove(id);
        return json();
      });
      return json{{"deleted", id}};
    });
  });
  s.Get(R"(/api/jobs/(\d+)/metrics)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(res, [&] {
      row(c, "jobs", req);
      return read_metrics(metrics_file(c, job_id(req)));
    });
  });
  s.Get(R"(/api/jobs/(\d+)/log)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(res, [&] {
      row(c, "jobs", req);
      std::string text = tail_file((fs::path(c.scheduler.job_dir(job_id(req))) / "output.txt").string(), 65536);
      return json{{"lines", last_lines(text, 500)}};
    });
  });
  s.Get(R"(/api/jobs/(\d+)/files/(net|solver)\.prototxt)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle_raw(res, [&] {
      json j = row(c, "jobs", req);
      std::string f = req.matches[2].str() + ".prototxt";
      send_file(res, fs::path(c.scheduler.job_dir(job_id(req))) / f, "text/plain",
                fmt::format("job{}_{}", job_id(req), f));
    });
  });
  s.Get(R"(/api/jobs/(\d+)/snapshots/(\d+)\.safetensors)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle_raw(res, [&] {
      row(c, "jobs", req);
      std::string iter = req.matches[2];
      fs::path p = fs::path(c.scheduler.job_dir(job_id(req))) / "run" / "snapshots" / ("iter_" + iter + ".safetensors");
      send_file(res, p, "application/octet-stream", fmt::format("job{}_iter_{}.safetensors", job_id(req), iter));
    });
  });
}

}  // namespace bks::server
