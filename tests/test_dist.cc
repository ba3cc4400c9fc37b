// Data-parallel training under Open MPI (mpirun --oversubscribe on the 2-core machines):
// N ranks with batch B train the same weights as one process with batch N x B, the test
// pass split over ranks reports what one process does, resume works with another number of
// ranks, and a rank that dies or disagrees ends the job with a message naming it.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "core/file_io.h"
#include "core/worse.h"
#include "formats/safetensors.h"

namespace bks {
namespace {
namespace fs = std::filesystem;

const std::string kTrainImages = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
const std::string kTestImages = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("bks_dist_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// LeNet as the example has it, with the training batch given; with `test_batch`, a TEST
// phase on the test set with accuracy.
std::string lenet(int batch, int test_batch) {
  std::string test = !test_batch ? std::string()
                                 : R"(
layer { name: "test_data" type: "Data" top: "data" top: "label" include { phase: TEST }
  transform_param { scale: 0.00390625 }
  data_param { source: ")" + kTestImages +
                                       "\" batch_size: " + std::to_string(test_batch) + R"( } }
)";
  return "name: \"LeNet\"\n" + test + R"(
layer { name: "mnist" type: "Data" top: "data" top: "label" include { phase: TRAIN }
  transform_param { scale: 0.00390625 }
  data_param { source: ")" +
         kTrainImages + "\" batch_size: " + std::to_string(batch) + R"( } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 8 kernel_size: 5 weight_filler { type: "xavier" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
  convolution_param { num_output: 16 kernel_size: 5 weight_filler { type: "xavier" } } }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool2" top: "ip1"
  inner_product_param { num_output: 100 weight_filler { type: "xavier" } } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
)" +
         (test_batch
              ? R"(layer { name: "accuracy" type: "Accuracy" bottom: "ip2" bottom: "label" top: "accuracy" include { phase: TEST } }
)"
              : "");
}
std::string lenet(int batch) { return lenet(batch, 0); }

// Two inner products of the images that share one weight blob and one bias (Caffe's
// ParamSpec names), summed: the shared blob's gradient has two contributions.
std::string shared_weights_net(int batch) {
  return R"(name: "Shared"
layer { name: "mnist" type: "Data" top: "data" top: "label"
  transform_param { scale: 0.00390625 }
  data_param { source: ")" +
         kTrainImages + "\" batch_size: " + std::to_string(batch) + R"( } }
layer { name: "a" type: "InnerProduct" bottom: "data" top: "a" param { name: "w" } param { name: "b" }
  inner_product_param { num_output: 32 weight_filler { type: "xavier" } } }
layer { name: "flip" type: "Power" bottom: "data" top: "flip" power_param { scale: -1 shift: 1 } }
layer { name: "b" type: "InnerProduct" bottom: "flip" top: "b" param { name: "w" } param { name: "b" }
  inner_product_param { num_output: 32 weight_filler { type: "xavier" } } }
layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "b" top: "sum" }
layer { name: "relu" type: "ReLU" bottom: "sum" top: "sum" }
layer { name: "out" type: "InnerProduct" bottom: "sum" top: "out"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "out" bottom: "label" top: "loss" }
)";
}

// LeNet with a BatchNorm after each convolution (statistics of the batch while training),
// whose biases it makes redundant (so the convolutions have none).
std::string lenet_bn(int batch) {
  std::string net = lenet(batch);
  for (const char* conv : {"conv1", "conv2"}) {
    const std::string pool = conv == std::string("conv1") ? "pool1" : "pool2";
    const std::string from = "layer { name: \"" + pool + "\" type: \"Pooling\" bottom: \"" + conv + "\"";
    net.replace(net.find(from), from.size(),
                "layer { name: \"" + std::string(conv) + "_bn\" type: \"BatchNorm\" bottom: \"" + conv + "\" top: \"" +
                    conv + "\" }\n" + from);
  }
  const std::string no_bias = "bias_term: false ";
  for (size_t at = 0; (at = net.find("kernel_size: 5", at)) != std::string::npos; at += no_bias.size() + 1)
    net.insert(at, no_bias);
  return net;
}

// A solver for `net_text` in `dir`, with `solver_text` (type, rates, iterations).
std::string write_solver(const fs::path& dir, const std::string& name, const std::string& net_text,
                         const std::string& solver_text) {
  write_file_atomic((dir / (name + "_net.prototxt")).string(), net_text);
  std::string path = (dir / (name + "_solver.prototxt")).string();
  write_file_atomic(path, "net: \"" + (dir / (name + "_net.prototxt")).string() + "\"\nrandom_seed: 5\n" + solver_text);
  return path;
}

// mpirun on this machine: root needs Open MPI's consent, 2 cores need oversubscription.
std::string mpirun_on_this_machine() {
  return geteuid() == 0 ? "mpirun --oversubscribe --allow-run-as-root " : "mpirun --oversubscribe ";
}

// mpirun with N ranks of bakusoku `args`; its exit code and output.
test::CmdResult mpirun(int ranks, const std::string& args) {
  return test::run_shell(mpirun_on_this_machine() + "-np " + std::to_string(ranks) + " " + BKS_BINARY + " " + args +
                         " 2>&1");
}

TensorFile weights_at(const fs::path& run, int iter) {
  return load_safetensors((run / "snapshots" / ("iter_" + std::to_string(iter) + ".safetensors")).string());
}

// The largest over blobs of |a - b| / |b| (Euclidean norms of the blob's values).
double weight_difference(const TensorFile& a, const TensorFile& b) {
  EXPECT_EQ(a.tensors.size(), b.tensors.size());
  double worst = 0;
  for (const auto& [name, t] : a.tensors) {
    const Tensor* u = b.find(name);
    EXPECT_TRUE(u && u->numel() == t.numel()) << name;
    if (!u || u->numel() != t.numel()) return INFINITY;
    double norm = 1e-30, diff = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      norm += double(u->f32()[i]) * u->f32()[i];
      diff += (double(t.f32()[i]) - u->f32()[i]) * (double(t.f32()[i]) - u->f32()[i]);
    }
    worst = worse(worst, std::sqrt(diff / norm));
  }
  return worst;
}

// The weights after `iters` steps: 2 ranks with batch B, against 1 process with 2B (and,
// with `iter_size_too`, 1 process with B and iter_size 2).
void expect_two_ranks_equal_one(const std::string& name, std::string (*net)(int), const std::string& solver_text,
                                int iters, bool iter_size_too) {
  fs::path dir = scratch(name);
  const std::string s = solver_text + "max_iter: " + std::to_string(iters) + "\n";
  auto two = mpirun(
      2, "train --threads 1 --solver " + write_solver(dir, "two", net(16), s) + " --out " + (dir / "two").string());
  ASSERT_EQ(two.code, 0) << two.output;
  auto one = test::run_cmd("train --threads 1 --solver " + write_solver(dir, "one", net(32), s) + " --out " +
                           (dir / "one").string());
  ASSERT_EQ(one.code, 0) << one.output;
  nlohmann::json run = nlohmann::json::parse(read_file((dir / "two" / "run.json").string(), "run.json"));
  EXPECT_EQ(run["world_size"], 2);
  EXPECT_EQ(run["global_batch_size"], 32);
  const TensorFile together = weights_at(dir / "two", iters);
  EXPECT_LE(weight_difference(together, weights_at(dir / "one", iters)), 1e-5);
  // One process with the per-rank batch trains other weights: the comparison can tell.
  auto half = test::run_cmd("train --threads 1 --solver " + write_solver(dir, "half", net(16), s) + " --out " +
                            (dir / "half").string());
  ASSERT_EQ(half.code, 0) << half.output;
  EXPECT_GT(weight_difference(together, weights_at(dir / "half", iters)), 1e-3);
  if (iter_size_too) {
    auto acc = test::run_cmd("train --threads 1 --solver " + write_solver(dir, "acc", net(16), s + "iter_size: 2\n") +
                             " --out " + (dir / "acc").string());
    ASSERT_EQ(acc.code, 0) << acc.output;
    EXPECT_LE(weight_difference(together, weights_at(dir / "acc", iters)), 1e-5);
  }
}

const char* kSgd = "base_lr: 0.01 momentum: 0.9 weight_decay: 0.0005 lr_policy: 'fixed'\n";

TEST(Dist, TwoRanksTrainWhatOneRankDoesWithTwiceTheBatch) { expect_two_ranks_equal_one("sgd", lenet, kSgd, 50, true); }

TEST(Dist, TwoRanksMatchOneWithAdam) {
  expect_two_ranks_equal_one(
      "adam", lenet, "type: 'Adam' base_lr: 0.002 momentum: 0.9 momentum2: 0.999 lr_policy: 'fixed'\n", 50, false);
}

TEST(Dist, TwoRanksMatchOneWithSharedWeights) {
  expect_two_ranks_equal_one("shared", shared_weights_net, kSgd, 50, false);
}

// Per blob, `a` - `base`: what one step changed.
TensorFile step_of(const TensorFile& a, const TensorFile& base) {
  TensorFile d;
  for (const auto& [name, t] : a.tensors) {
    Tensor delta(t.shape());
    const Tensor* b = base.find(name);
    for (int64_t i = 0; i < t.numel(); ++i) delta.f32()[i] = t.f32()[i] - (b ? b->f32()[i] : 0.f);
    d.tensors.emplace_back(name, std::move(delta));
  }
  return d;
}

TEST(Dist, SyncBatchNormOverTwoRanksEqualsOneRankWithTheWholeBatch) {
  fs::path dir = scratch("sync_bn");
  // One step from the same initial weights: the BatchNorm statistics it keeps are its
  // forward pass's, and the change of every weight is its backward pass's gradient (a rate
  // of 1, so that the change is not lost in the rounding of the weights it is added to).
  const std::string s = "base_lr: 1 lr_policy: 'fixed' max_iter: 1\n";
  auto synced = mpirun(2, "train --threads 1 --sync-bn --solver " + write_solver(dir, "sync", lenet_bn(16), s) +
                              " --out " + (dir / "sync").string());
  ASSERT_EQ(synced.code, 0) << synced.output;
  auto apart = mpirun(2, "train --threads 1 --solver " + write_solver(dir, "apart", lenet_bn(16), s) + " --out " +
                             (dir / "apart").string());
  ASSERT_EQ(apart.code, 0) << apart.output;
  auto whole = test::run_cmd("train --threads 1 --solver " + write_solver(dir, "whole", lenet_bn(32), s) + " --out " +
                             (dir / "whole").string());
  ASSERT_EQ(whole.code, 0) << whole.output;
  auto start = test::run_cmd("train --threads 1 --solver " +
                             write_solver(dir, "start", lenet_bn(32), "base_lr: 1 lr_policy: 'fixed' max_iter: 0\n") +
                             " --out " + (dir / "start").string());
  ASSERT_EQ(start.code, 0) << start.output;
  const TensorFile w0 = weights_at(dir / "start", 0);
  const TensorFile reference = step_of(weights_at(dir / "whole", 1), w0);
  ASSERT_TRUE(reference.find("conv1_bn.0"));
  EXPECT_LE(weight_difference(step_of(weights_at(dir / "sync", 1), w0), reference), 1e-5);
  // Each rank normalising its own half batch (Caffe's default) computes something else.
  EXPECT_GT(weight_difference(step_of(weights_at(dir / "apart", 1), w0), reference), 1e-3);
}

std::vector<nlohmann::json> metrics(const fs::path& run) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

double last_of(const std::vector<nlohmann::json>& m, const std::string& phase, const std::string& key) {
  for (auto it = m.rbegin(); it != m.rend(); ++it)
    if ((*it)["phase"] == phase) return (*it)[key].get<double>();
  ADD_FAILURE() << "no " << phase << " record";
  return NAN;
}

TEST(Dist, TestPassSplitOverRanksReportsWhatOneProcessDoes) {
  fs::path dir = scratch("test_pass");
  // 100 test batches of 100 cover the test set once, so the pass after training reads the
  // batches `bakusoku test` reads from the start.
  const std::string net = lenet(16, 100);
  auto two = mpirun(2, "train --threads 1 --solver " +
                           write_solver(dir, "run", net,
                                        std::string(kSgd) + "max_iter: 30 test_iter: 100 "
                                                            "test_interval: 30 test_initialization: false\n") +
                           " --out " + (dir / "run").string());
  ASSERT_EQ(two.code, 0) << two.output;
  auto m = metrics(dir / "run");
  auto alone = test::run_cmd("test --threads 1 --iterations 100 --model " + (dir / "run_net.prototxt").string() +
                             " --weights " + (dir / "run" / "snapshots" / "iter_30.safetensors").string());
  ASSERT_EQ(alone.code, 0) << alone.output;
  const double accuracy = last_of(m, "test", "accuracy");
  EXPECT_GT(accuracy, 0.2);  // trained beyond chance (0.1)
  // `bakusoku test` prints "accuracy = X" with 4 decimals... and the loss.
  auto pos = alone.output.find("accuracy = ");
  ASSERT_NE(pos, std::string::npos) << alone.output;
  EXPECT_NEAR(std::stod(alone.output.substr(pos + 11)), accuracy, 1e-4) << alone.output;
}

TEST(Dist, ResumeWithTheSameOrAnotherNumberOfRanks) {
  fs::path dir = scratch("resume");
  const std::string solver =
      write_solver(dir, "run", lenet(16), std::string(kSgd) + "max_iter: 60 snapshot: 30 display: 10\n");
  auto straight = mpirun(2, "train --threads 1 --solver " + solver + " --out " + (dir / "straight").string());
  ASSERT_EQ(straight.code, 0) << straight.output;
  // The first 30 iterations, then resumed from their snapshot with 2 ranks and with 1.
  const std::string first = write_solver(dir, "first", lenet(16), std::string(kSgd) + "max_iter: 30 display: 10\n");
  for (const char* name : {"again2", "again1"}) {
    auto a = mpirun(2, "train --threads 1 --solver " + first + " --out " + (dir / name).string());
    ASSERT_EQ(a.code, 0) << a.output;
  }
  const std::string state = "/snapshots/iter_30.solverstate";
  auto two = mpirun(2, "train --threads 1 --solver " + solver + " --snapshot " + (dir / "again2").string() + state);
  ASSERT_EQ(two.code, 0) << two.output;
  auto one = test::run_cmd("train --threads 1 --solver " + solver + " --snapshot " + (dir / "again1").string() + state);
  ASSERT_EQ(one.code, 0) << one.output;
  // Same ranks: the same steps on the same batches, so the same weights.
  EXPECT_LE(weight_difference(weights_at(dir / "again2", 60), weights_at(dir / "straight", 60)), 1e-6);
  // One rank: half the batch from there on, so other weights, but the loss curve goes on
  // from where it was (not from an untrained net's 2.3).
  EXPECT_GT(weight_difference(weights_at(dir / "again1", 60), weights_at(dir / "straight", 60)), 1e-4);
  auto ms = metrics(dir / "straight"), m1 = metrics(dir / "again1");
  const double at30 = ms[2]["loss"].get<double>(), straight60 = last_of(ms, "train", "loss");
  ASSERT_EQ(ms[2]["iter"], 30);
  const double resumed60 = last_of(m1, "train", "loss");
  EXPECT_LT(resumed60, 1.5 * at30);
  EXPECT_LT(std::fabs(resumed60 - straight60), 0.5 * straight60);
  nlohmann::json run = nlohmann::json::parse(read_file((dir / "again1" / "run.json").string(), "run.json"));
  EXPECT_EQ(run["world_size"], 1);
}

TEST(Dist, ARankWithOtherFilesIsRefusedAtStartUp) {
  fs::path dir = scratch("mismatch");
  const std::string a = write_solver(dir, "a", lenet(16), std::string(kSgd) + "max_iter: 5\n");
  std::string other = lenet(16);
  other.replace(other.find("num_output: 100"), 15, "num_output: 101");
  const std::string b = write_solver(dir, "b", other, std::string(kSgd) + "max_iter: 5\n");
  const std::string out = " --out " + (dir / "run").string();
  const auto r = test::run_shell(mpirun_on_this_machine() + "-np 1 " + BKS_BINARY + " train --threads 1 --solver " + a +
                                 out + " : -np 1 " + BKS_BINARY + " train --threads 1 --solver " + b + out + " 2>&1");
  const std::string& output = r.output;
  EXPECT_EQ(r.code, 2) << output;
  EXPECT_NE(output.find("rank(s) 1 loaded a different net, solver or parameter shapes than rank 0"), std::string::npos)
      << output;
  EXPECT_FALSE(fs::exists(dir / "run" / "snapshots" / "iter_5.safetensors"));
}

TEST(Dist, RanksFlagRunsMpirunAndSaysHow) {
  fs::path dir = scratch("ranks");
  const std::string solver = write_solver(dir, "run", lenet(32), std::string(kSgd) + "max_iter: 20 display: 1\n");
  auto r = test::run_cmd("train --ranks 2 --global-batch --lr-scale linear --warmup-iters 10 --solver " + solver +
                         " --out " + (dir / "run").string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Running: mpirun -np 2 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("over 2 ranks"), std::string::npos) << r.output;
  nlohmann::json run = nlohmann::json::parse(read_file((dir / "run" / "run.json").string(), "run.json"));
  EXPECT_EQ(run["world_size"], 2);
  EXPECT_EQ(run["ranks_per_host"], 2);
  EXPECT_EQ(run["threads"], 1);
  EXPECT_EQ(run["batch_size"], 16);  // --global-batch: 32 over 2 ranks
  EXPECT_EQ(run["global_batch_size"], 32);
  EXPECT_EQ(run["lr_scale"], "linear");
  // The rate of step k is base * (1 + (N - 1) * min(1, k / warmup)); record k + 1 shows it.
  auto m = metrics(dir / "run");
  ASSERT_GE(m.size(), 20u);
  EXPECT_NEAR(m[0]["lr"].get<double>(), 0.01, 1e-9);
  EXPECT_NEAR(m[5]["lr"].get<double>(), 0.015, 1e-9);
  EXPECT_NEAR(m[19]["lr"].get<double>(), 0.02, 1e-9);
}

// --ranks re-runs this command under mpirun: every training option has to reach the ranks
// (distillation once did not, and the ranks trained without their teacher).
TEST(Dist, RanksFlagPassesEveryTrainingOptionOn) {
  fs::path dir = scratch("ranks_options");
  const std::string teacher_solver = write_solver(dir, "teacher", lenet(16, 16), std::string(kSgd) + "max_iter: 2\n");
  ASSERT_EQ(test::run_cmd("train --threads 1 --solver " + teacher_solver + " --out " + (dir / "teacher").string()).code,
            0);
  const std::string teacher_weights = (dir / "teacher" / "snapshots" / "iter_2.safetensors").string();
  ASSERT_TRUE(fs::exists(teacher_weights));
  const std::string net = (dir / "teacher_net.prototxt").string();
  const std::string solver = write_solver(dir, "run", lenet(32), std::string(kSgd) + "max_iter: 4\n");
  auto r = test::run_cmd("train --ranks 2 --solver " + solver + " --out " + (dir / "run").string() + " --teacher " +
                         net + " --teacher-weights " + teacher_weights +
                         " --temperature 2.5 --alpha 0.75 --qat int8 --prune 0.5 --prune-until 2 --prune-every 1"
                         " --prune-scope lamp");
  ASSERT_EQ(r.code, 0) << r.output;
  nlohmann::json run = nlohmann::json::parse(read_file((dir / "run" / "run.json").string(), "run.json"));
  EXPECT_EQ(run["world_size"], 2);
  ASSERT_TRUE(run["distill"].is_object()) << run.dump(2);
  EXPECT_EQ(run["distill"]["teacher"], net);
  EXPECT_EQ(run["distill"]["teacher_weights"], teacher_weights);
  EXPECT_FLOAT_EQ(run["distill"]["temperature"].get<float>(), 2.5f);
  EXPECT_FLOAT_EQ(run["distill"]["alpha"].get<float>(), 0.75f);
  EXPECT_EQ(run["qat"], "int8");
  ASSERT_TRUE(run["prune"].is_object()) << run.dump(2);
  EXPECT_DOUBLE_EQ(run["prune"]["sparsity"].get<double>(), 0.5);
  EXPECT_EQ(run["prune"]["until"], 2);
  EXPECT_EQ(run["prune"]["every"], 1);
  EXPECT_EQ(run["prune"]["scope"], "lamp");
}

TEST(Dist, BadDistributedSettingsAreOneClearError) {
  fs::path dir = scratch("bad");
  const std::string solver = write_solver(dir, "run", lenet(15), std::string(kSgd) + "max_iter: 5\n");
  auto odd = mpirun(2, "train --threads 1 --global-batch --solver " + solver + " --out " + (dir / "odd").string());
  EXPECT_EQ(odd.code, 2) << odd.output;
  EXPECT_NE(odd.output.find("layer 'mnist': --global-batch: data_param.batch_size 15 does not divide over 2 ranks"),
            std::string::npos)
      << odd.output;
  EXPECT_FALSE(fs::exists(dir / "odd"));
  auto no_mpirun =
      test::run_shell("PATH=/nonexistent " + std::string(BKS_BINARY) + " train --ranks 2 --solver " + solver + " 2>&1");
  EXPECT_EQ(no_mpirun.code, 2) << no_mpirun.output;
  EXPECT_NE(no_mpirun.output.find("'mpirun' is not on PATH"), std::string::npos) << no_mpirun.output;
  auto nccl = test::run_cmd("train --dist-backend nccl --solver " + solver + " --out " + (dir / "nccl").string());
  EXPECT_EQ(nccl.code, 2) << nccl.output;
  EXPECT_NE(nccl.output.find("--dist-backend nccl: NCCL reduces gradients between GPU ranks"), std::string::npos)
      << nccl.output;
  EXPECT_FALSE(fs::exists(dir / "nccl"));
  auto warm = test::run_cmd("train --warmup-iters 5 --solver " + solver);
  EXPECT_EQ(warm.code, 2) << warm.output;
  EXPECT_NE(warm.output.find("--warmup-iters needs --lr-scale linear"), std::string::npos) << warm.output;
}

// The pid of the bakusoku process with Open MPI rank `rank` whose command line holds `tag`.
pid_t find_rank(int rank, const std::string& tag) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmdline(e.path() / "cmdline"), environ(e.path() / "environ");
    std::string cmd((std::istreambuf_iterator<char>(cmdline)), {}), env((std::istreambuf_iterator<char>(environ)), {});
    if (cmd.find(tag) == std::string::npos || cmd.rfind("mpirun", 0) == 0) continue;
    if (env.find(std::string("OMPI_COMM_WORLD_RANK=") + std::to_string(rank) + '\0') != std::string::npos)
      return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}

// Two network namespaces joined by a veth pair: two "hosts" on this machine, 10.77.R.1 and
// 10.77.R.2. Removed again when it goes out of scope.
class TwoHosts {
 public:
  TwoHosts() : tag_(std::to_string(getpid() % 100000)), net_(std::to_string(getpid() % 200 + 20)) {
    a_ = "bks_a" + tag_;
    b_ = "bks_b" + tag_;
    const std::string va = "bksa" + tag_, vb = "bksb" + tag_;
    ok_ = sh("ip netns add " + a_) && sh("ip netns add " + b_) &&
          sh("ip link add " + va + " type veth peer name " + vb) && sh("ip link set " + va + " netns " + a_) &&
          sh("ip link set " + vb + " netns " + b_) && sh("ip -n " + a_ + " addr add " + ip(1) + "/24 dev " + va) &&
          sh("ip -n " + b_ + " addr add " + ip(2) + "/24 dev " + vb) && sh("ip -n " + a_ + " link set " + va + " up") &&
          sh("ip -n " + b_ + " link set " + vb + " up") && sh("ip -n " + a_ + " link set lo up") &&
          sh("ip -n " + b_ + " link set lo up");
  }
  ~TwoHosts() {
    sh("ip netns del " + a_);
    sh("ip netns del " + b_);
  }
  bool ok() const { return ok_; }
  std::string ip(int host) const { return "10.77." + net_ + "." + std::to_string(host); }
  const std::string& ns(int host) const { return host == 1 ? a_ : b_; }
  std::string subnet() const { return "10.77." + net_ + ".0/24"; }
  std::string why;

