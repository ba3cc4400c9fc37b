// bakusoku optimize (engine/optimize.h): the search keeps the candidates within the accuracy
// budget apart from those outside it, marks the Pareto front and the best candidate truthfully,
// writes the best bundle and its report, honours the time budget, and refuses bad options with
// one clear line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "cli_util.h"
#include "engine/bundle.h"
#include "engine/optimize.h"
#include "engine/optimize_report.h"

namespace bks::test {
namespace {

namespace fs = std::filesystem;

const std::string kLenet = std::string(BKS_SOURCE_DIR) + "/examples/fashion_mnist/lenet_train_test.prototxt";

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("bks_optimize_" + name)).string();
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// LeNet trained for 300 iterations at a fixed rate, once per test process (CTest runs this
// file's tests as parallel processes: each trains into its own directory).
const std::string& trained_lenet() {
  static const std::string weights = [] {
    const std::string tag = std::to_string(getpid());
    const std::string run = temp_path("lenet_run_" + tag), solver = temp_path("lenet_solver_" + tag + ".prototxt");
    fs::remove_all(run);
    std::ofstream(solver) << "net: \"" << kLenet
                          << "\"\nbase_lr: 0.01 momentum: 0.9 lr_policy: \"fixed\" max_iter: 300 random_seed: 1\n"
                             "display: 0\n";
    const CmdResult t = run_cmd("train --solver " + solver + " --out " + run);
    EXPECT_EQ(t.code, 0) << t.output;
    return run + "/snapshots/iter_300.safetensors";
  }();
  return weights;
}

// The optimize run's JSON report, after checking it exited 0.
nlohmann::json optimize(const std::string& name, const std::string& flags) {
  const std::string out = temp_path(name);
  fs::remove_all(out);
  fs::create_directories(out);
  const CmdResult r =
      run_cmd("optimize --model " + kLenet + " --weights " + trained_lenet() + " -o " + out + "/best.bks " + flags);
  EXPECT_EQ(r.code, 0) << r.output;
  return nlohmann::json::parse(slurp(out + "/best.json"));
}

TEST(Optimize, KeepsTheBestCandidateWithinTheAccuracyBudget) {
  const double drop = 0.3;
  const nlohmann::json j = optimize("search", "--max-accuracy-drop 0.3 --budget-minutes 2");
  const nlohmann::json& cs = j.at("candidates");
  ASSERT_GE(cs.size(), 4u) << j.dump(1);
  const nlohmann::json& base = cs[0];
  EXPECT_EQ(base.at("name"), "unoptimised (fp32)");
  const double floor = base.at("accuracy").get<double>() - drop / 100;
  EXPECT_GT(base.at("accuracy").get<double>(), 0.7);
  // Every measured candidate is on the right side of the budget line, and some fell outside it
  // (90% of LeNet's weights pruned without fine-tuning loses more than 0.3 points).
  int over = 0, measured = 0;
  for (const auto& c : cs) {
    if (c.contains("error")) continue;
    ++measured;
    EXPECT_EQ(c.at("fits").get<bool>(), c.at("accuracy").get<double>() >= floor - 1e-12) << c.dump();
    over += !c.at("fits").get<bool>();
  }
  EXPECT_GE(measured, 4);
  EXPECT_GE(over, 1) << j.dump(1);
  // The best is the fastest of those that fit; the best single technique joins at most one.
  const int best = j.at("best").get<int>(), single = j.at("best_single").get<int>();
  EXPECT_TRUE(cs[best].at("fits").get<bool>()) << cs[best].dump();
  EXPECT_TRUE(cs[single].at("fits").get<bool>()) << cs[single].dump();
  for (const auto& c : cs) {
    if (c.contains("error") || !c.at("fits").get<bool>()) continue;
    EXPECT_LE(cs[best].at("latency_ms").get<double>(), c.at("latency_ms").get<double>()) << c.dump();
    if (c.at("techniques").get<int>() <= 1) {
      EXPECT_LE(cs[single].at("latency_ms").get<double>(), c.at("latency_ms").get<double>()) << c.dump();
    }
  }
  EXPECT_LE(cs[single].at("techniques").get<int>(), 1);
  // Pareto: no candidate is at least as accurate, fast and small, and better in one.
  for (const auto& c : cs) {
    if (c.contains("error")) continue;
    bool dominated = false;
    for (const auto& d : cs) {
      if (d.contains("error") || &d == &c) continue;
      const double ca = c.at("accuracy"), da = d.at("accuracy"), cm = c.at("latency_ms"), dm = d.at("latency_ms");
      const int64_t cb = c.at("bytes"), db = d.at("bytes");
      dominated |= da >= ca && dm <= cm && db <= cb && (da > ca || dm < cm || db < cb);
    }
    EXPECT_EQ(c.at("pareto").get<bool>(), !dominated) << c.dump();
  }
  // The bundle written is the best candidate's, and scores what the search measured.
  const std::string out = temp_path("search");
  EXPECT_EQ(slurp(out + "/best.bks"), slurp(cs[best].at("bundle").get<std::string>()));
  const CmdResult t = run_cmd("test --model " + out + "/best.bks --iterations 100");
  ASSERT_EQ(t.code, 0) << t.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(t.output, m, std::regex("\naccuracy = ([0-9.]+)"))) << t.output;
  EXPECT_NEAR(std::stod(m[1]), cs[best].at("accuracy").get<double>(), 1e-4) << t.output;
  // The report beside it: the table and the plot name the choice.
  const std::string md = slurp(out + "/best.md"), svg = slurp(out + "/best.svg");
  EXPECT_NE(md.find("| " + cs[best].at("name").get<std::string>() + " |"), std::string::npos) << md;
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find(cs[best].at("name").get<std::string>()), std::string::npos);
  EXPECT_NE(svg.find("accuracy budget (0.30 points)"), std::string::npos);
}

