// The dashboard's API against a real `bakusoku serve` on loopback: dataset -> model ->
// training job -> metrics -> classification; abort and resume; a server stopped mid-job;
// the token; and every kind of bad input, each with its status code.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sqlite3.h>
#include <stb_image_write.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "cli_util.h"
#include "core/error.h"
#include "engine/deploy.h"
#include "formats/safetensors.h"
#include "serve_process.h"
#include "server/dataset_job.h"
#include "server/images.h"
#include "server/jobs.h"
#include "server/process.h"
#include "server/store.h"
#include "server/task_queue.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* kTrain = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
const char* kTest = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";

// A server with one slot of one thread unless a test asks for more.
class Server : public ::Server {
 public:
  explicit Server(const std::string& data_dir, std::vector<std::string> extra = {})
      : ::Server(data_dir, with_defaults(std::move(extra))) {}

 private:
  static std::vector<std::string> with_defaults(std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--slots", "1", "--threads", "1"});
    return extra;
  }
};

std::string temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("bks_server_" + name);
  fs::remove_all(p);
  return p.string();
}

// A file's text; empty when it is not there (yet).
std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

json call(httplib::Client& c, const std::string& method, const std::string& path, const json& body, int& status) {
  httplib::Result r = method == "GET"      ? c.Get(path)
                      : method == "DELETE" ? c.Delete(path)
                                           : c.Post(path, body.dump(), "application/json");
  if (!r) {
    status = -1;
    return json();
  }
  status = r->status;
  return json::parse(r->body, nullptr, false);
}

json get(httplib::Client& c, const std::string& path) {
  int st = 0;
  json j = call(c, "GET", path, {}, st);
  EXPECT_EQ(st, 200) << path << ": " << j.dump();
  return j;
}

json post(httplib::Client& c, const std::string& path, const json& body, int want = 200) {
  int st = 0;
  json j = call(c, "POST", path, body, st);
  EXPECT_EQ(st, want) << path << ": " << j.dump();
  return j;
}