 private:
  bool sh(const std::string& cmd) {
    const auto r = test::run_shell(cmd + " 2>&1");
    if (r.code != 0 && why.empty()) why = cmd + ": " + r.output;
    return r.code == 0;
  }
  std::string tag_, net_, a_, b_;
  bool ok_ = false;
};

TEST(Dist, TwoHostsOverTcpTrainTheWeightsOneHostDoes) {
  TwoHosts hosts;
  if (geteuid() != 0 || !hosts.ok())
    GTEST_SKIP() << "network namespaces are not available here (" << (geteuid() ? "not root" : hosts.why)
                 << "): the two-host test did not run";
  fs::path dir = scratch("two_hosts");
  // Open MPI starts its daemon on the second host through this instead of ssh: it runs the
  // command inside that host's namespace.
  const std::string agent = (dir / "agent.sh").string();
  write_file_atomic(agent, "#!/bin/sh\nhost=$1; shift\ncase \"$host\" in " + hosts.ip(2) + ") ns=" + hosts.ns(2) +
                               " ;; *) ns=" + hosts.ns(1) + " ;; esac\nexec ip netns exec \"$ns\" /bin/sh -c \"$*\"\n");
  fs::permissions(agent, fs::perms::owner_all);
  const std::string solver = write_solver(dir, "run", lenet(16), std::string(kSgd) + "max_iter: 30\n");
  // Only TCP between the ranks (no shared memory), over the veth pair; no binding (each
  // "host" would bind its rank to its core 0, the same core).
  const std::string cmd = "ip netns exec " + hosts.ns(1) + " mpirun --allow-run-as-root --bind-to none -np 2 -H " +
                          hosts.ip(1) + ":1," + hosts.ip(2) + ":1 --mca plm_rsh_agent " + agent +
                          " --mca btl tcp,self --mca btl_tcp_if_include " + hosts.subnet() +
                          " --mca oob_tcp_if_include " + hosts.subnet() + " " + BKS_BINARY +
                          " train --threads 1 --solver " + solver + " --out " + (dir / "apart").string() + " 2>&1";
  const auto apart = test::run_shell(cmd);
  ASSERT_EQ(apart.code, 0) << apart.output;
  nlohmann::json run = nlohmann::json::parse(read_file((dir / "apart" / "run.json").string(), "run.json"));
  EXPECT_EQ(run["hosts"], 2) << "Open MPI saw one host";
  EXPECT_EQ(run["ranks_per_host"], 1);
  auto together = mpirun(2, "train --threads 1 --solver " + solver + " --out " + (dir / "together").string());
  ASSERT_EQ(together.code, 0) << together.output;
  EXPECT_LE(weight_difference(weights_at(dir / "apart", 30), weights_at(dir / "together", 30)), 1e-6);
}

// Kilobytes of a /proc/PID/status line ("RssAnon", "RssShmem"), or -1.
long status_kb(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + ":", 0) == 0) return std::stol(line.substr(key.size() + 1));
  return -1;
}