TEST(Optimize, StopsWhenTheTimeBudgetIsSpentAndSizeCountsCodedBundles) {
  // No time at all: the unoptimised net is still measured and written, the rest listed.
  const nlohmann::json lat = optimize("no_time", "--budget-minutes 0.0001");
  ASSERT_EQ(lat.at("candidates").size(), 1u) << lat.dump(1);
  EXPECT_EQ(lat.at("best"), 0);
  EXPECT_GE(lat.at("not_tried").size(), 4u) << lat.dump(1);
  EXPECT_EQ(slurp(temp_path("no_time") + "/best.bks"), slurp(lat.at("candidates")[0].at("bundle").get<std::string>()));
  // The size objective stores weights coded: the same net's bundle is smaller. It also
  // tries fewer bits per stored weight, which is smaller again.
  const nlohmann::json size = optimize("size", "--budget-minutes 10 --objective size");
  const nlohmann::json& coded = size.at("candidates")[0];
  EXPECT_LT(coded.at("bytes").get<int64_t>(), lat.at("candidates")[0].at("bytes").get<int64_t>());
  EXPECT_EQ(size.at("batch"), 1);
  bool five_bits = false;
  for (const auto& c : size.at("candidates")) {
    if (c.at("name") != "5-bit weights") continue;
    five_bits = true;
    ASSERT_FALSE(c.contains("error")) << c.dump();
    EXPECT_EQ(c.at("weight_bits"), 5);
    EXPECT_LT(c.at("bytes").get<int64_t>(), coded.at("bytes").get<int64_t>());
    EXPECT_EQ(load_bundle(c.at("bundle").get<std::string>()).info.at("weight_bits"), "5");
  }
  EXPECT_TRUE(five_bits) << size.dump(1);
  // Throughput tunes each candidate's batch unless one is given; items/s is that batch's.
  const nlohmann::json tp = optimize("throughput", "--budget-minutes 0.0001 --objective throughput");
  EXPECT_EQ(tp.at("batch"), "auto");
  const nlohmann::json& tuned = tp.at("candidates")[0];
  // The batch is the one deploy --batch auto chose for the bundle (which one depends on timing).
  const Bundle tuned_bundle = load_bundle(tuned.at("bundle").get<std::string>());
  EXPECT_NE(
      tuned_bundle.info.at("batch_tuning").find(fmt::format("chosen: batch {}\n", tuned.at("batch").get<int64_t>())),
      std::string::npos)
      << tuned_bundle.info.at("batch_tuning");
  EXPECT_NEAR(tuned.at("items_per_s").get<double>(),
              tuned.at("batch").get<double>() * 1e3 / tuned.at("latency_ms").get<double>(), 1e-6);
  EXPECT_NE(slurp(temp_path("throughput") + "/best.md").find("| batch |"), std::string::npos);
  const nlohmann::json fixed = optimize("throughput", "--budget-minutes 0.0001 --objective throughput --batch 16");
  EXPECT_EQ(fixed.at("batch"), 16);
  EXPECT_EQ(fixed.at("candidates")[0].at("batch"), 16);
  EXPECT_EQ(slurp(temp_path("throughput") + "/best.md").find("| batch |"), std::string::npos);
}