bool wait_for(const std::function<bool()>& ok, double seconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (ok()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return ok();
}

// Packs Fashion-MNIST (its test set as the validation split) and waits for it.
int64_t fashion_dataset(httplib::Client& c) {
  json d = post(
      c, "/api/datasets",
      {{"name", "fashion"},
       {"source", "idx"},
       {"train_images", kTrain},
       {"test_images", kTest},
       {"class_names",
        {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"}}},
      201);
  int64_t id = d.value("id", int64_t{0});
  EXPECT_TRUE(
      wait_for([&] { return get(c, "/api/datasets/" + std::to_string(id)).value("status", "") == "done"; }, 120));
  return id;
}

// A LeNet model (batch 64) and its job; `processes` > 1: a job of that many ranks.
json model(httplib::Client& c, int64_t dataset, double epochs, double snapshot_epochs, const json& base_lr = 0.01,
           int processes = 1) {
  json body{
      {"name", "lenet"},
      {"network", "lenet"},
      {"dataset_id", dataset},
      {"solver", {{"base_lr", base_lr}, {"epochs", epochs}, {"batch_size", 64}, {"snapshot_epochs", snapshot_epochs}}}};
  if (processes != 1) body["processes"] = processes;
  return post(c, "/api/models", body, 201);
}

std::string job_state(httplib::Client& c, int64_t id) {
  return get(c, "/api/jobs/" + std::to_string(id)).value("state", "");
}

TEST(ServerApi, DatasetModelTrainingMetricsAndClassification) {
  Server s(temp_dir("e2e"));
  auto c = s.client();
  int64_t ds = fashion_dataset(c);
  json d = get(c, "/api/datasets/" + std::to_string(ds));
  EXPECT_EQ(d["info"]["train_count"], 60000);
  EXPECT_EQ(d["info"]["val_count"], 10000);
  EXPECT_EQ(d["info"]["train_per_class"][3], 6000);
  EXPECT_EQ(d["info"]["classes"][9], "Ankle boot");
  // The same files resized to 32x32 colour (the shape CIFAR-style networks expect).
  json big = post(c, "/api/datasets",
                  {{"name", "fashion32"},
                   {"source", "idx"},
                   {"train_images", kTest},
                   {"width", 32},
                   {"height", 32},
                   {"color", "color"},
                   {"val_percent", 20}},
                  201);
  const std::string big_path = "/api/datasets/" + std::to_string(big["id"].get<int64_t>());
  ASSERT_TRUE(wait_for([&] { return get(c, big_path).value("status", "") == "done"; }, 120)) << get(c, big_path).dump();
  json big_info = get(c, big_path)["info"];
  EXPECT_EQ(big_info["shape"], json({3, 32, 32}));
  EXPECT_EQ(big_info["train_count"], 8000);
  EXPECT_EQ(big_info["val_count"], 2000);
  auto thumb = c.Get("/api/datasets/" + std::to_string(ds) + "/images/1_0.png");
  ASSERT_TRUE(thumb);
  EXPECT_EQ(thumb->status, 200);
  EXPECT_EQ(thumb->body.substr(1, 3), "PNG");

  // A sweep of two learning rates: two jobs, run one after the other (one slot).
  json m = model(c, ds, 0.2, 0.1, {0.01, 0.02});
  ASSERT_EQ(m["jobs"].size(), 2u);
  EXPECT_EQ(m["jobs"][0]["name"], "lenet lr=0.01 bs=64");
  for (const json& j : m["jobs"]) {
    int64_t id = j["id"];
    ASSERT_TRUE(wait_for([&] { return job_state(c, id) == "done"; }, 180))
        << get(c, "/api/jobs/" + std::to_string(id)).dump();
    json metrics = get(c, "/api/jobs/" + std::to_string(id) + "/metrics");
    int train = 0, test = 0;
    for (const json& r : metrics) (r["phase"] == "test" ? test : train)++;
    EXPECT_GT(train, 0);
    EXPECT_GE(test, 2);  // at iteration 0 and at the end
    EXPECT_GT(metrics.back().value("accuracy", 0.0), 0.6) << metrics.back().dump();
  }
  const std::string job = "/api/jobs/" + std::to_string(m["jobs"][0]["id"].get<int64_t>());
  json full = get(c, job);
  ASSERT_FALSE(full["snapshots"].empty());
  EXPECT_DOUBLE_EQ(full["progress"].get<double>(), 1.0);

  // Downloads: the prototxt and the snapshot weights (safetensors: length-prefixed JSON).
  auto net = c.Get(job + "/files/net.prototxt");
  ASSERT_TRUE(net);
  EXPECT_NE(net->body.find("InnerProduct"), std::string::npos);
  auto w =
      c.Get(job + "/snapshots/" + std::to_string(full["snapshots"].back()["iter"].get<int64_t>()) + ".safetensors");
  ASSERT_TRUE(w);
  ASSERT_EQ(w->status, 200);
  EXPECT_EQ(w->body[8], '{');

  // Classify: an uploaded image (a Trouser thumbnail), and a validation sample.
  httplib::MultipartFormDataItems form{{"image", thumb->body, "trouser.png", "image/png"}};
  auto r = c.Post(job + "/classify", form);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json top = json::parse(r->body)["top"];
  ASSERT_EQ(top.size(), 5u);
  EXPECT_EQ(top[0]["name"], "Trouser") << top.dump();
  json sample = post(c, job + "/classify", {{"split", "val"}, {"index", 3}});
  EXPECT_EQ(sample["top"].size(), 5u);
  EXPECT_TRUE(sample.contains("label_name"));

  // The whole validation split, one image's layers, the network drawn.
  json ev_split = post(c, job + "/evaluate", {{"split", "val"}});
  EXPECT_EQ(ev_split["count"], 10000);
  EXPECT_GT(ev_split["accuracy"].get<double>(), 0.6);
  ASSERT_EQ(ev_split["confusion"].size(), 10u);
  int64_t cells = 0;
  for (const json& row : ev_split["confusion"])
    for (const json& v : row) cells += v.get<int64_t>();
  EXPECT_EQ(cells, 10000);
  EXPECT_EQ(ev_split["per_class"][1]["name"], "Trouser");
  json viz = post(c, job + "/visualize", {{"split", "val"}, {"index", 0}});
  bool conv_filters = false;
  for (const json& l : viz["layers"])
    if (l["name"] == "conv1") conv_filters = l.contains("weights_image") && l.contains("activation_image");
  EXPECT_TRUE(conv_filters) << viz.dump().substr(0, 400);
  auto svg = c.Get("/api/models/" + std::to_string(m["id"].get<int64_t>()) + "/graph.svg");
  ASSERT_TRUE(svg);
  EXPECT_EQ(svg->status, 200);
  EXPECT_NE(svg->body.find("<svg"), std::string::npos);
  EXPECT_NE(svg->body.find("64×20×24×24"), std::string::npos) << "blob shapes of the TRAIN batch on the arrows";

  // Live events: the stream of a finished job replays its records and ends.
  auto ev = c.Get(job + "/events");
  ASSERT_TRUE(ev);
  EXPECT_NE(ev->body.find("event: metric"), std::string::npos);
  EXPECT_NE(ev->body.find("event: end"), std::string::npos);

  // Clone, then delete the clone with its files.
  json clone = post(c, job + "/clone", json::object(), 201);
  int st = 0;
  call(c, "DELETE", "/api/jobs/" + std::to_string(clone["id"].get<int64_t>()), {}, st);
  EXPECT_EQ(st, 200);
  call(c, "GET", "/api/jobs/" + std::to_string(clone["id"].get<int64_t>()), {}, st);
  EXPECT_EQ(st, 404);
}

// DIGITS' folder layout (root/<label>/*.png), resized and split; a custom network trains
// on it while two watchers follow the same job live.
TEST(ServerApi, ImageFolderDatasetCustomNetworkAndTwoWatchers) {
  std::string dir = temp_dir("folder");
  Server s(dir);
  auto c = s.client();
  for (const char* label : {"dark", "light"}) {
    fs::path d = fs::path(dir) / "imports" / "shapes" / label;
    fs::create_directories(d);
    for (int i = 0; i < 20; ++i) {
      std::vector<uint8_t> px(12 * 10);
      for (size_t k = 0; k < px.size(); ++k)
        px[k] = static_cast<uint8_t>((std::string(label) == "dark" ? 20 : 200) + (k * 7 + i) % 40);
      ASSERT_TRUE(stbi_write_png((d / ("img" + std::to_string(i) + ".png")).c_str(), 12, 10, 1, px.data(), 12));
    }
  }
  std::ofstream(fs::path(dir) / "imports" / "shapes" / "dark" / "notes.txt") << "not an image; ignored";
  json d = post(c, "/api/datasets",
                {{"name", "shapes"},
                 {"source", "folder"},
                 {"root", dir + "/imports/shapes"},
                 {"width", 8},
                 {"height", 8},
                 {"color", "grayscale"},
                 {"val_percent", 25}},
                201);
  const std::string ds = "/api/datasets/" + std::to_string(d["id"].get<int64_t>());
  ASSERT_TRUE(wait_for([&] { return get(c, ds).value("status", "") == "done"; }, 60)) << get(c, ds).dump();
  json info = get(c, ds)["info"];
  EXPECT_EQ(info["classes"], json({"dark", "light"}));
  EXPECT_EQ(info["shape"], json({1, 8, 8}));
  EXPECT_EQ(info["train_count"], 30);
  EXPECT_EQ(info["val_count"], 10);
  EXPECT_EQ(info["val_per_class"], json({5, 5}));

  // LeNet's 5x5 convolutions do not fit 8x8 images: refused, saying why.
  int st = 0;
  json lenet = call(c, "POST", "/api/models", {{"name", "l"}, {"network", "lenet"}, {"dataset_id", d["id"]}}, st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(lenet.value("field", ""), "network");
  EXPECT_NE(lenet.value("error", "").find("does not fit"), std::string::npos) << lenet.dump();

  const char* net =
      "layer { name: 'ip' type: 'InnerProduct' bottom: 'data' top: 'ip' inner_product_param { num_output: 2 "
      "weight_filler { type: 'xavier' } } }\n"
      "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'ip' bottom: 'label' top: 'loss' }\n"
      "layer { name: 'acc' type: 'Accuracy' bottom: 'ip' bottom: 'label' top: 'accuracy' include { phase: TEST } }\n";
  json m = post(c, "/api/models",
                {{"name", "tiny"},
                 {"network", "custom"},
                 {"prototxt", net},
                 {"dataset_id", d["id"]},
                 {"solver", {{"base_lr", 0.05}, {"epochs", 300}, {"batch_size", 10}, {"snapshot_epochs", 50}}}},
                201);
  const std::string job = "/api/jobs/" + std::to_string(m["jobs"][0]["id"].get<int64_t>());
  std::string seen[2];
  std::thread watchers[2];
  for (int k = 0; k < 2; ++k)
    watchers[k] = std::thread([&, k] {
      auto w = s.client();
      w.Get(job + "/events", [&](const char* data, size_t n) {
        seen[k].append(data, n);
        return true;
      });
    });
  for (auto& t : watchers) t.join();
  for (const auto& text : seen) {
    EXPECT_NE(text.find("event: metric"), std::string::npos) << text.substr(0, 300);
    EXPECT_NE(text.find("event: job"), std::string::npos);
    EXPECT_NE(text.find("event: end"), std::string::npos);
  }
  json done = get(c, job);
  EXPECT_EQ(done["state"], "done") << done.dump();
  EXPECT_GT(done["last_test"].value("accuracy", 0.0), 0.9) << done.dump();
}

TEST(ServerApi, AbortThenResumeContinuesFromTheLastSnapshot) {
  std::string dir = temp_dir("abort");
  Server s(dir);
  auto c = s.client();
  int64_t ds = fashion_dataset(c);
  int64_t id = model(c, ds, 20, 0.1)["jobs"][0]["id"];
  const std::string job = "/api/jobs/" + std::to_string(id);
  ASSERT_TRUE(wait_for([&] { return !get(c, job)["snapshots"].empty(); }, 120));
  json a = post(c, job + "/abort", json::object());
  ASSERT_TRUE(wait_for([&] { return job_state(c, id) == "aborted"; }, 60));
  json aborted = get(c, job);
  int64_t last = aborted["snapshots"].back()["iter"];
  EXPECT_NE(aborted.value("reason", "").find("aborted"), std::string::npos);
  EXPECT_GT(aborted.value("run_seconds", 0.0), 0.0);
  json r = post(c, job + "/resume", json::object());
  EXPECT_EQ(r["state"], "queued");
  EXPECT_FALSE(r.contains("finished")) << "the aborted attempt's finish time stays behind";
  ASSERT_EQ(r["resumes"].size(), 1u) << r.dump();
  EXPECT_EQ(r["resumes"][0]["iter"], last) << "where the charts mark the resume";
  ASSERT_TRUE(wait_for([&] { return get(c, job).value("attempts", 0) == 2 && job_state(c, id) == "running"; }, 60));
  // CPU and memory of both attempts, recorded whether or not a page watched.
  const fs::path usage = fs::path(dir) / "jobs" / std::to_string(id) / "usage.jsonl";
  ASSERT_TRUE(wait_for([&] { return read_text(usage).find("\"attempt\":2") != std::string::npos; }, 30));
  EXPECT_NE(read_text(usage).find("\"attempt\":1"), std::string::npos);
  std::ifstream out(fs::path(dir) / "jobs" / std::to_string(id) / "output.txt");
  std::string log((std::istreambuf_iterator<char>(out)), {});
  EXPECT_NE(log.find("--keep-snapshots 5"), std::string::npos) << "the dashboard keeps the newest 5 by default";
  EXPECT_NE(log.find("--snapshot " + (fs::path(dir) / "jobs" / std::to_string(id) / "run" / "snapshots").string() +
                     "/iter_" + std::to_string(last) + ".solverstate"),
            std::string::npos)
      << log;
  // A running job cannot be resumed; a finished one cannot be aborted.
  int st = 0;
  call(c, "POST", job + "/resume", json::object(), st);
  EXPECT_EQ(st, 409);
  post(c, job + "/abort", json::object());
  ASSERT_TRUE(wait_for([&] { return job_state(c, id) == "aborted"; }, 60));
  call(c, "POST", job + "/abort", json::object(), st);
  EXPECT_EQ(st, 409);
}

// Fine-tuning from a job's snapshot (a layer frozen by lr_mult), the solver fields the form
// sets, the records the pages draw (best accuracy, time run, CPU and memory), a standard
// network's layers for the editor, and deploying a job as a bundle with its figures.
TEST(ServerApi, FineTuneDeployAndTheRecordsThePagesDraw) {
  const std::string dir = temp_dir("loop");
  Server s(dir);
  auto c = s.client();
  const int64_t ds = fashion_dataset(c);
  int st = 0;
  const std::string networks = "/api/networks/lenet?dataset_id=" + std::to_string(ds);
  const std::string layers = get(c, networks)["prototxt"];
  EXPECT_NE(layers.find("name: \"conv1\""), std::string::npos);
  EXPECT_EQ(layers.find("\"Data\""), std::string::npos) << "the editor's text has no data layers";
  EXPECT_TRUE(post(c, "/api/models/validate", {{"prototxt", layers}, {"dataset_id", ds}})["ok"]);
  call(c, "GET", "/api/networks/nope?dataset_id=" + std::to_string(ds), {}, st);
  EXPECT_EQ(st, 404);
  EXPECT_EQ(call(c, "GET", "/api/networks/lenet", {}, st).value("field", ""), "dataset_id");
  EXPECT_EQ(st, 400);

  json a =
      post(c, "/api/models",
           {{"name", "source"},
            {"network", "lenet"},
            {"dataset_id", ds},
            {"solver", {{"epochs", 0.3}, {"snapshot_epochs", 0.2}, {"test_epochs", 0.1}, {"display", 5}, {"seed", 7}}}},
           201);
  const int64_t src = a["jobs"][0]["id"];
  const fs::path src_dir = fs::path(dir) / "jobs" / std::to_string(src);
  const std::string solver = read_text(src_dir / "solver.prototxt");
  for (const char* line : {"display: 5\n", "random_seed: 7\n", "test_interval: 94\n"})
    EXPECT_NE(solver.find(line), std::string::npos) << line << " in\n" << solver;
  ASSERT_TRUE(wait_for([&] { return job_state(c, src) == "done"; }, 180));
  json done = get(c, "/api/jobs/" + std::to_string(src));
  double best = -1, at_188 = -1;
  std::vector<int64_t> tested;
  for (const json& r : get(c, "/api/jobs/" + std::to_string(src) + "/metrics"))
    if (r["phase"] == "test") {
      best = std::max(best, r["accuracy"].get<double>());
      tested.push_back(r["iter"]);
      if (r["iter"] == 188) at_188 = r["accuracy"];
    }
  EXPECT_EQ(tested, (std::vector<int64_t>{0, 94, 188})) << "a test every 94 iterations";
  EXPECT_DOUBLE_EQ(done["best_test"]["accuracy"].get<double>(), best);
  EXPECT_GT(done.value("run_seconds", 0.0), 0.0);
  EXPECT_NE(read_text(src_dir / "usage.jsonl").find("\"rss_mb\""), std::string::npos);
  auto events = c.Get("/api/jobs/" + std::to_string(src) + "/events");
  ASSERT_TRUE(events);
  EXPECT_NE(events->body.find("event: usage"), std::string::npos) << "a finished job's stream replays its usage";
  ASSERT_EQ(done["snapshots"].size(), 2u) << done.dump();
  const int64_t last = done["snapshots"].back()["iter"];
  EXPECT_EQ(done["snapshots"][0]["iter"], 188);

  // Fine-tuning: refused requests name the field and leave nothing.
  const std::pair<json, std::string> bad[] = {
      {{{"weights_from", {{"job_id", src}, {"iter", last + 1}}}}, "weights_from"},
      {{{"weights_from", {{"job_id", 999}, {"iter", last}}}}, "weights_from"},
      {{{"weights_from", "job 1"}}, "weights_from"},
      {{{"lr_mult", {{"nope", 0}}}}, "lr_mult"},
      {{{"lr_mult", {{"relu1", 0}}}}, "lr_mult"},
      {{{"lr_mult", {{"conv1", "zero"}}}}, "lr_mult"},
  };
  for (const auto& [extra, field] : bad) {
    json body{{"name", "tuned"}, {"network", "lenet"}, {"dataset_id", ds}};
    body.update(extra);
    json r = call(c, "POST", "/api/models", body, st);
    EXPECT_EQ(st, 400) << body.dump() << " " << r.dump();
    EXPECT_EQ(r.value("field", ""), field) << body.dump() << " " << r.dump();
  }
  EXPECT_EQ(get(c, "/api/models").size(), 1u) << "a refused request leaves no model";
  json b = post(c, "/api/models",
                {{"name", "tuned"},
                 {"network", "lenet"},
                 {"dataset_id", ds},
                 {"solver", {{"epochs", 0.1}, {"snapshot_epochs", 0}}},
                 {"weights_from", {{"job_id", src}, {"iter", 188}}},
                 {"lr_mult", {{"conv1", 0}}}},
                201);
  const int64_t tuned = b["jobs"][0]["id"];
  ASSERT_TRUE(wait_for([&] { return job_state(c, tuned) == "done"; }, 180));
  // A job's first test record (the weights it started from, for a fine-tune).
  const auto first_test_of = [&](int64_t job) {
    for (const json& r : get(c, "/api/jobs/" + std::to_string(job) + "/metrics"))
      if (r["phase"] == "test") return r;
    return json();
  };
  const json first_test = first_test_of(tuned);
  EXPECT_EQ(first_test["iter"], 0);
  EXPECT_NEAR(first_test["accuracy"].get<double>(), at_188, 1e-6)
      << "it starts from the source's weights at iteration 188, which scored that";
  const auto snapshot = [&](int64_t job, int64_t iter) {
    return bks::load_safetensors((fs::path(dir) / "jobs" / std::to_string(job) / "run" / "snapshots" /
                                  ("iter_" + std::to_string(iter) + ".safetensors"))
                                     .string());
  };
  const bks::TensorFile before = snapshot(src, 188),
                        after =
                            snapshot(tuned, get(c, "/api/jobs/" + std::to_string(tuned))["snapshots"].back()["iter"]);
  const auto same = [&](const char* key) {
    const bks::Tensor *x = before.find(key), *y = after.find(key);
    return x && y && x->numel() == y->numel() && std::equal(x->f32(), x->f32() + x->numel(), y->f32());
  };
  EXPECT_TRUE(same("conv1.0")) << "lr_mult 0 froze conv1";
  EXPECT_FALSE(same("ip1.0")) << "the other layers trained";

  // Starting from a weights file uploaded through the page (it lands in the import folder).
  const std::string at188 = read_text(src_dir / "run" / "snapshots" / "iter_188.safetensors");
  auto up = c.Post("/api/weights", httplib::MultipartFormDataItems{{"weights", at188, "my model.safetensors", ""}});
  ASSERT_TRUE(up);
  ASSERT_EQ(up->status, 201) << up->body;
  const std::string uploaded = json::parse(up->body)["path"];
  EXPECT_EQ(uploaded, (fs::path(dir) / "imports" / "uploads" / "my_model.safetensors").string());
  EXPECT_EQ(read_text(uploaded), at188);
  up = c.Post("/api/weights", httplib::MultipartFormDataItems{{"weights", "x", "notes.txt", ""}});
  ASSERT_TRUE(up);
  EXPECT_EQ(up->status, 400);
  EXPECT_EQ(json::parse(up->body).value("field", ""), "weights");
  EXPECT_EQ(call(c, "POST", "/api/models",
                 {{"name", "outside"},
                  {"network", "lenet"},
                  {"dataset_id", ds},
                  {"weights_from", {{"file", (src_dir / "run" / "snapshots" / "iter_188.safetensors").string()}}}},
                 st)
                .value("field", ""),
            "weights_from")
      << "a file outside the import folders";
  json f = post(c, "/api/models",
                {{"name", "from file"},
                 {"network", "lenet"},
                 {"dataset_id", ds},
                 {"solver", {{"epochs", 0.02}, {"snapshot_epochs", 0}}},
                 {"weights_from", {{"file", uploaded}}}},
                201);
  const int64_t from_file = f["jobs"][0]["id"];
  ASSERT_TRUE(wait_for([&] { return job_state(c, from_file) == "done"; }, 180));
  const json first = first_test_of(from_file);
  EXPECT_EQ(first["iter"], 0);
  EXPECT_NEAR(first["accuracy"].get<double>(), at_188, 1e-6) << "it starts from the uploaded weights";

  // Classifying many uploads at once: one that is not an image does not spoil the rest.
  httplib::MultipartFormDataItems items;
  for (const char* f : {"1_0.png", "7_0.png"})
    items.push_back({"images", c.Get("/api/datasets/" + std::to_string(ds) + "/images/" + f)->body, f, "image/png"});
  items.push_back({"images", "not a png", "broken.png", "image/png"});
  auto many = c.Post("/api/jobs/" + std::to_string(src) + "/classify_many", items);
  ASSERT_TRUE(many);
  EXPECT_EQ(many->status, 200) << many->body;
  json m = json::parse(many->body);
  ASSERT_EQ(m["results"].size(), 3u) << m.dump();
  EXPECT_EQ(m["results"][0]["top"][0]["name"], "Trouser");
  EXPECT_EQ(m["results"][1]["top"][0]["name"], "Sneaker");
  EXPECT_NE(m["results"][2].value("error", "").find("PNG or JPEG"), std::string::npos) << m.dump();
  int64_t counted = 0;
  for (const json& k : m["per_class"]) counted += k["count"].get<int64_t>();
  EXPECT_EQ(counted, 2);
  EXPECT_EQ(m["per_class"][1]["best"], json::array({0}));
  // Enough images for batches (two groups: 100, then 31), a broken one among them: each
  // image's top-5 is what it got alone.
  httplib::MultipartFormDataItems lots;
  for (size_t k = 0; k < 131; ++k) lots.push_back(k == 50 ? items[2] : items[k % 2]);
  auto batched = c.Post("/api/jobs/" + std::to_string(src) + "/classify_many", lots);
  ASSERT_TRUE(batched);
  ASSERT_EQ(batched->status, 200) << batched->body;
  const json b131 = json::parse(batched->body)["results"];
  ASSERT_EQ(b131.size(), 131u);
  EXPECT_TRUE(b131[50].contains("error"));
  for (size_t k = 0; k < 131; ++k) {
    if (k == 50) continue;
    const json& alone = m["results"][k % 2]["top"];
    const json& got = b131[k]["top"];
    ASSERT_EQ(got.size(), alone.size()) << k;
    for (size_t r = 0; r < got.size(); ++r) {
      EXPECT_EQ(got[r]["class"], alone[r]["class"]) << "image " << k << ", rank " << r;
      EXPECT_NEAR(got[r]["probability"].get<double>(), alone[r]["probability"].get<double>(), 1e-5) << k;
    }
  }
  httplib::MultipartFormDataItems too_many(1001, {"images", "x", "x.png", "image/png"});
  many = c.Post("/api/jobs/" + std::to_string(src) + "/classify_many", too_many);
  ASSERT_TRUE(many);
  EXPECT_EQ(many->status, 413);
  EXPECT_EQ(json::parse(many->body).value("field", ""), "images");

  // Deploying: a bundle, its figures, its deploy prototxt and labels.
  const std::string sj = "/api/jobs/" + std::to_string(src);
  EXPECT_EQ(call(c, "POST", sj + "/deploy", {{"precision", "fp64"}}, st).value("field", ""), "precision");
  EXPECT_EQ(call(c, "POST", sj + "/deploy", {{"iter", last + 1}}, st).value("field", ""), "iter");
  // BF16 is offered (and accepted) only where the CPU has it.
  const json precisions = get(c, "/api/status")["precisions"];
  EXPECT_EQ(std::find(precisions.begin(), precisions.end(), "bf16") != precisions.end(), bks::cpu_has_bf16())
      << precisions.dump();
  if (!bks::cpu_has_bf16()) {
    EXPECT_EQ(call(c, "POST", sj + "/deploy", {{"precision", "bf16"}}, st).value("field", ""), "precision");
  }
  json dj = post(c, sj + "/deploy", {{"precision", "fp32"}}, 201);
  EXPECT_EQ(dj["kind"], "deploy");
  const std::string d = "/api/jobs/" + std::to_string(dj["id"].get<int64_t>());
  ASSERT_TRUE(wait_for([&] { return job_state(c, dj["id"]) == "done"; }, 180)) << get(c, d).dump();
  json figures = get(c, d + "/deploy/bench.json");
  ASSERT_EQ(figures["results"].size(), 2u) << figures.dump();
  EXPECT_EQ(figures["results"][0]["batch"], 1);
  EXPECT_EQ(figures["results"][1]["batch"], 64);
  EXPECT_GT(figures["results"][0]["latency_ms"]["p99"].get<double>(), 0);
  auto bundle = c.Get(d + "/deploy/model.bks");
  ASSERT_TRUE(bundle);
  EXPECT_EQ(bundle->status, 200);
  EXPECT_GT(bundle->body.size(), 100000u);
  const std::string deploy = c.Get(d + "/deploy/deploy.prototxt")->body;
  EXPECT_NE(deploy.find("type: \"Input\""), std::string::npos) << deploy;
  EXPECT_NE(deploy.find("type: \"Softmax\""), std::string::npos) << deploy;
  EXPECT_EQ(deploy.find("Accuracy"), std::string::npos) << deploy;
  EXPECT_EQ(c.Get(d + "/deploy/labels.txt")->body.substr(0, 20), "T-shirt/top\nTrouser\n");
}

// The bakusoku processes still running a job (its ranks and launcher), found by the
// solver path on their command lines.
int job_processes(const std::string& dir, int64_t id) {
  const std::string solver = (fs::path(dir) / "jobs" / std::to_string(id) / "solver.prototxt").string();
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::ifstream f(e.path() / "cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(f)), {});
    if (cmd.find(solver) != std::string::npos) ++n;
  }
  return n;
}

// A job of 2 processes: mpirun with 2 ranks that split the job's batch, the world size on
// the job and in run.json, usage summed over every process of the job, abort that snapshots
// and stops every rank, and delete that leaves no rank behind.
TEST(ServerApi, JobOfTwoProcessesRunsRanksUnderMpirunAndStopsThemAll) {
  std::string dir = temp_dir("ranks");
  Server s(dir);
  auto c = s.client();
  int64_t ds = fashion_dataset(c);
  // 64 does not divide among 3 processes: refused, naming the field.
  int st = 0;
  json bad = call(
      c, "POST", "/api/models",
      {{"name", "l"}, {"network", "lenet"}, {"dataset_id", ds}, {"processes", 3}, {"solver", {{"batch_size", 64}}}},
      st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(bad.value("field", ""), "processes") << bad.dump();
  for (int n : {0, 65}) {
    call(c, "POST", "/api/models", {{"name", "l"}, {"network", "lenet"}, {"dataset_id", ds}, {"processes", n}}, st);
    EXPECT_EQ(st, 400) << n;
  }
  json m = model(c, ds, 20, 0.06, 0.01, 2);
  const int64_t id = m["jobs"][0]["id"];
  const std::string job = "/api/jobs/" + std::to_string(id);
  EXPECT_EQ(get(c, job).value("processes", 0), 2);

  // The usage stream (one event a second) counts mpirun and both ranks.
  int processes_seen = 0, usage_events = 0;
  auto w = s.client();
  w.Get(job + "/events", [&](const char* data, size_t n) {
    std::string text(data, n);
    auto at = text.find("\"processes\":");
    if (text.find("event: usage") != std::string::npos && at != std::string::npos) {
      processes_seen = std::max(processes_seen, std::atoi(text.c_str() + at + 12));
      ++usage_events;
    }
    return processes_seen < 3 && usage_events < 10;
  });
  EXPECT_GE(processes_seen, 3) << "mpirun and two ranks";

  ASSERT_TRUE(wait_for([&] { return !get(c, job)["snapshots"].empty(); }, 180)) << get(c, job).dump();
  const fs::path jd = fs::path(dir) / "jobs" / std::to_string(id);
  json run = json::parse(std::ifstream(jd / "run" / "run.json"), nullptr, false);
  EXPECT_EQ(run.value("world_size", 0), 2) << run.dump();
  EXPECT_EQ(run.value("global_batch_size", 0), 64) << "the job's batch is both ranks' together";
  EXPECT_EQ(run.value("batch_rule", "").rfind("global", 0), 0u) << run.dump();
  std::ifstream out(jd / "output.txt");
  std::string log((std::istreambuf_iterator<char>(out)), {});
  EXPECT_NE(log.find("--global-batch --ranks 2"), std::string::npos) << log;
  EXPECT_NE(log.find("Running: mpirun -np 2"), std::string::npos) << log;

  // Abort: every rank saves (rank 0 writes) and stops; nothing of the job keeps running.
  post(c, job + "/abort", json::object());
  ASSERT_TRUE(wait_for([&] { return job_state(c, id) == "aborted"; }, 60)) << get(c, job).dump();
  EXPECT_EQ(job_processes(dir, id), 0);
  std::ifstream out2(jd / "output.txt");
  log.assign(std::istreambuf_iterator<char>(out2), {});
  EXPECT_NE(log.find("Interrupted at iteration"), std::string::npos)
      << log.substr(log.size() > 3000 ? log.size() - 3000 : 0);

  // Resumed, then deleted while it runs: no rank is left behind.
  post(c, job + "/resume", json::object());
  ASSERT_TRUE(wait_for([&] { return job_state(c, id) == "running" && job_processes(dir, id) >= 3; }, 60));
  call(c, "DELETE", job, {}, st);
  EXPECT_EQ(st, 200);
  EXPECT_TRUE(wait_for([&] { return job_processes(dir, id) == 0; }, 10)) << "ranks left after delete";
}

// A real single-node Slurm cluster for one test (tests/local_slurm.sh: slurmctld, slurmd
// and munge of its own under `dir`), found by the clients through SLURM_CONF.
class LocalSlurm {
 public:
  explicit LocalSlurm(const std::string& dir) : dir_(dir) {
    auto r = bks::test::run_shell("bash " BKS_SOURCE_DIR "/tests/local_slurm.sh start " + dir + " 2>&1");
    const auto at = r.output.find("export SLURM_CONF=");
    if (r.code != 0 || at == std::string::npos) {
      why_ = r.output;
      failed_ = r.code != 77;  // 77: it cannot run here (not root, not installed)
      return;
    }
    std::string conf = r.output.substr(at + 18);
    conf = conf.substr(0, conf.find('\n'));
    setenv("SLURM_CONF", conf.c_str(), 1);
    up_ = true;
  }
  ~LocalSlurm() {
    if (!up_) return;
    bks::test::run_shell("bash " BKS_SOURCE_DIR "/tests/local_slurm.sh stop " + dir_ + " 2>&1");
    unsetenv("SLURM_CONF");
  }
  bool up() const { return up_; }
  bool failed() const { return failed_; }
  const std::string& why() const { return why_; }
  // squeue's state for a job: "" once it has left the queue.
  static std::string queue_state(const std::string& id) {
    auto r = bks::test::run_shell("squeue -h -j " + id + " -o %T 2>/dev/null");
    return r.output.substr(0, r.output.find('\n'));
  }

 private:
  std::string dir_, why_;
  bool up_ = false, failed_ = false;
};

// `serve --scheduler slurm` against a real Slurm: jobs go in with sbatch as `srun bakusoku
// train` (2 tasks = 2 ranks), their state comes from Slurm, a server restart leaves them
// running and follows them again, and abort is scancel --signal=INT (every rank snapshots).
TEST(ServerSlurm, JobsRunUnderSlurmSurviveAServerRestartAndAbortSnapshots) {
  const std::string root = temp_dir("slurm");
  LocalSlurm slurm(root + "/cluster");
  if (!slurm.up()) {
    if (slurm.failed()) FAIL() << "tests/local_slurm.sh could not start Slurm: " << slurm.why();
    GTEST_SKIP() << "no local Slurm here: " << slurm.why();
  }
  const std::string data = root + "/data";
  int64_t id = 0;
  std::string slurm_id;
  {
    Server s(data, {"--scheduler", "slurm"});
    auto c = s.client();
    EXPECT_EQ(get(c, "/api/status").value("scheduler", ""), "slurm");
    int64_t ds = fashion_dataset(c);
    // A short job of 2 ranks runs to its end.
    json q = model(c, ds, 0.1, 0, 0.01, 2);
    const int64_t quick = q["jobs"][0]["id"];
    const std::string qjob = "/api/jobs/" + std::to_string(quick);
    ASSERT_TRUE(wait_for([&] { return job_state(c, quick) == "done" || job_state(c, quick) == "failed"; }, 180))
        << get(c, qjob).dump();
    json done = get(c, qjob);
    EXPECT_EQ(done.value("state", ""), "done") << done.dump();
    EXPECT_EQ(done.value("slurm_state", ""), "COMPLETED") << done.dump();
    EXPECT_FALSE(done.value("slurm_id", "").empty());
    const fs::path qdir = fs::path(data) / "jobs" / std::to_string(quick);
    json run = json::parse(std::ifstream(qdir / "run" / "run.json"), nullptr, false);
    EXPECT_EQ(run.value("world_size", 0), 2) << "srun started 2 ranks that found each other";
    std::ifstream script(qdir / "job.sbatch");
    std::string text((std::istreambuf_iterator<char>(script)), {});
    EXPECT_NE(text.find("#SBATCH --ntasks=2"), std::string::npos) << text;
    EXPECT_NE(text.find("srun --mpi=pmix"), std::string::npos) << text;

    // A long one, running in Slurm when the server stops.
    json m = model(c, ds, 20, 0.06, 0.01, 2);
    id = m["jobs"][0]["id"];
    ASSERT_TRUE(wait_for(
        [&] {
          json j = get(c, "/api/jobs/" + std::to_string(id));
          return j.value("slurm_state", "") == "RUNNING" && !j["snapshots"].empty();
        },
        180))
        << get(c, "/api/jobs/" + std::to_string(id)).dump();
    slurm_id = get(c, "/api/jobs/" + std::to_string(id)).value("slurm_id", "");
  }
  EXPECT_EQ(LocalSlurm::queue_state(slurm_id), "RUNNING") << "the job runs on without the server";
  Server s(data, {"--scheduler", "slurm"});
  auto c = s.client();
  const std::string job = "/api/jobs/" + std::to_string(id);
  EXPECT_EQ(job_state(c, id), "running") << get(c, job).dump();
  post(c, job + "/abort", json::object());
  ASSERT_TRUE(wait_for([&] { return job_state(c, id) == "aborted"; }, 90)) << get(c, job).dump();
  EXPECT_EQ(LocalSlurm::queue_state(slurm_id), "");
  std::ifstream out(fs::path(data) / "jobs" / std::to_string(id) / "output.txt");
  std::string log((std::istreambuf_iterator<char>(out)), {});
  EXPECT_NE(log.find("Interrupted at iteration"), std::string::npos)
      << log.substr(log.size() > 3000 ? log.size() - 3000 : 0);
  // Resumed: a new Slurm job continues from the snapshot the abort wrote.
  json r = post(c, job + "/resume", json::object());
  EXPECT_NE(r.value("reason", "").find("resumes from"), std::string::npos) << r.dump();
  ASSERT_TRUE(wait_for([&] { return get(c, job).value("slurm_state", "") == "RUNNING"; }, 90)) << get(c, job).dump();
  const std::string second = get(c, job).value("slurm_id", "");
  EXPECT_NE(second, slurm_id);
  // Deleted: Slurm ends it.
  int st = 0;
  call(c, "DELETE", job, {}, st);
  EXPECT_EQ(st, 200);
  EXPECT_TRUE(wait_for([&] { return LocalSlurm::queue_state(second).empty(); }, 30));
}

// A multi-process job holds the slots its ranks need; the rest share one slot's threads.
TEST(ServerScheduler, SlotsForProcesses) {
  bks::server::ServerConfig cfg;
  cfg.slots = 4;
  cfg.threads_per_job = 2;
  EXPECT_EQ(bks::server::slots_for(1, cfg), 1);
  EXPECT_EQ(bks::server::slots_for(2, cfg), 1);
  EXPECT_EQ(bks::server::slots_for(3, cfg), 2);
  EXPECT_EQ(bks::server::slots_for(8, cfg), 4);
  EXPECT_EQ(bks::server::slots_for(64, cfg), 4) << "at most every slot";
}

// The server stopped mid-job (killed outright): on restart the job is failed and
// resumable, and resuming continues from its last snapshot.
// bakusoku optimize from the dashboard: started from a finished training job (refused while
// it trains, and for bad settings, naming the field), run as a job of its own, its report,
// plot and chosen bundle served when it is done; abort stops it and says resume starts again.
TEST(ServerApi, OptimizeATrainedJobServesItsReportPlotAndBundle) {
  const std::string dir = temp_dir("optimize");
  Server s(dir);
  auto c = s.client();
  int64_t ds = fashion_dataset(c);
  const int64_t train = model(c, ds, 0.3, 0)["jobs"][0]["id"];
  const std::string tj = "/api/jobs/" + std::to_string(train);
  int st = 0;
  json r = call(c, "POST", tj + "/optimize", json::object(), st);
  EXPECT_EQ(st, 409) << r.dump();
  EXPECT_NE(r.value("error", "").find("still training"), std::string::npos) << r.dump();
  ASSERT_TRUE(wait_for([&] { return job_state(c, train) == "done"; }, 180)) << get(c, tj).dump();
  const std::pair<json, std::string> bad[] = {
      {{{"objective", "fast"}}, "objective"},
      {{{"max_accuracy_drop", -1}}, "max_accuracy_drop"},
      {{{"budget_minutes", 0}}, "budget_minutes"},
      {{{"allow_training", "yes"}}, "allow_training"},
      {{{"allow_training", true}, {"fine_tune_iterations", 0}}, "fine_tune_iterations"},
  };
  for (const auto& [body, field] : bad) {
    r = call(c, "POST", tj + "/optimize", body, st);
    EXPECT_EQ(st, 400) << body.dump() << " " << r.dump();
    EXPECT_EQ(r.value("field", ""), field) << body.dump() << " " << r.dump();
  }
  for (const json& j : get(c, "/api/jobs")) EXPECT_NE(j["kind"], "optimize") << "a refused request leaves no job";

  json opt =
      post(c, tj + "/optimize", {{"objective", "latency"}, {"max_accuracy_drop", 1}, {"budget_minutes", 0.2}}, 201);
  const int64_t id = opt["id"];
  const std::string oj = "/api/jobs/" + std::to_string(id);
  EXPECT_EQ(opt["kind"], "optimize");
  EXPECT_EQ(opt["source_job"], train);
  EXPECT_EQ(opt["spec"]["max_accuracy_drop"], 1.0);
  call(c, "GET", oj + "/optimize/report.json", {}, st);
  EXPECT_EQ(st, 404) << "no report before the search ends";
  ASSERT_TRUE(wait_for([&] { return job_state(c, id) == "done"; }, 300)) << get(c, oj).dump();
  EXPECT_DOUBLE_EQ(get(c, oj)["progress"].get<double>(), 1.0);
  json report = get(c, oj + "/optimize/report.json");
  ASSERT_GE(report["candidates"].size(), 2u) << report.dump(1);
  EXPECT_EQ(report["candidates"][0]["name"], "unoptimised (fp32)");
  EXPECT_EQ(report["objective"], "latency");
  EXPECT_DOUBLE_EQ(report["max_accuracy_drop"].get<double>(), 1.0);
  ASSERT_TRUE(report["best"].is_number()) << report.dump(1);
  const json& best = report["candidates"][report["best"].get<size_t>()];
  EXPECT_GT(best["accuracy"].get<double>(), 0.6) << best.dump();
  EXPECT_NE(report["summary"].get<std::string>().find("Best latency: " + best["name"].get<std::string>()),
            std::string::npos)
      << report["summary"];
  // The bundle served is the chosen candidate's, and the search ran in the job's directory.
  const std::string bundle = best["bundle"];
  EXPECT_EQ(bundle.rfind((fs::path(dir) / "jobs" / std::to_string(id)).string(), 0), 0u) << bundle;
  auto bks = c.Get(oj + "/optimize/best.bks");
  ASSERT_TRUE(bks);
  EXPECT_EQ(bks->status, 200);
  std::ifstream in(bundle, std::ios::binary);
  EXPECT_EQ(bks->body, std::string(std::istreambuf_iterator<char>(in), {}));
  EXPECT_NE(bks->get_header_value("Content-Disposition").find("job" + std::to_string(id) + "_best.bks"),
            std::string::npos);
  auto svg = c.Get(oj + "/optimize/plot.svg");
  ASSERT_TRUE(svg);
  EXPECT_EQ(svg->status, 200);
  EXPECT_EQ(svg->get_header_value("Content-Type"), "image/svg+xml");
  EXPECT_EQ(svg->body.rfind("<svg", 0), 0u);
  // Only training jobs are optimized; only optimize jobs have reports.
  r = call(c, "POST", oj + "/optimize", json::object(), st);
  EXPECT_EQ(st, 409) << r.dump();
  r = call(c, "GET", tj + "/optimize/report.json", {}, st);
  EXPECT_EQ(st, 404) << r.dump();

  // A long search, aborted while it runs: its process is gone and resume starts it again.
  const int64_t second = post(c, tj + "/optimize", {{"budget_minutes", 30}}, 201)["id"];
  const std::string sj = "/api/jobs/" + std::to_string(second);
  ASSERT_TRUE(wait_for([&] { return get(c, sj).contains("pid"); }, 60)) << get(c, sj).dump();
  const pid_t pid = get(c, sj)["pid"].get<pid_t>();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  post(c, sj + "/abort", json::object());
  ASSERT_TRUE(wait_for([&] { return job_state(c, second) == "aborted"; }, 30)) << get(c, sj).dump();
  EXPECT_EQ(get(c, sj).value("reason", ""), "aborted on request; resume starts the search again");
  EXPECT_NE(kill(pid, 0), 0) << "the search process is gone";
  EXPECT_EQ(post(c, sj + "/resume", json::object())["reason"], "starts the search again");
  call(c, "DELETE", sj, {}, st);
  EXPECT_EQ(st, 200);
  EXPECT_FALSE(fs::exists(fs::path(dir) / "jobs" / std::to_string(second)));
}

TEST(ServerApi, RestartAfterTheServerDiedMidJob) {
  std::string dir = temp_dir("restart");
  int64_t id = 0, last = 0;
  {
    Server s(dir);
    auto c = s.client();
    int64_t ds = fashion_dataset(c);
    id = model(c, ds, 20, 0.1)["jobs"][0]["id"];
    ASSERT_TRUE(wait_for([&] { return !get(c, "/api/jobs/" + std::to_string(id))["snapshots"].empty(); }, 120));
    s.stop(SIGKILL);
  }
  // The trainer saw its parent die (SIGINT): it snapshots and stops.
  fs::path log = fs::path(dir) / "jobs" / std::to_string(id) / "output.txt";
  ASSERT_TRUE(wait_for(
      [&] {
        std::ifstream in(log);
        std::string text((std::istreambuf_iterator<char>(in)), {});
        return text.find("Interrupted at iteration") != std::string::npos;
      },
      30));
  Server s(dir);
  auto c = s.client();
  const std::string job = "/api/jobs/" + std::to_string(id);
  json j = get(c, job);
  EXPECT_EQ(j["state"], "failed");
  EXPECT_NE(j.value("reason", "").find("server stopped"), std::string::npos) << j.dump();
  last = j["snapshots"].back()["iter"];
  post(c, job + "/resume", json::object());
  ASSERT_TRUE(wait_for(
      [&] {
        json now = get(c, job);
        return now.contains("last_train") && now["last_train"]["iter"].get<int64_t>() > last &&
               now["state"] == "running";
      },
      120));
  // The job list, kept between requests, follows the running job's metrics too.
  auto listed = [&] {
    for (json& l : get(c, "/api/jobs"))
      if (l["id"] == id) return l;
    return json::object();
  };
  const json first = listed();
  EXPECT_EQ(first.value("state", ""), "running") << first.dump();
  EXPECT_FALSE(first.contains("log_tail")) << "the list leaves the log out";
  ASSERT_TRUE(first.contains("last_train")) << first.dump();
  EXPECT_TRUE(wait_for([&] { return listed()["last_train"]["iter"] > first["last_train"]["iter"]; }, 60));
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(text.find("Resumed from"), std::string::npos);
  EXPECT_NE(text.find("iter_" + std::to_string(last) + ".solverstate"), std::string::npos);
}

// A valid grey PNG of `w` x `h` black pixels: tens of KB that decode to w * h bytes (a
// decompression bomb when large).
std::string png_of_zeros(uint32_t w, uint32_t h) {
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                       static_cast<char>(v)};
  };
  std::string png = "\x89PNG\r\n\x1a\n";
  auto chunk = [&](const std::string& type, const std::string& data) {
    const std::string body = type + data;
    png += be32(static_cast<uint32_t>(data.size())) + body;
    png += be32(static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(body.data()), body.size())));
  };
  chunk("IHDR", be32(w) + be32(h) + std::string("\x08\x00\x00\x00\x00", 5));  // 8-bit grey
  z_stream z{};
  deflateInit(&z, 9);
  const std::string row(w + 1, '\0');  // filter "none", then the pixels
  std::string idat, out(1 << 16, '\0');
  auto pump = [&](int flush) {
    int rc = Z_OK;
    do {
      z.next_out = reinterpret_cast<Bytef*>(out.data());
      z.avail_out = static_cast<uInt>(out.size());
      rc = deflate(&z, flush);
      idat.append(out.data(), out.size() - z.avail_out);
    } while (z.avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
  };
  for (uint32_t y = 0; y < h; ++y) {
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(row.data()));
    z.avail_in = static_cast<uInt>(row.size());
    pump(Z_NO_FLUSH);
  }
  pump(Z_FINISH);
  deflateEnd(&z);
  chunk("IDAT", idat);
  chunk("IEND", "");
  return png;
}

TEST(ServerApi, EveryBadInputGetsA4xxNamingTheField) {
  std::string dir = temp_dir("bad");
  Server s(dir);
  auto c = s.client();
  struct Case {
    std::string path;
    json body;
    int status;
    std::string field;
  };
  fs::create_directories(fs::path(dir) / "imports");
  std::vector<Case> cases{
      {"/api/datasets", {{"name", 5}, {"source", "idx"}}, 400, "name"},
      {"/api/datasets", {{"name", "x"}, {"source", "lmdb"}}, 400, "source"},
      {"/api/datasets", {{"name", "x"}, {"source", "idx"}, {"train_images", "/etc/passwd"}}, 400, "train_images"},
      {"/api/datasets",
       {{"name", "x"}, {"source", "idx"}, {"train_images", std::string(dir) + "/imports/../bakusoku.db"}},
       400,
       "train_images"},
      {"/api/datasets",
       {{"name", "x"}, {"source", "idx"}, {"train_images", "/usr/share/datasets/../../etc/passwd"}},
       400,
       "train_images"},
      {"/api/datasets",
       {{"name", "x"}, {"source", "idx"}, {"train_images", kTrain}, {"val_percent", 90}},
       400,
       "val_percent"},
      {"/api/datasets",
       {{"name", "x"}, {"source", "folder"}, {"root", std::string(dir) + "/imports"}, {"width", "wide"}},
       400,
       "width"},
      {"/api/datasets",
       {{"name", "x"}, {"source", "folder"}, {"root", std::string(dir) + "/imports"}, {"width", 100000}},
       400,
       "width"},
      {"/api/models", {{"name", "m"}, {"network", "lenet"}, {"dataset_id", 99}}, 400, "dataset_id"},
      {"/api/models", {{"name", "m"}, {"network", "lenet"}}, 400, "dataset_id"},
      {"/api/models/validate", {{"prototxt", 7}}, 400, "prototxt"},
  };
  for (const auto& k : cases) {
    int st = 0;
    json j = call(c, "POST", k.path, k.body, st);
    EXPECT_EQ(st, k.status) << k.body.dump() << " -> " << j.dump();
    EXPECT_EQ(j.value("field", ""), k.field) << k.body.dump() << " -> " << j.dump();
    EXPECT_FALSE(j.value("error", "").empty());
  }
  // Not JSON; unknown ids; unknown routes.
  auto r = c.Post("/api/datasets", "{not json", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  int st = 0;
  for (const char* p : {"/api/jobs/12345", "/api/datasets/12345", "/api/models/12345", "/api/nothing"}) {
    call(c, "GET", p, {}, st);
    EXPECT_EQ(st, 404) << p;
  }
  // A custom network with an error: the validator names the line; the model is refused.
  json v = post(
      c, "/api/models/validate",
      {{"prototxt",
        "layer { name: 'ip' type: 'InnerProduct' bottom: 'data' top: 'ip' inner_product_param { num_output: 10 } }\n"
        "layer { name: 'x' type: 'NoSuchLayer' bottom: 'ip' top: 'x' }\n"}});
  EXPECT_FALSE(v["ok"].get<bool>());
  EXPECT_EQ(v.value("line", 0), 2) << v.dump();
  json p = post(c, "/api/models/validate", {{"prototxt", "layer {\n  name: 'ip' type: InnerProduct }\n"}});
  EXPECT_FALSE(p["ok"].get<bool>());
  EXPECT_EQ(p.value("line", 0), 2) << p.dump();
  // Caffe's V1 format ('layers', enum types) is upgraded as files are: its layers are checked.
  json v1 = post(c, "/api/models/validate",
                 {{"prototxt",
                   "layers { name: 'ip' type: INNER_PRODUCT bottom: 'data' top: 'ip' inner_product_param { num_output: "
                   "10 } }\nlayers { name: 'r' type: RELU bottom: 'nope' top: 'r' }\n"}});
  EXPECT_FALSE(v1["ok"].get<bool>()) << v1.dump();
  EXPECT_EQ(v1.value("line", 0), 2) << v1.dump();
  EXPECT_NE(v1.value("error", std::string()).find("nope"), std::string::npos) << v1.dump();

  int64_t ds = fashion_dataset(c);
  json bad_solver =
      call(c, "POST", "/api/models",
           {{"name", "m"}, {"network", "lenet"}, {"dataset_id", ds}, {"solver", {{"lr_policy", "cosine"}}}}, st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(bad_solver["field"], "lr_policy");
  // A snapshot every iteration filled disks: the interval is bounded.
  json flood =
      call(c, "POST", "/api/models",
           {{"name", "m"}, {"network", "lenet"}, {"dataset_id", ds}, {"solver", {{"snapshot_epochs", 0.0001}}}}, st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(flood["field"], "snapshot_epochs");
  json bad_lr = call(c, "POST", "/api/models",
                     {{"name", "m"}, {"network", "lenet"}, {"dataset_id", ds}, {"solver", {{"base_lr", -1}}}}, st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(bad_lr["field"], "base_lr");
  json bad_net = call(c, "POST", "/api/models",
                      {{"name", "m"},
                       {"network", "custom"},
                       {"dataset_id", ds},
                       {"prototxt", "layer { name: 'a' type: 'Bogus' bottom: 'data' top: 'a' }"}},
                      st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(bad_net["field"], "prototxt");
  // The line once, in words: the form shows no file name.
  EXPECT_EQ(bad_net.value("error", "").rfind("line 1: layer 'a' (Bogus): ", 0), 0u) << bad_net.dump();
  EXPECT_EQ(bad_net.dump().find("custom.prototxt"), std::string::npos) << bad_net.dump();
  EXPECT_TRUE(get(c, "/api/models").empty()) << "a refused model leaves nothing behind";
  // multistep: its steps (epochs) become Caffe's stepvalue (iterations); the schedule preview
  // takes the dataset's iterations per epoch (60000 images / 64 = 938) as the model does.
  json multi = post(c, "/api/models",
                    {{"name", "multi"},
                     {"network", "lenet"},
                     {"dataset_id", ds},
                     {"solver", {{"lr_policy", "multistep"}, {"stepvalue_epochs", {1, 2}}, {"epochs", 3}}}},
                    201);
  auto solver_file =
      c.Get("/api/jobs/" + std::to_string(multi["jobs"][0]["id"].get<int64_t>()) + "/files/solver.prototxt");
  ASSERT_TRUE(solver_file);
  EXPECT_NE(solver_file->body.find("stepvalue: 938\nstepvalue: 1876\n"), std::string::npos) << solver_file->body;
  call(c, "DELETE", "/api/models/" + std::to_string(multi["id"].get<int64_t>()), {}, st);
  EXPECT_EQ(st, 200);
  json by_dataset =
      post(c, "/api/lr_schedule",
           {{"dataset_id", ds}, {"solver", {{"lr_policy", "multistep"}, {"stepvalue_epochs", {1, 2}}, {"epochs", 3}}}});
  EXPECT_EQ(by_dataset.value("iterations_per_epoch", 0), 938) << by_dataset.dump();
  EXPECT_EQ(by_dataset.value("max_iter", 0), 3 * 938) << by_dataset.dump();
  // The other standard networks build on 28x28 grey images (then go, with their jobs).
  for (const char* network : {"cifar10_quick", "resnet"}) {
    json m = post(c, "/api/models", {{"name", network}, {"network", network}, {"dataset_id", ds}}, 201);
    call(c, "DELETE", "/api/models/" + std::to_string(m["id"].get<int64_t>()), {}, st);
    EXPECT_EQ(st, 200) << network;
  }

  // Uploads: not an image; larger than the limit.
  int64_t id = model(c, ds, 0.05, 0)["jobs"][0]["id"];
  const std::string job = "/api/jobs/" + std::to_string(id);
  ASSERT_TRUE(wait_for([&] { return job_state(c, id) == "done"; }, 120));
  httplib::MultipartFormDataItems text{{"image", "just some text", "notes.txt", "text/plain"}};
  r = c.Post(job + "/classify", text);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body).value("field", ""), "image");
  httplib::MultipartFormDataItems huge{{"image", std::string(17 << 20, 'x'), "huge.png", "image/png"}};
  r = c.Post(job + "/classify", huge);
  ASSERT_TRUE(r) << "the server answers an oversized upload";
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(json::parse(r->body, nullptr, false).value("field", ""), "image") << r->body;
  // A small file declaring more pixels than are decoded: refused from its header.
  httplib::MultipartFormDataItems bomb{{"image", png_of_zeros(8200, 8200), "bomb.png", "image/png"}};
  r = c.Post(job + "/classify", bomb);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413) << r->body;
  EXPECT_NE(r->body.find("8200 x 8200 pixels"), std::string::npos) << r->body;
  call(c, "GET", "/api/status", {}, st);
  EXPECT_EQ(st, 200) << "the server is still up";
}

// The learning rate at `iter` in a schedule from /api/lr_schedule (NaN when not sampled).
// The editor shows the text as lines and prints "line N: error": a validation error says
// what is wrong (the layer and the field's path, never protobuf's message types) and gives
// the place in fields of its own, not as a "custom.prototxt:2:5: " prefix.
TEST(ServerApi, ValidationErrorsGiveLineAndColumnApartFromTheMessage) {
  Server s(temp_dir("validate"));
  auto c = s.client();
  const std::string ip = "layer { name: 'ip' type: 'InnerProduct' bottom: 'data' top: 'ip' ";
  const auto validate = [&](const std::string& text) {
    json v = post(c, "/api/models/validate", {{"prototxt", text}});
    EXPECT_FALSE(v.value("ok", true)) << v.dump();
    EXPECT_EQ(v.dump().find("custom.prototxt"), std::string::npos) << v.dump();
    EXPECT_EQ(v.dump().find("bks.proto"), std::string::npos) << v.dump();
    return v;
  };
  json filler = validate(ip + "inner_product_param { num_output: 10 weight_filler { typ: 'x' } } }");
  EXPECT_EQ(filler.value("error", ""),
            "layer 'ip' (InnerProduct): field 'inner_product_param.weight_filler.typ' is not part of BVLC Caffe or "
            "the forks bakusoku supports");
  EXPECT_EQ(filler.value("line", 0), 1) << filler.dump();
  EXPECT_FALSE(filler.contains("column")) << "the field names the place: " << filler.dump();
  const std::string bad_value = ip + "inner_product_param { num_output: x } }";
  json value = validate("# a comment\n" + bad_value);
  EXPECT_EQ(value.value("error", ""),
            "layer 'ip' (InnerProduct): field 'inner_product_param.num_output': expected integer, got: x");
  EXPECT_EQ(value.value("line", 0), 2) << value.dump();
  EXPECT_EQ(value.value("column", 0), static_cast<int>(bad_value.find("x }")) + 1) << value.dump();
  json no_type = validate("layer { name: 'ip' typo: 'InnerProduct' }");
  EXPECT_EQ(no_type.value("error", "").rfind("layer 'ip' (no type): field 'typo' is not part", 0), 0u)
      << no_type.dump();
  json build = validate(ip + "inner_product_param { num_output: 10 } }\n" +
                        "layer { name: 'x' type: 'NoSuchLayer' bottom: 'ip' top: 'x' }\n");
  EXPECT_EQ(build.value("error", "").rfind("layer 'x' (NoSuchLayer): ", 0), 0u) << build.dump();
  EXPECT_EQ(build.value("line", 0), 2) << build.dump();
  EXPECT_FALSE(build.contains("column")) << build.dump();
}

// Dataset names tell datasets apart in the model form: a second dataset of a name is
// refused naming the field. A failed dataset keeps its name (resuming its job packs it
// again) until it is deleted.
TEST(ServerApi, UploadsStopAtTheStorageLimitAndKeepWhatIsThere) {
  const std::string dir = temp_dir("upload_limit");
  Server s(dir, {"--max-uploads", "1"});  // 1 MiB for the uploaded files together
  auto c = s.client();
  const auto upload = [&](const std::string& name, size_t bytes) {
    return c.Post("/api/weights", httplib::MultipartFormDataItems{{"weights", std::string(bytes, 'w'), name, ""}});
  };
  auto r = upload("a.safetensors", 600 << 10);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  const std::string first = json::parse(r->body)["path"];
  r = upload("b.safetensors", 600 << 10);  // 1200 KiB together: past the limit
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 507) << r->body;
  const json e = json::parse(r->body);
  EXPECT_EQ(e.value("field", ""), "weights");
  EXPECT_NE(e.value("error", "").find("--max-uploads"), std::string::npos) << e.dump();
  const fs::path uploads = fs::path(dir) / "imports" / "uploads";
  EXPECT_FALSE(fs::exists(uploads / "b.safetensors")) << "nothing of the refused upload is written";
  EXPECT_EQ(fs::file_size(first), 600u << 10) << "what was there is kept";
  r = upload("c.caffemodel", 300 << 10);  // 900 KiB together: fits
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 201) << r->body;

  // The page lists the folder with its room, and a deletion makes room for the refused upload.
  json list = get(c, "/api/weights");
  EXPECT_EQ(list.value("folder", ""), uploads.string());
  EXPECT_EQ(list.value("bytes", uint64_t{0}), 900u << 10);
  EXPECT_EQ(list.value("limit_bytes", uint64_t{0}), 1u << 20);
  std::set<std::string> names;
  for (const json& f : list["files"]) {
    names.insert(f.value("name", ""));
    EXPECT_EQ(f.value("path", ""), (uploads / f.value("name", "")).string());
    EXPECT_GT(f.value("modified", int64_t{0}), 1700000000) << f.dump();  // seconds since 1970, not the file clock's
  }
  EXPECT_EQ(names, (std::set<std::string>{"a.safetensors", "c.caffemodel"})) << list.dump();
  int st = 0;
  for (const std::string bad : {"b.safetensors", "..", "uploads", "%2e%2e%2fjobs"}) {
    call(c, "DELETE", "/api/weights/" + bad, {}, st);
    EXPECT_EQ(st, 404) << bad;
  }
  EXPECT_TRUE(fs::exists(uploads));
  json d = call(c, "DELETE", "/api/weights/a.safetensors", {}, st);
  EXPECT_EQ(st, 200) << d.dump();
  EXPECT_FALSE(fs::exists(first));
  EXPECT_EQ(get(c, "/api/weights")["files"].size(), 1u);
  r = upload("b.safetensors", 600 << 10);  // 900 KiB together again: fits now
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 201) << r->body;
}

TEST(ServerApi, TwoDatasetsCannotShareAName) {
  const std::string dir = temp_dir("dataset_names");
  Server s(dir);
  auto c = s.client();
  const fs::path imports = fs::path(dir) / "imports";
  fs::create_directories(imports);
  std::ofstream(imports / "hello.txt") << "hello world. hello world. hello world.\n";
  std::ofstream(imports / "latin1.txt") << "caf\xe9\n";
  const auto create = [&](const std::string& name, const std::string& file, int want) {
    int st = 0;
    json d =
        call(c, "POST", "/api/datasets", {{"name", name}, {"source", "text"}, {"file", (imports / file).string()}}, st);
    EXPECT_EQ(st, want) << name << ": " << d.dump();
    return d;
  };
  const auto wait_packed = [&](const json& d) {
    const std::string path = "/api/datasets/" + std::to_string(d.value("id", int64_t{0}));
    EXPECT_TRUE(wait_for(
        [&] {
          const std::string st = get(c, path).value("status", "");
          return st == "done" || st == "failed";
        },
        60));
    return get(c, path).value("status", "");
  };
  EXPECT_EQ(wait_packed(create("text", "hello.txt", 201)), "done");
  json twice = create("text", "hello.txt", 400);
  EXPECT_EQ(twice.value("field", ""), "name") << twice.dump();
  EXPECT_NE(twice.value("error", "").find("a dataset named 'text' already exists"), std::string::npos) << twice.dump();
  EXPECT_EQ(get(c, "/api/datasets").size(), 1u) << "the refused one left nothing behind";

  json broken = create("broken", "latin1.txt", 201);
  EXPECT_EQ(wait_packed(broken), "failed");
  EXPECT_EQ(create("broken", "hello.txt", 400).value("field", ""), "name") << "a failed dataset keeps its name";
  int st = 0;
  call(c, "DELETE", "/api/datasets/" + std::to_string(broken["id"].get<int64_t>()), {}, st);
  EXPECT_EQ(st, 200);
  EXPECT_EQ(wait_packed(create("broken", "hello.txt", 201)), "done") << "deleted, its name is free again";
}

// The pack-dataset child appends a line per percent of progress; the server reads the newest
// whole line (a line still being written is not read).
TEST(ServerDatasetJob, ProgressLogHoldsAStepPerPercentAndTheNewestWholeLineIsRead) {
  using bks::server::last_progress;
  const fs::path file = fs::path(temp_dir("progress_log")) / "progress";
  fs::create_directories(file.parent_path());
  {
    bks::server::ProgressLog log(file.string());
    for (int i = 0; i <= 10000; ++i) log(i / 10000.0);
  }
  std::ifstream in(file);
  std::vector<double> steps;
  for (double p; in >> p;) steps.push_back(p);
  ASSERT_EQ(steps.size(), 101u) << "0, then each percent up to 1";
  EXPECT_EQ(steps.front(), 0);
  EXPECT_NEAR(steps[42], 0.42, 1e-9);
  EXPECT_EQ(steps.back(), 1);
  EXPECT_EQ(last_progress("0.1000\n0.2000\n"), 0.2);
  EXPECT_EQ(last_progress("0.1000\n0.2000\n0.3"), 0.2) << "the last line is not whole yet";
  EXPECT_EQ(last_progress("0.5\n"), 0.5);
  EXPECT_EQ(last_progress(""), -1);
  EXPECT_EQ(last_progress("0.3"), -1);
  EXPECT_EQ(last_progress("0.1\nnot a number\n"), -1);
  EXPECT_EQ(last_progress("0.1\n7\n"), -1) << "a fraction lies in [0, 1]";
}

// Packing has a slot of its own: with one job slot held by training, a new dataset is still
// packed (it used to wait behind the training job), and its progress moves between 0 and 1
// on the way (it used to jump from 0 to done).
TEST(ServerApi, ADatasetIsPackedWhileTrainingHoldsTheOnlySlotAndReportsProgress) {
  const std::string dir = temp_dir("packing_slot");
  Server s(dir);  // --slots 1
  auto c = s.client();
  const int64_t ds = fashion_dataset(c);
  const int64_t job = model(c, ds, 20, 0)["jobs"][0]["id"];
  ASSERT_TRUE(wait_for([&] { return job_state(c, job) == "running"; }, 60)) << job_state(c, job);
  // Both Fashion-MNIST files resized to 32x32 colour: seconds of packing (mostly resizing).
  json d = post(c, "/api/datasets",
                {{"name", "fashion32"},
                 {"source", "idx"},
                 {"train_images", kTrain},
                 {"test_images", kTest},
                 {"width", 32},
                 {"height", 32},
                 {"color", "color"}},
                201);
  const std::string path = "/api/datasets/" + std::to_string(d["id"].get<int64_t>());
  std::vector<double> seen;
  std::string status;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
  while (std::chrono::steady_clock::now() < deadline) {
    json now = get(c, path);
    status = now.value("status", "");
    if (now.contains("progress")) seen.push_back(now["progress"].get<double>());
    if (status == "done" || status == "failed") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(status, "done") << get(c, path).dump();
  EXPECT_EQ(job_state(c, job), "running") << "packed while training held the only slot";
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end())) << "progress never goes back";
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](double p) { return p >= 0 && p <= 1; }));
  EXPECT_TRUE(std::any_of(seen.begin(), seen.end(), [](double p) { return p > 0 && p < 1; }))
      << "seen: " << json(seen).dump();
  EXPECT_EQ(seen.back(), 1);
  // What the child reported, timing aside: a step per percent, stages included.
  const int64_t pack_job = get(c, path)["job_id"];
  std::ifstream in(fs::path(dir) / "jobs" / std::to_string(pack_job) / "progress");
  std::vector<double> steps;
  for (double p; in >> p;) steps.push_back(p);
  EXPECT_GT(steps.size(), 50u) << json(steps).dump();
  EXPECT_TRUE(std::is_sorted(steps.begin(), steps.end())) << json(steps).dump();
  EXPECT_EQ(steps.empty() ? 0.0 : steps.back(), 1);
  post(c, "/api/jobs/" + std::to_string(job) + "/abort", json::object());
  EXPECT_TRUE(wait_for([&] { return job_state(c, job) == "aborted"; }, 60));
}