// Two ranks training LeNet until stopped, run directory dir/run, started in the background.
struct BackgroundTraining {
  pid_t launcher;   // mpirun
  std::string log;  // its output
};
BackgroundTraining start_training(const fs::path& dir) {
  const std::string solver = write_solver(dir, "run", lenet(16), std::string(kSgd) + "max_iter: 1000000 display: 1\n");
  BackgroundTraining t{-1, (dir / "mpirun.log").string()};
  const std::string cmd = "exec " + mpirun_on_this_machine() + "-np 2 " + BKS_BINARY + " train --threads 1 --solver " +
                          solver + " --out " + (dir / "run").string() + " > " + t.log + " 2>&1";
  t.launcher = fork();
  if (t.launcher == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return t;
}

// Once rank 0 has written a metrics record (the ranks train), the pid of rank `rank` of
// the run in `run_dir`; -1 after a minute without.
pid_t training_rank(const fs::path& run_dir, int rank) {
  for (int i = 0; i < 600; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!fs::exists(run_dir / "metrics.jsonl") || fs::file_size(run_dir / "metrics.jsonl") == 0) continue;
    if (pid_t pid = find_rank(rank, run_dir.string()); pid > 0) return pid;
  }
  return -1;
}

// Whether `launcher` exits within `seconds` (its wait status in `status`); killed if not.
bool exits_within(pid_t launcher, int seconds, int& status) {
  for (int i = 0; i < seconds * 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (waitpid(launcher, &status, WNOHANG) == launcher) return true;
  }
  kill(launcher, SIGKILL);
  waitpid(launcher, &status, 0);
  return false;
}