// With fine-tuning, each channel-pruned net is fine-tuned plainly and distilled from the
// given net, and its QAT run trains the way that recovered more.
TEST(Optimize, AllowTrainingDistilsPrunedNetsFromTheGivenNet) {
  const std::string solver = temp_path("ft_solver.prototxt");
  std::ofstream(solver) << "net: \"" << kLenet
                        << "\"\nbase_lr: 0.005 momentum: 0.9 lr_policy: \"fixed\" random_seed: 1 display: 0\n";
  const nlohmann::json j =
      optimize("training", "--allow-training --solver " + solver + " --fine-tune-iterations 40 --budget-minutes 10");
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& c : j.at("candidates")) by_name[c.at("name").get<std::string>()] = c;
  int pruned_nets = 0;
  for (const auto& [name, c] : by_name) {
    if (!name.ends_with(", distilled") || name.find("QAT") != std::string::npos) continue;
    ++pruned_nets;
    const std::string net = name.substr(0, name.size() - std::string(", distilled").size());
    ASSERT_TRUE(by_name.contains(net + ", fine-tuned")) << j.dump(1);
    const nlohmann::json& plain = by_name[net + ", fine-tuned"];
    ASSERT_FALSE(c.contains("error")) << c.dump();
    EXPECT_EQ(c.at("techniques"), 2);
    // The distilled fine-tune trained against the given net's scores; the plain one did not.
    const fs::path taught = fs::path(c.at("weights").get<std::string>()).parent_path().parent_path().parent_path();
    const fs::path alone = fs::path(plain.at("weights").get<std::string>()).parent_path().parent_path().parent_path();
    EXPECT_NE(slurp((taught / "train.log").string()).find("Teacher " + kLenet), std::string::npos) << taught;
    EXPECT_EQ(slurp((alone / "train.log").string()).find("Teacher "), std::string::npos) << alone;
    EXPECT_NE(slurp(c.at("weights")), slurp(plain.at("weights")));
    // QAT follows the better of the two.
    const bool distil = c.at("accuracy").get<double>() > plain.at("accuracy").get<double>();
    EXPECT_TRUE(by_name.contains(net + " + QAT int8" + (distil ? ", distilled" : ""))) << j.dump(1);
    EXPECT_FALSE(by_name.contains(net + " + QAT int8" + (distil ? "" : ", distilled"))) << j.dump(1);  // not both
  }
  EXPECT_GE(pruned_nets, 1) << j.dump(1);
  EXPECT_TRUE(by_name.contains("unoptimised, fine-tuned (control)")) << j.dump(1);
  EXPECT_TRUE(by_name.contains("QAT int8")) << j.dump(1);
}

// QAT trains the way that recovered more, whichever way that is. The fine-tune hook makes
// one way useless (every weight 0: a constant output, 10% on Fashion-MNIST) and returns the
// pruned weights as they are for the other, so each run knows which way must win.
TEST(Optimize, QatFollowsTheFineTuneThatRecoveredMore) {
  for (const bool distillation_wins : {true, false}) {
    OptimizeOptions o;
    o.model = kLenet;
    o.weights = trained_lenet();
    o.work_dir = temp_path(distillation_wins ? "qat_taught" : "qat_plain");
    fs::remove_all(o.work_dir);
    fs::create_directories(o.work_dir);
    o.threads = 2;
    o.fine_tune = [&](const FineTune& f) {
      auto has = [&](const char* flag) { return std::find(f.flags.begin(), f.flags.end(), flag) != f.flags.end(); };
      if (has("--qat") || has("--teacher") == distillation_wins) return f.weights;
      std::string bytes = slurp(f.weights);
      uint64_t header = 0;
      std::memcpy(&header, bytes.data(), sizeof header);
      std::fill(bytes.begin() + static_cast<std::ptrdiff_t>(sizeof header + header), bytes.end(), '\0');
      fs::create_directories(f.dir);
      const std::string zeroed = f.dir + "/zeroed.safetensors";
      std::ofstream(zeroed, std::ios::binary) << bytes;
      return zeroed;
    };
    const OptimizeResult r = optimize(o);
    std::map<std::string, const Candidate*> by_name;
    for (const Candidate& c : r.candidates) by_name[c.name] = &c;
    int pruned_nets = 0;
    for (const auto& [name, c] : by_name) {
      if (!name.ends_with(", distilled") || name.find("QAT") != std::string::npos) continue;
      ++pruned_nets;
      const std::string net = name.substr(0, name.size() - std::string(", distilled").size());
      ASSERT_TRUE(by_name.contains(net + ", fine-tuned")) << net;
      const Candidate& winner = distillation_wins ? *c : *by_name.at(net + ", fine-tuned");
      const Candidate& loser = distillation_wins ? *by_name.at(net + ", fine-tuned") : *c;
      ASSERT_GT(winner.accuracy, loser.accuracy + 0.05) << net;  // the hook did what it says
      EXPECT_TRUE(by_name.contains(net + " + QAT int8" + (distillation_wins ? ", distilled" : ""))) << net;
      EXPECT_FALSE(by_name.contains(net + " + QAT int8" + (distillation_wins ? "" : ", distilled"))) << net;
    }
    EXPECT_GE(pruned_nets, 1);
  }
}