double lr_at(const json& schedule, int64_t iter) {
  for (const json& p : schedule.value("points", json::array()))
    if (p["iter"].get<int64_t>() == iter) return p["lr"].get<double>();
  ADD_FAILURE() << "no point at iteration " << iter << " in " << schedule.dump();
  return std::nan("");
}

// The form's schedule preview is the trainer's own learning_rate(): values either side of
// each step, a bounded number of points, and bad settings refused naming the field.
TEST(ServerApi, LrScheduleIsTheTrainersLearningRate) {
  Server s(temp_dir("lr"));
  auto c = s.client();
  auto near = [](double want) { return want * 1e-6; };
  // step: 10 iterations per epoch, the rate x0.1 every 2 epochs, 5 epochs: every iteration.
  json step =
      post(c, "/api/lr_schedule",
           {{"iterations_per_epoch", 10},
            {"solver", {{"base_lr", 0.01}, {"lr_policy", "step"}, {"gamma", 0.1}, {"step_epochs", 2}, {"epochs", 5}}}});
  EXPECT_EQ(step.value("max_iter", 0), 50) << step.dump();
  ASSERT_EQ(step["points"].size(), 51u);
  EXPECT_NEAR(lr_at(step, 0), 0.01, near(0.01));
  EXPECT_NEAR(lr_at(step, 19), 0.01, near(0.01));
  EXPECT_NEAR(lr_at(step, 20), 0.001, near(0.001));
  EXPECT_NEAR(lr_at(step, 39), 0.001, near(0.001));
  EXPECT_NEAR(lr_at(step, 40), 0.0001, near(0.0001));
  EXPECT_NEAR(lr_at(step, 50), 0.0001, near(0.0001));
  EXPECT_DOUBLE_EQ(step["points"][20]["epoch"].get<double>(), 2.0);

  // multistep: steps at 1.5 and 3 epochs = iterations 15 and 30; of a sweep's base_lr
  // list, the first.
  json multi = post(c, "/api/lr_schedule",
                    {{"iterations_per_epoch", 10},
                     {"solver",
                      {{"base_lr", {0.01, 0.5}},
                       {"lr_policy", "multistep"},
                       {"gamma", 0.1},
                       {"stepvalue_epochs", {1.5, 3}},
                       {"epochs", 4}}}});
  ASSERT_EQ(multi["points"].size(), 41u) << multi.dump();
  EXPECT_NEAR(lr_at(multi, 14), 0.01, near(0.01));
  EXPECT_NEAR(lr_at(multi, 15), 0.001, near(0.001));
  EXPECT_NEAR(lr_at(multi, 29), 0.001, near(0.001));
  EXPECT_NEAR(lr_at(multi, 30), 0.0001, near(0.0001));
  EXPECT_NEAR(lr_at(multi, 40), 0.0001, near(0.0001));

  // A long run: 200 points, evenly spread from iteration 0 to max_iter.
  json poly = post(c, "/api/lr_schedule",
                   {{"iterations_per_epoch", 1000}, {"solver", {{"lr_policy", "poly"}, {"power", 1}, {"epochs", 10}}}});
  ASSERT_EQ(poly["points"].size(), 200u) << poly.dump().substr(0, 300);
  EXPECT_EQ(poly["points"][0]["iter"], 0);
  EXPECT_EQ(poly["points"][199]["iter"], 10000);
  EXPECT_NEAR(lr_at(poly, 0), 0.01, near(0.01));
  EXPECT_NEAR(poly["points"][199]["lr"].get<double>(), 0.0, 1e-12);

  struct Case {
    json body;
    std::string field;
  };
  const json ipe{{"iterations_per_epoch", 10}};
  auto with = [&](const json& solver) {
    json b = ipe;
    b["solver"] = solver;
    return b;
  };
  std::vector<Case> cases{
      {with({{"lr_policy", "multistep"}}), "stepvalue_epochs"},
      {with({{"lr_policy", "multistep"}, {"stepvalue_epochs", {2, 1}}}), "stepvalue_epochs"},
      {json{{"iterations_per_epoch", 1}, {"solver", {{"lr_policy", "multistep"}, {"stepvalue_epochs", {1, 1.2}}}}},
       "stepvalue_epochs"},
      {with({{"lr_policy", "cosine"}}), "lr_policy"},
      {with({{"gamma", "high"}}), "gamma"},
      {with({{"epochs", 0}}), "epochs"},
      {json{{"solver", json::object()}}, "dataset_id"},
      {json{{"dataset_id", 99}, {"solver", json::object()}}, "dataset_id"},
      {json{{"iterations_per_epoch", 0}}, "iterations_per_epoch"},
      {json{{"iterations_per_epoch", 10}, {"solver", 3}}, "solver"},
  };
  for (const auto& k : cases) {
    int st = 0;
    json j = call(c, "POST", "/api/lr_schedule", k.body, st);
    EXPECT_EQ(st, 400) << k.body.dump() << " -> " << j.dump();
    EXPECT_EQ(j.value("field", ""), k.field) << k.body.dump() << " -> " << j.dump();
    EXPECT_FALSE(j.value("error", "").empty());
  }
}

