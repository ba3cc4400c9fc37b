// /api/jobs: the queue (list, show with progress and log), abort / resume / clone / delete,
// metrics, and downloads of each job's prototxt and snapshots.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

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

json describe_job(Context& c, json job, bool full) {
  const fs::path dir = c.scheduler.job_dir(job["id"]);
  if (job.value("kind", "") == "train") {
    // The last train and test records, from the end of the file.
    std::string tail = tail_file((dir / "run" / "metrics.jsonl").string(), 4096);
    json last_train, last_test;
    for (const auto& line : last_lines(tail, 40)) {
      json r = parse_bounded_json(line);
      if (r.is_discarded() || !r.is_object()) continue;
      (r.value("phase", "") == "test" ? last_test : last_train) = r;
    }
    if (!last_train.is_null()) {
      job["last_train"] = last_train;
      // A record without a numeric iteration (a child writing garbage) gives no progress
      // rather than a type error.
      const double max_iter = job.value("max_iter", 0.0);
      if (max_iter > 0 && last_train.contains("iter") && last_train["iter"].is_number())
        job["progress"] = std::min(1.0, last_train["iter"].get<double>() / max_iter);
    }
    if (!last_test.is_null()) job["last_test"] = last_test;
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
  if (full && job.value("state", "") == "running")
    job["log_tail"] = last_lines(tail_file((dir / "output.txt").string(), 8192), 20);
  return job;
}

namespace {

void send_file(httplib::Response& res, const fs::path& p, const std::string& type, const std::string& download_name) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw ApiError(404, "", "no file " + p.filename().string());
  res.set_content(std::string(std::istreambuf_iterator<char>(in), {}), type);
  res.set_header("Content-Disposition", "attachment; filename=\"" + download_name + "\"");
}

}  // namespace

void add_job_routes(httplib::Server& s, Context& c) {
  s.Get("/api/jobs", [&c](const httplib::Request&, httplib::Response& res) {
    handle(res, [&] {
      json out = json::array();
      for (json& j : c.store.list("jobs")) out.push_back(describe_job(c, j, false));
      return out;
    });
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
      return read_metrics(fs::path(c.scheduler.job_dir(job_id(req))) / "run" / "metrics.jsonl");
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
