// Training end to end on the real Fashion-MNIST data: exact resume, divergence handling and
// the accuracy LeNet must reach.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/file_io.h"
#include "core/log.h"
#include "formats/safetensors.h"
#include "train/trainer.h"

namespace bks {
namespace {
namespace fs = std::filesystem;

const std::string kLenet = std::string(BKS_SOURCE_DIR) + "/examples/fashion_mnist/lenet_train_test.prototxt";

std::string solver_file(const std::string& name, const std::string& extra) {
  fs::path p = fs::temp_directory_path() / ("bks_train_" + name + ".prototxt");
  std::ofstream(p) << "net: '" << kLenet << "'\n"
                   << "base_lr: 0.01 momentum: 0.9 weight_decay: 0.0005 lr_policy: 'inv' gamma: 0.0001 power: 0.75\n"
                   << "random_seed: 7\n"
                   << extra;
  return p.string();
}

TrainResult run(const std::string& solver, const std::string& out, const std::string& snapshot = "") {
  TrainOptions o;
  o.solver = solver;
  o.out_dir = (fs::temp_directory_path() / out).string();
  o.snapshot = snapshot;
  o.threads = 2;
  o.progress = false;
  if (snapshot.empty()) fs::remove_all(o.out_dir);
  return train(o);
}

TEST(Train, ResumeIsBitwiseExact) {
  auto straight =
      run(solver_file("straight", "max_iter: 200 snapshot: 100 test_iter: 2 test_interval: 100\n"), "bks_straight");
  auto first = run(solver_file("first", "max_iter: 100 test_iter: 2 test_interval: 100\n"), "bks_resume");
  ASSERT_FALSE(first.last_snapshot.empty());
  auto second =
      run(solver_file("second", "max_iter: 200 test_iter: 2 test_interval: 100\n"), "bks_resume", first.last_snapshot);
  EXPECT_EQ(second.iterations, 200);
  TensorFile a = load_safetensors(fs::path(straight.run_dir) / "snapshots/iter_200.safetensors");
  TensorFile b = load_safetensors(fs::path(second.run_dir) / "snapshots/iter_200.safetensors");
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    ASSERT_EQ(a.tensors[i].first, b.tensors[i].first);
    ASSERT_EQ(std::memcmp(a.tensors[i].second.raw(), b.tensors[i].second.raw(), a.tensors[i].second.bytes()), 0)
        << a.tensors[i].first << " differs after resume";
  }
  EXPECT_EQ(straight.last_test, second.last_test);
}

TEST(Train, NaNLossStopsAndKeepsLastSnapshot) {
  std::string s = solver_file("nan", "max_iter: 400 snapshot: 20\n");
  // Replace the learning rate with one that diverges.
  std::string text = read_file(s, "solver");
  text.replace(text.find("base_lr: 0.01"), 13, "base_lr: 900");
  std::ofstream(s) << text;
  std::string dir = (fs::temp_directory_path() / "bks_nan").string();
  fs::remove_all(dir);
  TrainOptions o;
  o.solver = s;
  o.out_dir = dir;
  o.threads = 2;
  o.progress = false;
  try {
    train(o);
    FAIL() << "training with base_lr 900 should diverge";
  } catch (const RuntimeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("at iteration"), std::string::npos) << m;
  }
  // Every snapshot written is complete and loadable.
  int n = 0;
  for (auto& e : fs::directory_iterator(fs::path(dir) / "snapshots")) {
    EXPECT_NE(e.path().extension(), ".tmp");
    EXPECT_NO_THROW(load_safetensors(e.path().string())) << e.path();
    ++n;
  }
  (void)n;
}

TEST(Train, LenetReachesAccuracyOnFashionMnist) {
  auto r = run(solver_file("e2e", "max_iter: 1000 test_iter: 100 test_interval: 1000 snapshot_after_train: false\n"),
               "bks_e2e");
  ASSERT_TRUE(r.last_test.count("accuracy"));
  EXPECT_GE(r.last_test["accuracy"], 0.84) << "LeNet after 1000 iterations";
  // The run directory follows the contract.
  for (const char* f : {"net.prototxt", "solver.prototxt", "run.json", "metrics.jsonl", "log.txt"})
    EXPECT_TRUE(fs::exists(fs::path(r.run_dir) / f)) << f;
  std::ifstream m(fs::path(r.run_dir) / "metrics.jsonl");
  std::string line;
  int train_lines = 0, test_lines = 0;
  while (std::getline(m, line)) {
    train_lines += line.find("\"phase\":\"train\"") != std::string::npos;
    test_lines += line.find("\"phase\":\"test\"") != std::string::npos;
  }
  EXPECT_GE(train_lines, 1);
  EXPECT_EQ(test_lines, 2) << "at iteration 0 and 1000";
}

}  // namespace
}  // namespace bks
