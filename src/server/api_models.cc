// /api/models: a network (standard or custom prototxt) on a dataset with solver settings;
// creating one queues a training job per sweep combination (base_lr x batch_size).
// /api/lr_schedule: the learning rate such a model's solver gives, for the form's preview.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "server/fine_tune.h"
#include "server/graph_svg.h"
#include "server/http.h"
#include "server/job_files.h"
#include "server/models.h"
#include "train/lr_policy.h"

namespace bks::server {

namespace fs = std::filesystem;

namespace {

json with_jobs(Context& c, json m) {
  json jobs = json::array();
  for (const json& j : c.store.list("jobs"))
    if (j.value("model_id", int64_t{-1}) == m["id"].get<int64_t>()) jobs.push_back(describe_job(c, j, false));
  m["jobs"] = jobs;
  return m;
}

std::string number(double x) { return fmt::format("{}", x); }

constexpr int64_t kSchedulePoints = 200;  // at most, from iteration 0 to max_iter
constexpr int64_t kMaxProcesses = 64;     // ranks of one job (mpirun on this machine)

// The learning rate of the solver a model request describes (its first base_lr and
// batch_size), at up to kSchedulePoints iterations evenly spread over max_iter, computed by
// learning_rate() as training does. Iterations per epoch: given, or from the dataset.
json lr_schedule(Context& c, const json& body) {
  json solver_body = body.value("solver", json::object());
  if (!solver_body.is_object()) throw ApiError(400, "solver", "'solver' must be an object");
  const json solver = validate_solver(solver_body);
  const auto has = [&](const char* k) { return body.contains(k) && !body[k].is_null(); };
  if (has("dataset_id") && has("iterations_per_epoch"))
    throw ApiError(400, "iterations_per_epoch", "give 'dataset_id' or 'iterations_per_epoch', not both");
  int64_t ipe = 0;
  if (has("iterations_per_epoch")) {
    ipe = integer_field(body, "iterations_per_epoch", 1, 100000000, 0);
  } else if (has("dataset_id")) {
    DatasetView d = dataset_view(c, integer_field(body, "dataset_id", 1, INT64_MAX, 0), "dataset_id");
    ipe = iterations_per_epoch(static_cast<int64_t>(solver["batch_size"][0].get<double>()), d);
  } else {
    throw ApiError(400, "dataset_id", "'dataset_id' (or 'iterations_per_epoch') is required");
  }
  const proto::SolverParameter p = solver_parameter(solver, solver["base_lr"][0].get<double>(), ipe);
  try {
    check_lr_policy(p, "solver");
  } catch (const std::exception& e) {
    throw ApiError(400, "lr_policy", e.what());
  }
  const int64_t max_iter = p.max_iter(), n = std::min(kSchedulePoints - 1, max_iter);
  json points = json::array();
  for (int64_t i = 0; i <= n; ++i) {
    const int64_t it =
        n == 0 ? 0 : std::llround(static_cast<double>(max_iter) * static_cast<double>(i) / static_cast<double>(n));
    const float lr = learning_rate(p, it);
    // The float's shortest decimal form (0.001, not 0.0010000000474974513); null when it
    // overflows (exp with gamma > 1).
    json y = std::isfinite(lr) ? json(std::stod(fmt::format("{}", lr))) : json(nullptr);
    points.push_back({{"epoch", static_cast<double>(it) / static_cast<double>(ipe)}, {"iter", it}, {"lr", y}});
  }
  return json{{"iterations_per_epoch", ipe}, {"max_iter", max_iter}, {"points", points}};
}

}  // namespace

void add_model_routes(httplib::Server& s, Context& c) {
  s.Get("/api/networks", [](const httplib::Request&, httplib::Response& res) {
    handle(res, [] {
      return json::array({{{"name", "lenet"},
                           {"title", "LeNet"},
                           {"about", "Caffe's LeNet: two convolutions, two inner products"},
                           {"reads", "images"}},
                          {{"name", "cifar10_quick"},
                           {"title", "CIFAR-10 quick"},
                           {"about", "Caffe's cifar10_quick: three 5x5 convolutions"},
                           {"reads", "images"}},
                          {{"name", "resnet"},
                           {"title", "Small ResNet"},
                           {"about", "Three residual stages (16, 32, 64 channels) with BatchNorm"},
                           {"reads", "images"}},
                          {{"name", "char_rnn"},
                           {"title", "char-RNN"},
                           {"about", "Two LSTM layers of 256 over characters (examples/char_rnn), for text datasets"},
                           {"reads", "text"}},
                          {{"name", "custom"},
                           {"title", "Custom"},
                           {"about", "Your own layers reading 'data' and 'label' (text: 'chars', 'cont' and 'next')"},
                           {"reads", "any"}}});
    });
  });
  // A standard network's layers, for the editor to start a custom network from.
  s.Get(R"(/api/networks/([a-z0-9_]+))", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(res, [&] {
      const std::string name = req.matches[1].str();
      if (name == "custom") throw ApiError(404, "", "'custom' is the editor's own text");
      const std::string text = req.get_param_value("dataset_id");
      int64_t id = 0;
      const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), id);
      if (text.empty() || err != std::errc() || end != text.data() + text.size() || id < 1)
        throw ApiError(400, "dataset_id", "'dataset_id' must be a dataset's number");
      const DatasetView d = dataset_view(c, id, "dataset_id");
      try {
        return json{{"name", name}, {"prototxt", standard_layers(name, d)}};
      } catch (const ApiError& e) {
        throw ApiError(e.status == 400 && e.field == "network" ? 404 : e.status, e.field, e.what());
      }
    });
  });
  s.Post("/api/models/validate", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(res, [&] {
      json body = body_object(req);
      std::string text = string_field(body, "prototxt", true, 1 << 20);
      Validation v = body.contains("dataset_id")
                         ? validate_prototxt(
                               text, dataset_view(c, integer_field(body, "dataset_id", 1, INT64_MAX, 0), "dataset_id"))
                         : validate_prototxt(text, std::vector<int64_t>{1, 28, 28});
      json out{{"ok", v.ok}};
      if (!v.ok) {
        out["error"] = v.error;
        if (v.line > 0) out["line"] = v.line;
        if (v.column > 0) out["column"] = v.column;
      }
      return out;
    });
  });
  s.Post("/api/lr_schedule", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(res, [&] { return lr_schedule(c, body_object(req)); });
  });
  s.Post("/api/models", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(
        res,
        [&] {
          json body = body_object(req);
          std::string name = string_field(body, "name", true, 100);
          std::string network = string_field(body, "network", true, 20);
          int64_t dataset_id = integer_field(body, "dataset_id", 1, INT64_MAX, 0);
          if (!body.contains("dataset_id")) throw ApiError(400, "dataset_id", "'dataset_id' is required");
          DatasetView d = dataset_view(c, dataset_id, "dataset_id");
          json solver_body = body.value("solver", json::object());
          if (!solver_body.is_object()) throw ApiError(400, "solver", "'solver' must be an object");
          json solver = validate_solver(solver_body);
          // Data-parallel ranks (mpirun on this machine); the batch size is all ranks' together.
          const int64_t processes = integer_field(body, "processes", 1, kMaxProcesses, 1);
          for (double b : solver["batch_size"].get<std::vector<double>>())
            if (static_cast<int64_t>(b) % processes != 0)
              throw ApiError(400, "processes",
                             fmt::format("batch size {} does not divide among {} processes; pick a batch size that "
                                         "is a multiple of the processes",
                                         number(b), processes));
          if (d.text)  // each stream reads kTextSeqLen characters and the one after
            for (double b : solver["batch_size"].get<std::vector<double>>())
              if (static_cast<int64_t>(b) * kTextSeqLen + 1 > d.train_count)
                throw ApiError(400, "batch_size",
                               fmt::format("batch size {} needs {} characters of training text ({} streams of {}); "
                                           "this dataset has {}",
                                           number(b), static_cast<int64_t>(b) * kTextSeqLen + 1, number(b), kTextSeqLen,
                                           d.train_count));
          // Fine-tuning: every job starts from that snapshot (a link to it in its directory).
          std::string init;
          if (body.contains("weights_from")) init = fine_tune_weights(c, body["weights_from"], c.import_roots);
          const json lr_mult = lr_mult_field(body);
          std::string custom;
          if (network == "custom")
            custom = string_field(body, "prototxt", true, 1 << 20);
          else
            standard_network(network, d, 1);  // checks the name
          json m{{"name", name},
                 {"network", network},
                 {"dataset_id", dataset_id},
                 {"solver", solver},
                 {"created", now_seconds()}};
          if (!custom.empty()) m["prototxt"] = custom;
          if (!init.empty()) m["weights_from"] = body["weights_from"];
          if (!lr_mult.empty()) m["lr_mult"] = lr_mult;
          // Every network text first: a custom one that fails to build fails the request
          // before anything is stored.
          struct Planned {
            double lr;
            int64_t batch;
            std::string net, solver;
          };
          std::vector<Planned> plan;
          const auto lrs = solver["base_lr"].get<std::vector<double>>();
          const auto batches = solver["batch_size"].get<std::vector<double>>();
          for (double lr : lrs)
            for (double b : batches) {
              auto batch = static_cast<int64_t>(b);
              plan.push_back({lr, batch,
                              with_lr_mults(custom.empty() ? standard_network(network, d, batch)
                                                           : custom_network(custom, d, batch),
                                            lr_mult),
                              solver_text(solver, lr, batch, d)});
            }
          if (custom.empty()) check_builds(plan.front().net, "network");  // e.g. images too small for it
          const int64_t id = c.store.insert("models", m);
          const bool sweep = plan.size() > 1;
          for (const auto& p : plan) {
            json job{{"kind", "train"},
                     {"name", sweep ? fmt::format("{} lr={} bs={}", name, number(p.lr), p.batch) : name},
                     {"model_id", id},
                     {"dataset_id", dataset_id},
                     {"group", name},
                     {"params", {{"base_lr", p.lr}, {"batch_size", p.batch}}},
                     {"iterations_per_epoch", iterations_per_epoch(p.batch, d)},
                     {"keep_snapshots", solver["keep_snapshots"]},
                     {"processes", processes},
                     {"max_iter", std::max<int64_t>(1, std::llround(solver["epochs"].get<double>() *
                                                                    iterations_per_epoch(p.batch, d)))},
                     {"files", {{"net.prototxt", p.net}, {"solver.prototxt", p.solver}}}};
            if (init.empty()) {
              c.scheduler.submit(job);
              continue;
            }
            job["weights_from"] = m["weights_from"];
            job["init_weights"] = fine_tune_file_name(init);
            c.scheduler.submit(job, [&init](const std::string& dir) {
              link_or_copy(init, fs::path(dir) / fine_tune_file_name(init));
            });
          }
          return with_jobs(c, m);
        },
        201);
  });
  s.Get("/api/models", [&c](const httplib::Request&, httplib::Response& res) {
    handle(res, [&] {
      json out = json::array();
      for (json& m : c.store.list("models")) out.push_back(with_jobs(c, m));
      return out;
    });
  });
  s.Get(R"(/api/models/(\d+))", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(res, [&] { return with_jobs(c, row(c, "models", req)); });
  });
  s.Get(R"(/api/models/(\d+)/graph\.svg)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle_raw(res, [&] {
      json m = with_jobs(c, row(c, "models", req));
      if (m["jobs"].empty()) throw ApiError(409, "", "this model has no job (and so no network file) left");
      std::string file = c.scheduler.job_dir(m["jobs"][0]["id"]) + "/net.prototxt";
      res.set_content(network_svg(file), "image/svg+xml");
    });
  });
  s.Delete(R"(/api/models/(\d+))", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(res, [&] {
      json m = with_jobs(c, row(c, "models", req));
      for (const json& j : m["jobs"]) {
        try {
          c.scheduler.remove(j["id"]);
        } catch (const InputError&) {
          // Already gone: a second DELETE of this model (or of the job) got there first.
        }
      }
      const int64_t id = m["id"];
      if (!c.store.remove("models", id)) throw ApiError(404, "", fmt::format("no model {}", id));
      return json{{"deleted", id}};
    });
  });
}

}  // namespace bks::server