TEST(ServerApi, TokenIsRequiredWhenSetAndAJobThatCrashesOrWritesGarbageIsReported) {
  std::string dir = temp_dir("token");
  Server s(dir, {"--token", "s3cret"});
  auto anonymous = s.client();
  int st = 0;
  json j = call(anonymous, "GET", "/api/status", {}, st);
  EXPECT_EQ(st, 401);
  EXPECT_FALSE(j.value("error", "").empty());
  auto page = anonymous.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200) << "pages load; the API asks for the token";
  call(anonymous, "GET", "/api/status?token=s3cret", {}, st);
  EXPECT_EQ(st, 200);
  auto c = s.client("s3cret");
  get(c, "/api/status");
  {
    // Beyond loopback without --token: one is generated, printed, and required.
    Server open_server(temp_dir("token_any"), {"--host", "0.0.0.0"});
    auto any = open_server.client();
    call(any, "GET", "/api/status", {}, st);
    EXPECT_EQ(st, 401);
  }

  // A training child killed outright: failed, with the reason in words; its log full of
  // bytes that are not text still comes back as JSON.
  int64_t ds = fashion_dataset(c);
  int64_t id = model(c, ds, 50, 0)["jobs"][0]["id"];
  const std::string job = "/api/jobs/" + std::to_string(id);
  ASSERT_TRUE(wait_for([&] { return get(c, job).contains("pid"); }, 60));
  std::ofstream(fs::path(dir) / "jobs" / std::to_string(id) / "output.txt", std::ios::app)
      << std::string("\xff\xfe\x00\x01garbage\x80\n", 13);
  kill(get(c, job)["pid"].get<int>(), SIGKILL);
  ASSERT_TRUE(wait_for([&] { return job_state(c, id) == "failed"; }, 60));
  json failed = get(c, job);
  EXPECT_NE(failed.value("reason", "").find("killed"), std::string::npos) << failed.dump();
  EXPECT_FALSE(failed["log_tail"].empty());
  json log = get(c, job + "/log");
  EXPECT_FALSE(log["lines"].empty());
}