TEST(Dist, RanksOnOneHostShareOneCopyOfTheDataset) {
  fs::path dir = scratch("shared_data");
  const auto [launcher, log] = start_training(dir);
  ASSERT_GT(launcher, 0);
  // While the ranks train: neither holds a private copy of the 47 MB training set (its
  // anonymous memory stays below that), both read it from the shared mapping.
  pid_t r0 = -1, r1 = -1;
  long anon = 0, shared0 = 0, shared1 = 0;
  for (int i = 0; i < 600 && (shared0 <= 0 || shared1 <= 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!fs::exists(dir / "run" / "metrics.jsonl") || fs::file_size(dir / "run" / "metrics.jsonl") == 0) continue;
    r0 = find_rank(0, (dir / "run").string());
    r1 = find_rank(1, (dir / "run").string());
    if (r0 < 0 || r1 < 0) continue;
    anon = std::max({anon, status_kb(r0, "RssAnon"), status_kb(r1, "RssAnon")});
    shared0 = status_kb(r0, "RssShmem");
    shared1 = status_kb(r1, "RssShmem");
  }
  // The shared copies rank 1 maps, as its memory map names them: removed from /dev/shm
  // once start-up was over (other jobs' files there, of tests running beside this one,
  // are theirs).
  std::vector<std::string> mapped_copies;
  std::ifstream maps("/proc/" + std::to_string(r1) + "/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find("/dev/shm/bakusoku-") != std::string::npos) mapped_copies.push_back(line);
  kill(launcher, SIGTERM);
  int status = 0;
  waitpid(launcher, &status, 0);
  ASSERT_GT(r1, 0) << read_file(log, "log");
  const long dataset_kb = 60000L * 784 / 1024;
  EXPECT_LT(anon, dataset_kb) << "a rank holds a private copy of the dataset";
  EXPECT_GT(shared0, 0);
  EXPECT_GT(shared1, 0);
  ASSERT_FALSE(mapped_copies.empty()) << "rank 1 maps no shared copy";
  for (const std::string& line : mapped_copies)
    EXPECT_NE(line.find("(deleted)"), std::string::npos)
        << line << ": outlived the start-up of the ranks that share it";
}

TEST(Dist, AnInterruptOnOneRankStopsAllOfThemWithASnapshot) {
  fs::path dir = scratch("interrupt");
  const auto [launcher, log] = start_training(dir);
  ASSERT_GT(launcher, 0);
  const pid_t rank1 = training_rank(dir / "run", 1);
  ASSERT_GT(rank1, 0) << read_file(log, "log");
  // Ctrl-C reaching rank 1 only (not rank 0, not mpirun): rank 0 must learn of it and
  // write the snapshot, both must stop at the same iteration.
  ASSERT_EQ(kill(rank1, SIGINT), 0);
  int status = 0;
  const bool ended = exits_within(launcher, 60, status);
  ASSERT_TRUE(ended) << "the ranks did not stop: " << read_file(log, "log");
  const std::string out = read_file(log, "log");
  EXPECT_NE(out.find("Interrupted at iteration"), std::string::npos) << out;
  std::string snapshot;
  for (const auto& e : fs::directory_iterator(dir / "run" / "snapshots"))
    if (e.path().extension() == ".solverstate") snapshot = e.path().string();
  ASSERT_FALSE(snapshot.empty()) << out;
  // The snapshot resumes (with one rank here).
  auto resumed = test::run_cmd("train --threads 1 --solver " +
                               write_solver(dir, "more", lenet(16), std::string(kSgd) + "max_iter: 3\n") +
                               " --snapshot " + snapshot + " --out " + (dir / "more").string());
  EXPECT_NE(resumed.output.find("Resumed from"), std::string::npos) << resumed.output;
}

TEST(Dist, AKilledRankEndsTheWholeJobNamingIt) {
  fs::path dir = scratch("kill");
  const auto [launcher, log] = start_training(dir);
  ASSERT_GT(launcher, 0);
  // Once the ranks train, rank 1 is killed.
  const pid_t victim = training_rank(dir / "run", 1);
  ASSERT_GT(victim, 0) << read_file(log, "log");
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  // Every rank must be gone within 30 s: the launcher exits once they are.
  int status = 0;
  const bool ended = exits_within(launcher, 30, status);
  ASSERT_TRUE(ended) << "the job was still running 30 s after rank 1 was killed";
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_LT(find_rank(0, (dir / "run").string()), 0) << "rank 0 outlived the job";
  const std::string out = read_file(log, "log");
  // Open MPI's launcher names the rank (its PID it sometimes prints as 0 in containers).
  EXPECT_NE(out.find("process rank 1 with PID"), std::string::npos) << out;
  EXPECT_NE(out.find("exited on signal 9"), std::string::npos) << out;
}

}  // namespace
}  // namespace bks
