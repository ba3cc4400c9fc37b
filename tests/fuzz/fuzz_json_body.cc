// A JSON request body as the dashboard's API reads it (server/http.cc body_object), then
// every validator that needs no database, in-process: the dataset spec (POST
// /api/datasets), the solver settings with each sweep job's solver text (POST
// /api/models), a fine-tune's per-layer learning-rate multipliers written into a standard
// network (POST /api/models lr_mult), the learning-rate schedule preview (POST
// /api/lr_schedule) and the prototxt editor's check (POST /api/models/validate).
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "fuzz_util.h"
#include "server/datasets.h"
#include "server/fine_tune.h"
#include "server/http.h"
#include "server/models.h"
#include "train/lr_policy.h"

namespace {

using bks::server::ApiError;
using bks::server::json;

// The import root the seeds name (a fixed path, as JSON bodies carry absolute paths),
// holding an IDX images file and an image folder. Shared by concurrent runs: only created.
const std::vector<std::string>& import_roots() {
  static const std::vector<std::string> roots = [] {
    const std::string root = "/tmp/bks-fuzz-imports";
    std::filesystem::create_directories(root + "/folder/0");
    if (!std::filesystem::exists(root + "/train-images-idx3-ubyte"))
      std::ofstream(root + "/train-images-idx3-ubyte", std::ios::binary) << std::string(16, '\0');
    return std::vector<std::string>{root};
  }();
  return roots;
}

bks::server::DatasetView fake_dataset() {
  bks::server::DatasetView d;
  d.dir = bks::fuzz::scratch_dir();
  d.shape = {1, 28, 28};
  d.classes = 10;
  d.train_count = 1000;
  d.val_count = 100;
  return d;
}

void models_and_schedule(const json& body) {
  json solver_body = body.value("solver", json::object());
  if (!solver_body.is_object()) throw ApiError(400, "solver", "'solver' must be an object");
  const json solver = bks::server::validate_solver(solver_body);
  const auto lrs = solver["base_lr"].get<std::vector<double>>();
  const auto batches = solver["batch_size"].get<std::vector<double>>();
  for (double lr : lrs)
    for (double b : batches) (void)bks::server::solver_text(solver, lr, static_cast<int64_t>(b), fake_dataset());
  const int64_t ipe = body.contains("iterations_per_epoch")
                          ? bks::server::integer_field(body, "iterations_per_epoch", 1, 100000000, 0)
                          : bks::server::iterations_per_epoch(static_cast<int64_t>(batches[0]), fake_dataset());
  const bks::proto::SolverParameter p = bks::server::solver_parameter(solver, lrs[0], ipe);
  try {
    bks::check_lr_policy(p, "solver");
  } catch (const std::exception& e) {
    throw ApiError(400, "lr_policy", e.what());
  }
  const int64_t n = std::min<int64_t>(199, p.max_iter());
  for (int64_t i = 0; i <= n; ++i) (void)bks::learning_rate(p, n == 0 ? 0 : static_cast<int64_t>(p.max_iter()) * i / n);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bks;
  httplib::Request req;
  req.set_header("Content-Type", "application/json");  // what the dashboard sends
  req.body.assign(reinterpret_cast<const char*>(data), size);
  json body;
  bool is_object = false;
  fuzz::expect_input_errors([&] {
    body = server::body_object(req);
    is_object = true;
  });
  if (!is_object) return 0;
  fuzz::expect_input_errors([&] { server::validate_dataset_spec(body, import_roots()); });
  fuzz::expect_input_errors([&] { models_and_schedule(body); });
  fuzz::expect_input_errors([&] {
    const json mults = server::lr_mult_field(body);
    if (!mults.empty()) (void)server::with_lr_mults(server::standard_network("lenet", fake_dataset(), 64), mults);
  });
  fuzz::expect_input_errors([&] {
    std::string text = server::string_field(body, "prototxt", false, 1 << 20);
    if (!text.empty()) (void)server::validate_prototxt(text, {1, 28, 28});
  });
  return 0;
}