// A port in use, a bad port, a data directory that cannot be made: one line, exit code 2.
TEST(ServerApi, StartErrorsAreClear) {
  Server s(temp_dir("port"));
  auto run = [](const std::string& args) {
    // `timeout`: a server that starts when it should not fails the test instead of hanging it.
    std::string cmd = "timeout 20 " + std::string(BKS_BINARY) + " serve " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[512];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    int st = pclose(p);
    return std::pair{WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
  };
  auto [code, out] = run("--port " + std::to_string(s.port()) + " --data-dir " + temp_dir("port2"));
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("cannot listen"), std::string::npos) << out;
  std::tie(code, out) = run("--port 70000");
  EXPECT_EQ(code, 2) << out;
  std::tie(code, out) = run("--data-dir /proc/bakusoku-nope --port 0");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("/proc/bakusoku-nope"), std::string::npos) << out;
  // A second server on a data directory in use would run its queued jobs twice.
  std::tie(code, out) = run("--port 0 --data-dir " + s.data_dir());
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("another bakusoku serve uses this data directory"), std::string::npos) << out;
  std::tie(code, out) = run("--port 0 --scheduler pbs --data-dir " + temp_dir("nopbs"));
  EXPECT_EQ(code, 2) << out;
  // Slurm asked for where no controller answers: said at start, not at the first job.
  auto r = bks::test::run_shell("SLURM_CONF=/nonexistent/slurm.conf timeout 60 " + std::string(BKS_BINARY) +
                                " serve --port 0 --scheduler slurm --data-dir " + temp_dir("noslurm") + " 2>&1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--scheduler slurm: "), std::string::npos) << r.output;
}