TEST(Optimize, BadOptionsAreOneClearError) {
  const std::string w = trained_lenet(), out = temp_path("bad") + "/best.bks";
  fs::create_directories(temp_path("bad"));
  const std::string head = "optimize --model " + kLenet + " --weights " + w + " ";
  const std::pair<std::string, std::string> cases[] = {
      {"--objective fast -o " + out, "--objective must be latency, throughput or size, got 'fast'"},
      {"--max-accuracy-drop -1 -o " + out, "--max-accuracy-drop must be in [0, 100] percentage points, got -1"},
      {"--budget-minutes 0 -o " + out, "--budget-minutes must be positive, got 0"},
      {"-o " + temp_path("bad") + "/best.onnx", "the best bundle's file name must end in .bks"},
      {"--allow-training -o " + out, "--allow-training needs --solver"},
      {"--solver " + kLenet + " -o " + out, "--solver is for --allow-training"},
      {"--batch auto -o " + out, "--batch auto is for --objective throughput; latency is measured at a batch you give"},
      {"--batch 8x -o " + out, "--batch must be a positive integer or 'auto', got '8x'"},
  };
  for (const auto& [flags, message] : cases) {
    const CmdResult r = run_cmd(head + flags);
    EXPECT_EQ(r.code, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << flags << "\n" << r.output;
  }
  const CmdResult missing = run_cmd("optimize --model " + kLenet + " --weights /nonexistent.safetensors -o " + out);
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_NE(missing.output.find("--weights /nonexistent.safetensors: no such file"), std::string::npos)
      << missing.output;
  // A deploy prototxt has no test data to score candidates on.
  const std::string deploy = temp_path("bad") + "/deploy.prototxt";
  std::ofstream(deploy) << "name: \"d\"\nlayer { name: \"data\" type: \"Input\" top: \"data\" input_param { shape { "
                           "dim: 1 dim: 800 } } }\nlayer { name: \"ip1\" type: \"InnerProduct\" bottom: \"data\" "
                           "top: \"ip1\" inner_product_param { num_output: 500 } }\n";
  const CmdResult d = run_cmd("optimize --model " + deploy + " --weights " + w + " -o " + out);
  EXPECT_EQ(d.code, 2) << d.output;
  EXPECT_NE(d.output.find(deploy + ": no TEST-phase data layer to score the candidates on"), std::string::npos)
      << d.output;
}

// The plot keeps every mark inside its frame: a candidate far below the budget sits on the
// bottom edge, and the front's line goes to that mark, not past the frame.
TEST(Optimize, PlotDrawsCandidatesFarBelowTheBudgetOnItsBottomEdge) {
  OptimizeResult r;
  r.objective = "latency";
  r.max_accuracy_drop = 0.5;
  auto add = [&](const std::string& name, double accuracy, double ms) {
    Candidate c;
    c.name = name;
    c.accuracy = accuracy;
    c.ms = ms;
    c.bytes = 1000;
    c.fits = accuracy >= 0.9 - 0.005;
    r.candidates.push_back(c);
  };
  add("base", 0.90, 1.0);
  add("fast but wrong", 0.40, 0.2);  // on the two-way front: nothing is faster
  add("int8", 0.899, 0.5);
  r.best = 2;
  const std::string svg = optimize_svg(r);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex("<polyline[^>]* points=\"([^\"]*)\""))) << svg;
  std::istringstream points(m[1].str());
  int n = 0;
  for (std::string xy; points >> xy; ++n) {
    const double y = std::stod(xy.substr(xy.find(',') + 1));
    EXPECT_GE(y, 40.0) << xy;        // the frame's top (kTop)
    EXPECT_LE(y, 460.0 - 60) << xy;  // its bottom (kH - kBottom)
  }
  EXPECT_EQ(n, 3) << svg;
  EXPECT_NE(svg.find("below the plot"), std::string::npos) << svg;
}

}  // namespace
}  // namespace bks::test