// The store keeps its documents in memory as well as in SQLite: what a reopened store reads
// from the file is what the first one answered from memory, and the file is one process's.
TEST(ServerStore, WritesReachTheFileAndASecondOpenIsRefused) {
  using bks::server::Store;
  const std::string dir = temp_dir("store");
  fs::create_directories(dir);
  const std::string path = dir + "/bakusoku.db";
  std::vector<nlohmann::json> jobs;
  {
    Store st(path);
    EXPECT_THROW(Store second(path), bks::InputError);
    nlohmann::json a{{"name", "a"}}, b{{"name", "b"}}, c{{"name", "c"}};
    const int64_t ia = st.insert("jobs", a), ib = st.insert("jobs", b), ic = st.insert("jobs", c);
    EXPECT_EQ(a["id"], ia);
    b["state"] = "running";
    st.put("jobs", b);
    EXPECT_TRUE(st.remove("jobs", ic));
    EXPECT_FALSE(st.remove("jobs", ic));
    st.put("jobs", c);  // a document removed meanwhile is not brought back
    EXPECT_FALSE(st.get("jobs", ic));
    EXPECT_EQ(st.get("jobs", ib)->value("state", ""), "running");
    nlohmann::json d{{"name", "d"}};
    st.insert("datasets", d);
    EXPECT_THROW(st.list("nope"), bks::RuntimeError);
    jobs = st.list("jobs");
    ASSERT_EQ(jobs.size(), 2u);
    EXPECT_EQ(jobs[0]["id"], ia);
    EXPECT_EQ(jobs[1], b);
  }
  {
    Store reopened(path);
    EXPECT_EQ(reopened.list("jobs"), jobs);
    EXPECT_EQ(reopened.list("datasets").size(), 1u);
    nlohmann::json e{{"name", "e"}};
    EXPECT_GT(reopened.insert("jobs", e), jobs.back()["id"].get<int64_t>() + 1);  // ids are never reused
    jobs = reopened.list("jobs");
  }
  // A row damaged by another program is left out; the others still load.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "INSERT INTO jobs (doc) VALUES ('not json')", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  Store damaged(path);
  EXPECT_EQ(damaged.list("jobs"), jobs);
}

// What ended a training child, in words.
TEST(ServerProcess, ExitReasonsInWords) {
  using bks::server::exit_reason;
  EXPECT_EQ(exit_reason(0, "done"), "");
  EXPECT_EQ(exit_reason(2 << 8,
                        "Training lenet\nerror: net.prototxt:12: layer 'conv9' (Convolution): bottom 'x' not found\n"),
            "bad input: net.prototxt:12: layer 'conv9' (Convolution): bottom 'x' not found");
  EXPECT_NE(exit_reason(SIGKILL, "iter 100").find("out-of-memory killer"), std::string::npos);
  EXPECT_EQ(exit_reason(1 << 8, "error: std::bad_alloc\n"), "out of memory: std::bad_alloc");
  EXPECT_NE(exit_reason(SIGSEGV, "").find("segmentation fault"), std::string::npos);
  EXPECT_EQ(exit_reason(1 << 8, "error: training diverged: loss is nan at iteration 7\n"),
            "failed (exit code 1): training diverged: loss is nan at iteration 7");
}

// ---- Hardening (issue 10): request bodies, cross-site requests, size budgets, races ----

// A request with headers of our choosing (a browser's Origin, a rebound Host name).
httplib::Result raw(httplib::Client& c, const std::string& method, const std::string& path,
                    const httplib::Headers& headers, const std::string& body = "",
                    const std::string& type = "application/json") {
  if (method == "GET") return c.Get(path, headers);
  if (method == "DELETE") return c.Delete(path, headers);
  return c.Post(path, headers, body, type);
}

std::string field_of(const httplib::Result& r) {
  return r ? json::parse(r->body, nullptr, false).value("field", "") : "(no answer)";
}

std::string error_of(const httplib::Result& r) {
  return r ? json::parse(r->body, nullptr, false).value("error", "") : "(no answer)";
}

// A body nested 60,000 objects deep (360 KB) used to overflow a server thread's stack (the
// JSON DOM is copied and freed recursively) and kill the server; a body too large is
// refused too.
TEST(ServerHardening, DeepOrHugeJsonBodiesAreRefusedAndTheServerStaysUp) {
  Server s(temp_dir("nested"));
  auto c = s.client();
  std::string deep;
  for (int i = 0; i < 60000; ++i) deep += R"({"a":)";
  deep += "1" + std::string(60000, '}');
  for (const char* path : {"/api/models", "/api/lr_schedule", "/api/datasets", "/api/models/validate"}) {
    auto r = c.Post(path, R"({"name": "m", "network": "lenet", "dataset_id": 1, "solver": )" + deep + "}",
                    "application/json");
    ASSERT_TRUE(r) << path << ": the server died";
    EXPECT_EQ(r->status, 400) << path << ": " << r->body;
    EXPECT_EQ(field_of(r), "body") << r->body;
    EXPECT_NE(error_of(r).find("64 levels"), std::string::npos) << r->body;
  }
  // 64 levels are allowed: the field reader names what is wrong instead.
  const std::string at_limit = std::string(63, '[') + std::string(63, ']');
  auto ok_depth =
      c.Post("/api/lr_schedule", R"({"iterations_per_epoch": 10, "solver": )" + at_limit + "}", "application/json");
  ASSERT_TRUE(ok_depth);
  EXPECT_EQ(ok_depth->status, 400);
  EXPECT_EQ(field_of(ok_depth), "solver") << ok_depth->body;
  // Brackets inside strings do not count.
  json quoted{{"iterations_per_epoch", 10}, {"solver", {{"type", std::string(100, '[')}}}};
  auto in_string = c.Post("/api/lr_schedule", quoted.dump(), "application/json");
  ASSERT_TRUE(in_string);
  EXPECT_EQ(field_of(in_string), "type") << in_string->body;
  // Larger than the limit for JSON bodies (4 MiB), below the upload limit (16 MB).
  auto big = c.Post("/api/models/validate", json{{"prototxt", std::string(5 << 20, ' ')}}.dump(), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413) << big->body;
  EXPECT_EQ(field_of(big), "body");
  int st = 0;
  call(c, "GET", "/api/status", {}, st);
  EXPECT_EQ(st, 200) << "the server is still up";
}

// CSRF and DNS rebinding against the token-less loopback default: a page elsewhere may not
// post (text/plain, a foreign Origin, a multipart upload), a rebound name may not read.
TEST(ServerHardening, CrossSiteRequestsAndForeignHostNamesAreRefused) {
  Server s(temp_dir("origin"));
  auto c = s.client();
  const std::string port = std::to_string(s.port());
  const json schedule{{"iterations_per_epoch", 10}, {"solver", json::object()}};

  // A cross-site form or fetch without a preflight: text/plain.
  auto plain = raw(c, "POST", "/api/models", {}, R"({"name":"m","network":"lenet","dataset_id":1})", "text/plain");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->status, 415) << plain->body;
  EXPECT_EQ(field_of(plain), "Content-Type");
  EXPECT_TRUE(get(c, "/api/models").empty());

  struct Case {
    std::string method, path;
    httplib::Headers headers;
    int status;
    std::string field;
  };
  const httplib::Headers evil{{"Origin", "http://evil.example"}};
  std::vector<Case> cases{
      {"POST", "/api/lr_schedule", evil, 403, "Origin"},
      {"GET", "/api/status", evil, 403, "Origin"},
      {"POST", "/api/lr_schedule", {{"Origin", "null"}}, 403, "Origin"},
      {"POST", "/api/lr_schedule", {{"Origin", "http://127.0.0.1:1"}}, 403, "Origin"},
      {"DELETE", "/api/jobs/1", evil, 403, "Origin"},
      {"GET", "/api/status", {{"Host", "attacker.example:" + port}}, 403, "Host"},
      {"GET", "/api/status", {{"Host", "attacker.example"}}, 403, "Host"},
      {"GET", "/api/status", {{"Host", "127.0.0.1.nip.io:" + port}}, 403, "Host"},
      {"GET", "/api/status", {{"Host", "127.0.0.1:1"}}, 403, "Host"},
      // The dashboard's own pages, under each loopback name.
      {"POST", "/api/lr_schedule", {{"Origin", "http://127.0.0.1:" + port}}, 200, ""},
      {"GET", "/api/status", {{"Host", "localhost:" + port}, {"Origin", "http://localhost:" + port}}, 200, ""},
      {"POST", "/api/lr_schedule", {{"Host", "[::1]:" + port}, {"Origin", "http://[::1]:" + port}}, 200, ""},
      {"GET", "/api/status", {{"Host", "LocalHost:" + port}}, 200, ""},
  };
  for (const auto& k : cases) {
    auto r = raw(c, k.method, k.path, k.headers, schedule.dump());
    ASSERT_TRUE(r) << k.method << " " << k.path;
    EXPECT_EQ(r->status, k.status) << k.method << " " << k.path << " " << k.headers.begin()->second << ": " << r->body;
    EXPECT_EQ(field_of(r), k.field) << r->body;
  }
  // A multipart upload from another site (classify) is refused before anything is read.
  httplib::MultipartFormDataItems form{{"image", "not really a png", "x.png", "image/png"}};
  auto upload = c.Post("/api/jobs/1/classify", evil, form);
  ASSERT_TRUE(upload);
  EXPECT_EQ(upload->status, 403) << upload->body;
  EXPECT_EQ(field_of(upload), "Origin");
  // Pages load under any name (they hold no data); only the API checks.
  auto page = raw(c, "GET", "/", {{"Host", "attacker.example"}});
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);

  // With a token, which protects every call, any name may read; a foreign page still may
  // not change anything, token or not.
  Server t(temp_dir("origin_token"), {"--token", "s3cret"});
  auto tc = t.client("s3cret");
  const std::string tport = std::to_string(t.port());
  std::vector<Case> token_cases{
      {"GET", "/api/status", {{"Host", "dashboard.lan:" + tport}}, 200, ""},
      {"GET", "/api/status", evil, 200, ""},
      {"POST", "/api/lr_schedule", evil, 403, "Origin"},
      {"DELETE", "/api/jobs/1", evil, 403, "Origin"},
      {"POST",
       "/api/lr_schedule",
       {{"Host", "dashboard.lan:" + tport}, {"Origin", "http://dashboard.lan:" + tport}},
       200,
       ""},
      {"POST",
       "/api/lr_schedule",
       {{"Host", "dashboard.lan:" + tport}, {"Origin", "http://evil.lan:" + tport}},
       403,
       "Origin"},
  };
  for (const auto& k : token_cases) {
    auto r = raw(tc, k.method, k.path, k.headers, schedule.dump());
    ASSERT_TRUE(r) << k.method << " " << k.path;
    EXPECT_EQ(r->status, k.status) << k.method << " " << k.path << " " << k.headers.begin()->second << ": " << r->body;
    EXPECT_EQ(field_of(r), k.field) << r->body;
  }
}

// Integers beyond int64_t are refused naming their range (they used to wrap through an
// undefined float-to-integer cast); a network too large for the server is refused by
// validation, naming the layer, before its weights are allocated.
TEST(ServerHardening, OutOfRangeIntegersAndNetworksOverTheBudgetAreRefused) {
  Server s(temp_dir("budget"));
  auto c = s.client();
  for (const char* id : {"9223372036854775808", "18446744073709551616", "-9223372036854775809", "1e300", "0"}) {
    auto r = c.Post("/api/lr_schedule", std::string(R"({"solver": {}, "dataset_id": )") + id + "}", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << id << ": " << r->body;
    EXPECT_EQ(field_of(r), "dataset_id") << id << ": " << r->body;
    EXPECT_NE(error_of(r).find("must be between 1 and 9223372036854775807"), std::string::npos)
        << id << ": " << r->body;
  }
  const auto net = [](const std::string& layer) {
    return "layer { name: 'big' " + layer +
           " }\nlayer { name: 'ip' type: 'InnerProduct' bottom: 'big' top: 'ip' inner_product_param { num_output: 2 } "
           "}\nlayer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'ip' bottom: 'label' top: 'loss' }\n";
  };
  struct Case {
    std::string layer, limit;
  };
  std::vector<Case> cases{
      // 400,000 x 784 weights: 1.2 GB of parameters.
      {"type: 'InnerProduct' bottom: 'data' top: 'big' inner_product_param { num_output: 400000 }", "2^28 floats"},
      // Few weights, but 100,000 x 28 x 28 floats of output per image.
      {"type: 'Convolution' bottom: 'data' top: 'big' convolution_param { num_output: 100000 kernel_size: 1 }",
       "2^26 floats"},
  };
  for (const auto& k : cases) {
    int st = 0;
    json j = call(c, "POST", "/api/models/validate", {{"prototxt", net(k.layer)}}, st);
    EXPECT_EQ(st, 413) << j.dump();
    EXPECT_EQ(j.value("field", ""), "prototxt") << j.dump();
    EXPECT_NE(j.value("error", "").find("layer 'big'"), std::string::npos) << j.dump();
    EXPECT_NE(j.value("error", "").find(k.limit), std::string::npos) << j.dump();
  }
  // Within the budget: validated as before.
  json fine = post(c, "/api/models/validate",
                   {{"prototxt", net("type: 'InnerProduct' bottom: 'data' top: 'big' inner_product_param { "
                                     "num_output: 1000 }")}});
  EXPECT_TRUE(fine.value("ok", false)) << fine.dump();
  json shared = post(c, "/api/models/validate",
                     {{"prototxt",
                       "layer { name: 'a' type: 'InnerProduct' bottom: 'data' top: 'a' param { name: 'w' } "
                       "inner_product_param { num_output: 784 bias_term: false } }\n"
                       "layer { name: 'b' type: 'InnerProduct' bottom: 'a' top: 'b' param { name: 'w' } "
                       "inner_product_param { num_output: 10 bias_term: false } }\n"}});
  EXPECT_FALSE(shared.value("ok", true)) << "a shared blob of another shape is still an error";
  EXPECT_NE(shared.value("error", "").find("layer 'b'"), std::string::npos) << shared.dump();
}

// Several DELETEs of one job or one model at once: one deletes it, the others find nothing
// (404), none fails halfway (it used to answer 400 when the job went between its lookup and
// its removal).
TEST(ServerHardening, ConcurrentDeletesAnswer404) {
  std::string dir = temp_dir("delete_race");
  Server s(dir);
  auto c = s.client();
  fs::path images = fs::path(dir) / "imports" / "tiny";
  for (const char* label : {"a", "b"}) {
    fs::create_directories(images / label);
    // 100 images a class: 75 iterations an epoch, so each job runs long enough to be deleted
    // while it trains (at 4 a class, 1000 epochs took 0.2 s and a job could end first).
    for (int i = 0; i < 100; ++i) {
      std::vector<uint8_t> px(8 * 8, static_cast<uint8_t>(label[0] == 'a' ? 30 + i % 20 : 200 + i % 20));
      // Appended, not "i" + to_string(i): GCC 12 warns wrongly (-Wrestrict) on that form here.
      std::string name = "i";
      name += std::to_string(i) + ".png";
      ASSERT_TRUE(stbi_write_png((images / label / name).c_str(), 8, 8, 1, px.data(), 8));
    }
  }
  json d = post(c, "/api/datasets",
                {{"name", "tiny"},
                 {"source", "folder"},
                 {"root", images.string()},
                 {"width", 8},
                 {"height", 8},
                 {"color", "grayscale"},
                 {"val_percent", 25}},
                201);
  const std::string ds = "/api/datasets/" + std::to_string(d["id"].get<int64_t>());
  ASSERT_TRUE(wait_for([&] { return get(c, ds).value("status", "") == "done"; }, 60)) << get(c, ds).dump();
  const std::string tiny =
      "layer { name: 'ip' type: 'InnerProduct' bottom: 'data' top: 'ip' inner_product_param { num_output: 2 } }\n"
      "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'ip' bottom: 'label' top: 'loss' }\n";
  // A sweep of 16 learning rates: 16 jobs.
  const json rates{0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1, 0.11, 0.12, 0.13, 0.14, 0.15, 0.16};
  const auto new_model = [&](const std::string& prototxt, int want) {
    return post(c, "/api/models",
                {{"name", "m"},
                 {"network", "custom"},
                 {"prototxt", prototxt},
                 {"dataset_id", d["id"]},
                 {"solver", {{"base_lr", rates}, {"epochs", 1000}, {"batch_size", 2}}}},
                want);
  };
  // Model creation checks the same budget as validation.
  json too_big = new_model(
      "layer { name: 'huge' type: 'InnerProduct' bottom: 'data' top: 'ip' inner_product_param { num_output: "
      "5000000 } }\n",
      413);
  EXPECT_NE(too_big.value("error", "").find("layer 'huge'"), std::string::npos) << too_big.dump();

  // All at once: each thread's connection is open before any sends its DELETE.
  const auto delete_at_once = [&](const std::string& path) {
    constexpr int kThreads = 8;
    std::vector<int> status(kThreads, 0);
    std::vector<std::thread> threads;
    std::atomic<int> ready{0};
    for (int k = 0; k < kThreads; ++k)
      threads.emplace_back([&, k] {
        auto w = s.client();
        int st = 0;
        call(w, "GET", "/api/status", {}, st);
        ++ready;
        while (ready < kThreads) std::this_thread::yield();
        call(w, "DELETE", path, {}, status[k]);
      });
    for (auto& t : threads) t.join();
    EXPECT_EQ(std::count(status.begin(), status.end(), 200), 1) << path;
    EXPECT_EQ(std::count(status.begin(), status.end(), 404), kThreads - 1) << path;
  };
  json m = new_model(tiny, 201);
  ASSERT_EQ(m["jobs"].size(), 16u);
  // Each job once it runs (one slot: in turn), so removing it takes a while (its training
  // process is killed and waited for) and the other DELETEs arrive meanwhile.
  for (const json& j : m["jobs"]) {
    const std::string path = "/api/jobs/" + std::to_string(j["id"].get<int64_t>());
    // A job that somehow ended first is deleted all the same: one 200, the rest 404.
    ASSERT_TRUE(wait_for(
        [&] {
          const json job = get(c, path);
          return job.contains("pid") || job.value("state", "") == "done";
        },
        60))
        << get(c, path).dump();
    delete_at_once(path);
  }
  for (int round = 0; round < 3; ++round)
    delete_at_once("/api/models/" + std::to_string(new_model(tiny, 201)["id"].get<int64_t>()));
  EXPECT_EQ(get(c, "/api/models").size(), 1u);
}

// A text dataset (a UTF-8 file) trains the char-RNN network, and its job writes text: the
// same request gives the same text, and text jobs refuse what only image jobs do.
TEST(ServerApi, TextDatasetTrainsACharRnnThatWritesText) {
  const std::string dir = temp_dir("text");
  Server s(dir);
  auto c = s.client();
  const fs::path imports = fs::path(dir) / "imports";
  fs::create_directories(imports);
  std::string text;
  for (int i = 0; i < 550; ++i) text += "hello world. ";
  std::ofstream(imports / "hello.txt") << text;  // 7150 characters, 9 distinct
  std::ofstream(imports / "latin1.txt") << "caf\xe9\n";
  auto dataset = [&](const std::string& file) {
    json d = post(c, "/api/datasets", {{"name", file}, {"source", "text"}, {"file", (imports / file).string()}}, 201);
    const std::string path = "/api/datasets/" + std::to_string(d["id"].get<int64_t>());
    EXPECT_TRUE(wait_for(
        [&] {
          const std::string st = get(c, path).value("status", "");
          return st == "done" || st == "failed";
        },
        60));
    return get(c, path);
  };
  json bad = dataset("latin1.txt");
  EXPECT_EQ(bad["status"], "failed") << bad.dump();
  EXPECT_NE(bad.value("reason", "").find("latin1.txt: not UTF-8 text"), std::string::npos) << bad.dump();
  int st = 0;
  json missing = call(c, "POST", "/api/datasets", {{"name", "x"}, {"source", "text"}}, st);
  EXPECT_EQ(st, 400) << missing.dump();
  EXPECT_EQ(missing.value("field", ""), "file") << missing.dump();

  json d = dataset("hello.txt");
  ASSERT_EQ(d["status"], "done") << d.dump();
  const json& info = d["info"];
  EXPECT_EQ(info["kind"], "text");
  EXPECT_EQ(info["classes"].size(), 9u) << info.dump();  // " .dehlorw"
  EXPECT_EQ(info["train_count"].get<int64_t>() + info["val_count"].get<int64_t>(), 7150);
  EXPECT_EQ(info["val_count"], 715);
  EXPECT_EQ(info["preview"].get<std::string>().rfind("hello world. hello", 0), 0u);

  const int64_t ds = d["id"];
  auto model = [&](const std::string& network, double batch, int want, const std::string& type = "Adam") {
    return post(
        c, "/api/models",
        {{"name", "hello"},
         {"network", network},
         {"dataset_id", ds},
         {"solver", {{"type", type}, {"base_lr", 0.01}, {"batch_size", batch}, {"epochs", 4}, {"weight_decay", 0}}}},
        want);
  };
  EXPECT_EQ(model("lenet", 8, 400).value("field", ""), "network");
  json too_big = model("char_rnn", 200, 400);
  EXPECT_EQ(too_big.value("field", ""), "batch_size") << too_big.dump();
  EXPECT_NE(too_big.value("error", "").find("needs 10001 characters"), std::string::npos) << too_big.dump();
  // A custom network validates on the dataset's own TextData layers (tops chars, cont, next).
  json v = post(c, "/api/models/validate",
                {{"dataset_id", ds},
                 {"prototxt",
                  "layer { name: 'e' type: 'Embed' bottom: 'chars' top: 'e' embed_param { num_output: 8 input_dim: 9 } "
                  "}\nlayer { name: 'l' type: 'LSTM' bottom: 'e' bottom: 'cont' top: 'h' recurrent_param { "
                  "num_output: 8 } }\n"}});
  EXPECT_TRUE(v.value("ok", false)) << v.dump();

  // 4 epochs of 6435 characters in batches of 8 streams x 50: 4 x 16 iterations.
  json m = model("char_rnn", 8, 201);
  const int64_t id = m["jobs"][0]["id"];
  const std::string job = "/api/jobs/" + std::to_string(id);
  ASSERT_TRUE(wait_for([&] { return job_state(c, id) != "queued" && job_state(c, id) != "running"; }, 300));
  json done = get(c, job);
  ASSERT_EQ(done["state"], "done") << done.dump();
  EXPECT_EQ(done["max_iter"], 64) << done.dump();
  // The text repeats every 13 characters: a net that learned it is far below uniform
  // guessing over 9 characters (ln 9 = 2.20 nats).
  EXPECT_LT(done["last_test"].value("loss", 99.0), 0.5) << done.dump();

  auto sample = [&](const json& body, int want) {
    int status = 0;
    json r = call(c, "POST", job + "/sample", body, status);
    EXPECT_EQ(status, want) << r.dump();
    return r;
  };
  json a = sample({{"primer", "hello"}, {"length", 60}, {"seed", 3}, {"temperature", 1.5}}, 200);
  json b = sample({{"primer", "hello"}, {"length", 60}, {"seed", 3}, {"temperature", 1.5}}, 200);
  EXPECT_EQ(a["text"], b["text"]);
  EXPECT_EQ(a["text"].get<std::string>().size(), 65u) << a.dump();
  EXPECT_EQ(a["text"].get<std::string>().rfind("hello", 0), 0u) << a.dump();
  EXPECT_EQ(a["iter"], 64);
  // At temperature 0 the net writes what it learned.
  json greedy = sample({{"primer", "hello w"}, {"length", 19}, {"temperature", 0}}, 200);
  EXPECT_EQ(greedy["text"], "hello world. hello world. ") << greedy.dump();
  json stranger = sample({{"primer", "hello cat"}}, 400);
  EXPECT_EQ(stranger.value("field", ""), "primer") << stranger.dump();
  EXPECT_NE(stranger.value("error", "").find("'c' U+0063 (character 6)"), std::string::npos) << stranger.dump();
  EXPECT_EQ(sample({{"length", 5000}}, 400).value("field", ""), "length");
  EXPECT_NE(call(c, "POST", job + "/classify", {{"split", "val"}}, st).value("error", "").find("learned text"),
            std::string::npos);
  EXPECT_EQ(st, 409);

  // RMSProp's solver has no momentum (it had, and every such job failed at once).
  const int64_t rms = model("char_rnn", 8, 201, "RMSProp")["jobs"][0]["id"];
  auto solver = c.Get("/api/jobs/" + std::to_string(rms) + "/files/solver.prototxt");
  ASSERT_TRUE(solver);
  EXPECT_NE(solver->body.find("type: \"RMSProp\""), std::string::npos) << solver->body;
  EXPECT_EQ(solver->body.find("momentum"), std::string::npos) << solver->body;
  ASSERT_TRUE(wait_for([&] { return job_state(c, rms) != "queued" && job_state(c, rms) != "running"; }, 300));
  EXPECT_EQ(job_state(c, rms), "done") << get(c, "/api/jobs/" + std::to_string(rms)).dump();
}

// Writes an IDX file of unsigned bytes: `dims`, then `data`.
void write_idx_file(const fs::path& p, const std::vector<uint32_t>& dims, const std::string& data) {
  std::string b{0, 0, 8, static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int k = 3; k >= 0; --k) b.push_back(static_cast<char>((d >> (8 * k)) & 0xff));
  std::ofstream(p, std::ios::binary) << b << data;
}

// Datasets are packed in a child: a crafted file fails its dataset with the reader's message
// and the server answers on. Files reached through links must stay in the import folders.
TEST(ServerApi, CraftedOrEscapingDatasetsFailTheirJobNotTheServer) {
  const std::string dir = temp_dir("crafted"), outside = temp_dir("crafted_outside");
  Server s(dir);
  auto c = s.client();
  const fs::path imports = fs::path(dir) / "imports";
  fs::create_directories(outside);
  auto wait_state = [&](int64_t id, const std::string& want) {
    const std::string path = "/api/datasets/" + std::to_string(id);
    EXPECT_TRUE(wait_for([&] { return get(c, path).value("status", "") == want; }, 60)) << get(c, path).dump();
    return get(c, path);
  };
  // 24 bytes whose dimensions multiply past 2^64.
  write_idx_file(imports / "crafted-images-idx3-ubyte", {1, 1u << 28, 1u << 28, 1u << 28}, "abcd");
  write_idx_file(imports / "crafted-labels-idx1-ubyte", {1}, "\x01");
  json d =
      post(c, "/api/datasets",
           {{"name", "crafted"}, {"source", "idx"}, {"train_images", (imports / "crafted-images-idx3-ubyte").string()}},
           201);
  json failed = wait_state(d["id"], "failed");
  const std::string reason = failed.value("reason", "");
  EXPECT_NE(reason.find("crafted-images-idx3-ubyte: corrupt IDX file"), std::string::npos) << failed.dump();
  EXPECT_EQ(get(c, "/api/status").value("slots", 0), 1) << "the server still answers";

  // The labels file beside the images is a link to a file outside: refused at once.
  write_idx_file(imports / "linked-images-idx3-ubyte", {1, 2, 2}, "abcd");
  write_idx_file(fs::path(outside) / "secret-labels", {1}, "\x01");
  fs::create_symlink(fs::path(outside) / "secret-labels", imports / "linked-labels-idx1-ubyte");
  int st = 0;
  json refused = call(
      c, "POST", "/api/datasets",
      {{"name", "linked"}, {"source", "idx"}, {"train_images", (imports / "linked-images-idx3-ubyte").string()}}, st);
  EXPECT_EQ(st, 400) << refused.dump();
  EXPECT_EQ(refused.value("field", ""), "train_images") << refused.dump();
  EXPECT_NE(refused.value("error", "").find("linked-labels-idx1-ubyte"), std::string::npos) << refused.dump();

  // An image folder whose class folder, or one image, links outside: fails naming the link.
  std::vector<uint8_t> px(4 * 4, 100);
  for (const fs::path& d :
       {imports / "a" / "cats", imports / "b" / "cats", imports / "b" / "dogs", fs::path(outside) / "dogs"}) {
    fs::create_directories(d);
    for (int i = 0; i < 2; ++i)
      ASSERT_TRUE(stbi_write_png((d / ("img" + std::to_string(i) + ".png")).c_str(), 4, 4, 1, px.data(), 4));
  }
  fs::create_symlink(fs::path(outside) / "dogs", imports / "a" / "dogs");
  fs::create_symlink(fs::path(outside) / "dogs" / "img0.png", imports / "b" / "dogs" / "img9.png");
  for (const auto& [root, link] : {std::pair{"a", "a/dogs"}, std::pair{"b", "b/dogs/img9.png"}}) {
    json f = post(
        c, "/api/datasets",
        {{"name", root}, {"source", "folder"}, {"root", (imports / root).string()}, {"width", 4}, {"height", 4}}, 201);
    json why = wait_state(f["id"], "failed");
    EXPECT_NE(why.value("reason", "").find((imports / link).string() + ": "), std::string::npos) << why.dump();
    EXPECT_NE(why.value("reason", "").find("outside the folders datasets may come from"), std::string::npos)
        << why.dump();
  }
}

// Images are measured from their header before decoding: a bomb is refused, not decoded.
TEST(ServerImages, DecompressionBombsAreRefusedBeforeDecoding) {
  using bks::server::decode_chw;
  using bks::server::Decoded;
  std::vector<uint8_t> chw;
  std::string why;
  const std::string bomb = png_of_zeros(8200, 8200);  // 67 Mpixel in tens of KB
  EXPECT_LT(bomb.size(), 200u << 10);
  EXPECT_EQ(decode_chw(bomb, 1, 28, 28, chw, why), Decoded::too_large) << why;
  EXPECT_NE(why.find("8200 x 8200 pixels"), std::string::npos) << why;
  EXPECT_TRUE(chw.empty());
  EXPECT_EQ(decode_chw(png_of_zeros(16, 16), 1, 28, 28, chw, why), Decoded::ok) << why;
  EXPECT_EQ(chw.size(), 28u * 28u);
  EXPECT_EQ(decode_chw("not an image", 1, 28, 28, chw, why), Decoded::not_an_image);
  // Within the pixel bound but far more than the bytes can hold (fuzzing: 10 s in stb).
  // Other formats stb knows are refused (its PNM decoder crashed on a fuzzed 23-byte file).
  EXPECT_EQ(decode_chw("P6 7000 7000 255\n\x01\x02", 3, 32, 32, chw, why), Decoded::not_an_image);
  EXPECT_EQ(why, "not a PNG or JPEG file");
  // A PNG within the pixel bound declaring far more than its bytes hold (stb filled them all).
  std::string small = png_of_zeros(16, 16);
  const uint32_t big = 7000;  // IHDR width and height, big-endian, after the signature and chunk header
  for (int at : {16, 20})
    for (int i = 0; i < 4; ++i) small[at + i] = static_cast<char>((big >> (24 - 8 * i)) & 0xff);
  EXPECT_EQ(decode_chw(small, 3, 32, 32, chw, why), Decoded::not_an_image);
  EXPECT_NE(why.find("7000 x 7000 pixels declared by a"), std::string::npos) << why;
}

// The HTTP workers grow with the connections open (each holds one while it lives), up to
// their bound, and the extra ones end once idle.
TEST(ServerPool, GrowsOnDemandUpToItsBoundThenShrinks) {
  using namespace std::chrono_literals;
  bks::server::PoolLimits limits;
  limits.min_threads = 1;
  limits.max_threads = 4;
  limits.max_queued = 8;
  limits.idle_timeout = 50ms;
  bks::server::ElasticThreadPool pool(limits);
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  bool release = false;
  auto task = [&] {
    std::unique_lock<std::mutex> lock(mu);
    ++started;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  };
  const auto until = [&](int n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 60s, [&] { return started >= n; });
  };
  // Four tasks that each wait for the others: they all run only if the pool grew to four.
  for (int i = 0; i < 4; ++i) pool.enqueue(task);
  EXPECT_TRUE(until(4)) << "started " << started << " of 4 with " << pool.threads() << " threads";
  // Two more wait in the queue: never a fifth thread.
  for (int i = 0; i < 2; ++i) pool.enqueue(task);
  EXPECT_EQ(pool.threads(), 4u);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_TRUE(until(6));
  EXPECT_TRUE(wait_for([&] { return pool.threads() == 1; }, 60)) << pool.threads() << " threads stay";
  pool.shutdown();
  EXPECT_EQ(pool.threads(), 0u);
  EXPECT_EQ(pool.peak_threads(), 4u);
}

// Live charts have a budget of their own (--max-viewers): more viewers than the old fixed
// pool of 32 workers all stream while the API still answers, and one beyond the budget gets
// 503 with Retry-After at once instead of waiting for a worker; a viewer that leaves frees
// its place.
TEST(ServerLoad, ManyViewersLeaveTheApiAnsweringAndOneTooManyGets503) {
  constexpr int kViewers = 40;
  Server s(temp_dir("viewers"), {"--max-viewers", std::to_string(kViewers)});
  auto c = s.client();
  json d = post(c, "/api/datasets",
                {{"name", "small"}, {"source", "idx"}, {"train_images", kTest}, {"val_percent", 10}}, 201);
  const std::string ds = "/api/datasets/" + std::to_string(d.value("id", int64_t{0}));
  ASSERT_TRUE(wait_for([&] { return get(c, ds).value("status", "") == "done"; }, 120)) << get(c, ds).dump();
  // A job that trains for longer than the test: its streams stay open.
  int64_t id = model(c, d.value("id", int64_t{0}), 1000, 0)["jobs"][0]["id"];
  const std::string job = "/api/jobs/" + std::to_string(id);
  ASSERT_TRUE(wait_for([&] { return job_state(c, id) == "running"; }, 60)) << get(c, job).dump();

  std::atomic<bool> leave{false};
  std::atomic<int> streaming{0};
  std::vector<std::thread> viewers;
  for (int k = 0; k < kViewers; ++k)
    viewers.emplace_back([&] {
      auto v = s.client();
      v.set_read_timeout(30, 0);  // a running job sends its usage every second
      bool counted = false;
      v.Get(job + "/events", [&](const char*, size_t) {
        if (!counted) ++streaming;
        counted = true;
        return !leave.load();
      });
    });
  struct Leave {  // the viewers go however the test ends
    std::atomic<bool>& leave;
    std::vector<std::thread>& threads;
    ~Leave() {
      leave = true;
      for (auto& t : threads) t.join();
    }
  } leave_at_end{leave, viewers};
  ASSERT_TRUE(wait_for([&] { return streaming.load() == kViewers; }, 60)) << streaming.load() << " streaming";

  auto api = s.client();
  api.set_read_timeout(30, 0);
  auto status = api.Get("/api/status");
  ASSERT_TRUE(status) << "the API answers with " << kViewers << " viewers open";
  EXPECT_EQ(status->status, 200);

  // One viewer too many: told so at once, as JSON, with when to come back.
  int refused = 0;
  std::string retry_after, body;
  api.Get(
      job + "/events",
      [&](const httplib::Response& r) {
        refused = r.status;
        retry_after = r.get_header_value("Retry-After");
        return r.status != 200;  // a stream would never end: stop reading it
      },
      [&](const char* data, size_t n) {
        body.append(data, n);
        return true;
      });
  EXPECT_EQ(refused, 503);
  EXPECT_FALSE(retry_after.empty());
  json err = json::parse(body, nullptr, false);
  ASSERT_TRUE(err.is_object()) << body;
  EXPECT_NE(err.value("error", "").find("--max-viewers"), std::string::npos) << body;

  // The viewers leave; their places come back (the server notices at its next write).
  leave = true;
  EXPECT_TRUE(wait_for(
      [&] {
        int st = 0;
        s.client().Get(
            job + "/events",
            [&](const httplib::Response& r) {
              st = r.status;
              return false;
            },
            [](const char*, size_t) { return false; });
        return st == 200;
      },
      60))
      << "a viewer is let in again once the others have gone";
}

}  // namespace
