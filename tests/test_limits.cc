// Limits on crafted input and what a kill leaves behind: shapes whose products overflow or
// exceed the tensor bound are input errors naming the layer, files are checked against their
// declared sizes before anything is allocated, temporaries and snapshots are cleaned up.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.h>

#include "core/file_io.h"
#include "core/isolated_call.h"
#include "core/signals.h"
#include "core/tensor.h"
#include "formats/caffe_net.h"
#include "formats/prototxt.h"
#include "formats/safetensors.h"
#include "input_error.h"
#include "ops/shape_inference.h"
#include "runtime/param_binding.h"
#include "train/run_dir.h"

namespace bks {
namespace {
namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("bks_limits_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Shape inference of a prototxt net, as deploy and the dashboard's validation run it.
void infer(const std::string& text) {
  NetLoad nl;
  nl.source = "net.prototxt";
  parse_prototxt_string(text, nl.source, nl.param, &nl.layer_lines);
  proto::NetState st;
  st.set_phase(proto::TEST);
  Graph g = build_caffe_graph(nl, st);
  infer_shapes(g, proto::TEST);
}

TEST(ShapeLimits, ProductsThatOverflowAreRefused) {
  EXPECT_EQ(shape_problem({2, 3, 4}, 4), "");
  EXPECT_EQ(shape_problem({0, 1 << 20}, 4), "");
  // 2^32 * 2^32 wraps to 0 in 64 bits.
  EXPECT_NE(shape_problem({int64_t{1} << 32, int64_t{1} << 32}, 1), "");
  // A zero dimension does not excuse the others: their products are taken too.
  EXPECT_NE(shape_problem({0, int64_t{1} << 40, int64_t{1} << 40}, 4), "");
  EXPECT_NE(shape_problem({-1, 4}, 4), "");
  EXPECT_NE(shape_problem({kMaxTensorBytes / 4 + 1}, 4), "");
  EXPECT_EQ(shape_problem({kMaxTensorBytes / 4}, 4), "");
  int64_t p = 0;
  EXPECT_FALSE(checked_product({int64_t{1} << 62, 4}, INT64_MAX, p));
  EXPECT_TRUE(checked_product({3, 5}, 15, p));
  EXPECT_EQ(p, 15);
  EXPECT_THROW(Tensor({int64_t{1} << 33, int64_t{1} << 33}), InputError);
  // More than the machine's memory (1 TiB here) is a clear error, not the OOM killer.
  EXPECT_THROW(Storage(size_t{1} << 40, Device{}), RuntimeError);
}

TEST(ShapeLimits, InputDimensionsThatWrapNameTheLayer) {
  // 65536^4 = 2^64 wraps to 0; it used to reach Softmax with a 0-byte buffer.
  std::string m = test::input_error_of([] {
    infer(R"(layer { name: "data" type: "Input" top: "data"
                     input_param { shape { dim: 65536 dim: 65536 dim: 65536 dim: 65536 } } }
             layer { name: "prob" type: "Softmax" bottom: "data" top: "prob" })");
  });
  EXPECT_NE(m.find("net.prototxt:1: layer 'data' (Input)"), std::string::npos) << m;
  EXPECT_NE(m.find("too large"), std::string::npos) << m;
}

TEST(ShapeLimits, ReshapeCountsCannotWrap) {
  // (2^62 + 2) * 4 wraps to 8, the input's count: the count check passed and the kernel
  // wrote through a 32-byte buffer. With a -1 the wrapped count divided the input's.
  for (const char* dims : {"dim: 4611686018427387906 dim: 4", "dim: 4611686018427387906 dim: 4 dim: -1"}) {
    std::string m = test::input_error_of([&] {
      infer(
          fmt::format(R"(layer {{ name: "data" type: "Input" top: "data" input_param {{ shape {{ dim: 1 dim: 8 }} }} }}
                           layer {{ name: "r" type: "Reshape" bottom: "data" top: "r" reshape_param {{ shape {{ {} }} }} }})",
                      dims));
    });
    EXPECT_NE(m.find("layer 'r' (Reshape)"), std::string::npos) << dims << ": " << m;
  }
}

TEST(ShapeLimits, ParameterShapesAreBoundedBeforeAllocation) {
  // 2^31-1 outputs of a 3x3 kernel over 2^20 channels: far over the bound, caught by name.
  std::string m = test::input_error_of([] {
    NetLoad nl;
    nl.source = "net.prototxt";
    parse_prototxt_string(
        R"(layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 1048576 dim: 3 dim: 3 } } }
                             layer { name: "c" type: "Convolution" bottom: "data" top: "c"
                                     convolution_param { num_output: 2147483647 kernel_size: 3 } })",
        nl.source, nl.param, &nl.layer_lines);
    proto::NetState st;
    st.set_phase(proto::TEST);
    Graph g = build_caffe_graph(nl, st);
    infer_shapes(g, proto::TEST);
    ParamStore store;
    bind_parameters(g, store, 1, declared_params(g, proto::TEST), false);
  });
  EXPECT_NE(m.find("layer 'c' (Convolution)"), std::string::npos) << m;
}

// Peak resident memory of this process, in MB.
long peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

void write_safetensors_header(const fs::path& path, const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  std::ofstream(path, std::ios::binary) << bytes << header << data;
}

TEST(SafetensorsLimits, ByteRangeIsCheckedBeforeAllocating) {
  fs::path d = scratch("st");
  // 1 GiB declared, 4 bytes present: refused without touching 1 GiB.
  write_safetensors_header(d / "big.safetensors",
                           R"({"w":{"dtype":"F32","shape":[16384,16384],"data_offsets":[0,1073741824]}})", "abcd");
  const long before = peak_rss_mb();
  std::string m = test::input_error_of([&] { load_safetensors((d / "big.safetensors").string()); });
  EXPECT_NE(m.find("tensor 'w'"), std::string::npos) << m;
  EXPECT_LT(peak_rss_mb() - before, 256) << "the declared size was allocated before the check";
  // Shapes over the bound, offsets of the wrong type and non-string metadata: input errors.
  for (const char* header :
       {R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
        R"({"w":{"dtype":"F32","shape":[1],"data_offsets":["0","4"]}})",
        R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", R"({"__metadata__":{"iter":[[[1]]]}})"}) {
    write_safetensors_header(d / "bad.safetensors", header, "abcd");
    EXPECT_NE(test::input_error_of([&] { load_safetensors((d / "bad.safetensors").string()); }).find("bad.safetensors"),
              std::string::npos)
        << header;
  }
}

TEST(AtomicWrites, TemporariesAreUniqueAndStaleOnesAreRemoved) {
  fs::path d = scratch("tmp");
  write_file_atomic((d / "a.txt").string(), "new");
  EXPECT_EQ(read_file((d / "a.txt").string(), "test"), "new");
  // A writer killed mid-write (a process that is gone) and one still writing (this one).
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  std::ofstream(d / fmt::format("a.txt.tmp-{}-0", dead)) << "torn";
  std::ofstream(d / fmt::format("a.txt.tmp-{}-7", getpid())) << "in progress";
  EXPECT_EQ(remove_stale_temporaries(d.string()), 1);
  EXPECT_FALSE(fs::exists(d / fmt::format("a.txt.tmp-{}-0", dead)));
  EXPECT_TRUE(fs::exists(d / fmt::format("a.txt.tmp-{}-7", getpid())));
  EXPECT_TRUE(fs::exists(d / "a.txt"));
}

TEST(RunDir, PruningKeepsTheNewestSnapshots) {
  const fs::path run = scratch("prune"), d = run / "snapshots";
  fs::create_directories(d);
  for (int it : {2, 10, 4, 8})
    for (const char* ext : {".safetensors", ".solverstate"}) std::ofstream(d / fmt::format("iter_{}{}", it, ext));
  std::ofstream(d / "notes.txt");
  EXPECT_EQ(prune_snapshots(run.string(), 0), 0);
  EXPECT_EQ(prune_snapshots(run.string(), 2), 2);
  for (int it : {2, 4}) EXPECT_FALSE(fs::exists(d / fmt::format("iter_{}.solverstate", it))) << it;
  for (int it : {8, 10}) {
    EXPECT_TRUE(fs::exists(d / fmt::format("iter_{}.solverstate", it))) << it;
    EXPECT_TRUE(fs::exists(d / fmt::format("iter_{}.safetensors", it))) << it;
  }
  EXPECT_TRUE(fs::exists(d / "notes.txt"));
}

TEST(RunDir, ResumeDropsWhatItWritesAgain) {
  fs::path d = scratch("metrics");
  const fs::path m = d / "metrics.jsonl";
  std::ofstream(m) << R"({"iter":0,"phase":"test"})"
                      "\n"
                   << R"({"iter":100,"phase":"train"})"
                      "\n"
                   << R"({"iter":100,"phase":"test"})"
                      "\n"
                   << R"({"iter":200,"phase":"train"})"
                      "\n"
                   << R"({"iter":250,"pha)";  // torn by a kill
  EXPECT_EQ(drop_superseded_metrics(m.string(), 100), 3);
  EXPECT_EQ(read_file(m.string(), "metrics"), R"({"iter":0,"phase":"test"})"
                                              "\n"
                                              R"({"iter":100,"phase":"train"})"
                                              "\n");
  EXPECT_EQ(drop_superseded_metrics(m.string(), 100), 0);
}

// run_isolated: what the child writes comes back, its errors keep their type and message,
// its death is one InputError naming the subject, and its address space is bounded.
TEST(IsolatedCall, ResultsErrorsCrashesAndMemory) {
  ChildOutput out = run_isolated("f.h5", "lib", [](ChildWriter& w) {
    w.value(int64_t{42});
    w.write("abc", 3);
  });
  ChildReader in(out, "f.h5");
  EXPECT_EQ(in.value<int64_t>(), 42);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(in.bytes(3)), 3), "abc");
  EXPECT_NE(test::input_error_of([&] { in.bytes(1); }).find("f.h5: the reading process returned a truncated result"),
            std::string::npos);

  EXPECT_EQ(test::input_error_of(
                [] { run_isolated("f.h5", "lib", [](ChildWriter&) { input_error("f.h5: bad field 'x'"); }); }),
            "f.h5: bad field 'x'");
  EXPECT_THROW(run_isolated("f.h5", "lib", [](ChildWriter&) { runtime_error("disk full"); }), RuntimeError);
  const std::string crash =
      test::input_error_of([] { run_isolated("f.h5", "libx", [](ChildWriter&) { std::raise(SIGSEGV); }); });
  // (killed by SIGSEGV; exit status 1 under AddressSanitizer, which reports the signal)
  EXPECT_NE(crash.find("f.h5: libx crashed while reading it ("), std::string::npos) << crash;

  // Mapping 4 GiB (not touched) fails past the headroom, and succeeds once allowed. The
  // child tells which by its result; a sanitizer may end it instead of returning null.
  auto maps_4gib = [](bool allow) {
    try {
      ChildOutput o = run_isolated("f.h5", "lib", [allow](ChildWriter& w) {
        if (allow) allow_child_memory(uint64_t{5} << 30);
        void* volatile p = std::malloc(size_t{4} << 30);  // volatile: clang may elide an unused malloc
        w.value(static_cast<uint8_t>(p != nullptr));
        std::free(p);
      });
      ChildReader r(o, "f.h5");
      return r.value<uint8_t>() == 1;
    } catch (const InputError&) {
      return false;
    }
  };
  EXPECT_FALSE(maps_4gib(false));
  EXPECT_TRUE(maps_4gib(true));
}

// Spams the process with SIGHUP while oneDNN's JIT sgemm multiplies on this thread and on
// OpenMP's, then exits 0 when every product was exact and the interrupt was seen. oneDNN 2.x
// points the stack pointer into a heap buffer inside that kernel: a signal handled there
// writes its frame over the heap (a training job stopped by its server saved gradients with
// garbage in them, or glibc aborted with "corrupted size vs. prev_size").
[[noreturn]] void multiply_under_interrupts() {
  install_interrupt_handler();
  const int64_t m = 256, n = 256, k = 512;
  std::vector<float> a(m * k), b(k * n), want(m * n), got(m * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 13) * 0.01f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 7) * 0.02f;
  auto multiply = [&](float* c) { dnnl_sgemm('N', 'N', m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, c, n); };
  multiply(want.data());
  // Threads started now inherit the blocked signals, as OpenMP's and the prefetcher's do.
  bool inherited = false;
  std::thread([&] {
    sigset_t blocked;
    pthread_sigmask(SIG_BLOCK, nullptr, &blocked);
    inherited = sigismember(&blocked, SIGINT) && sigismember(&blocked, SIGTERM) && sigismember(&blocked, SIGHUP);
  }).join();
  std::atomic<bool> stop{false};
  std::thread spam([&] {
    while (!stop) ::kill(::getpid(), SIGHUP);
  });
  int wrong = 0;
  for (int it = 0; it < 1000; ++it) {
    multiply(got.data());
    wrong += std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) != 0;
    std::vector<float> churn(static_cast<size_t>(1000 + it * 7));  // malloc checks its bookkeeping
    churn[0] = 1.f;
  }
  stop = true;
  spam.join();
  const bool seen = interrupt_requested();
  std::fprintf(stderr, "inherited %d, wrong products %d, interrupt seen %d\n", inherited, wrong, seen);
  std::_Exit(inherited && wrong == 0 && seen ? 0 : 1);
}

TEST(Signals, InterruptsNeverRunOnComputingThreads) {
  // In a fresh process: threads an earlier test started would not have the signals blocked.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(multiply_under_interrupts(), testing::ExitedWithCode(0), "wrong products 0, interrupt seen 1");
}

}  // namespace
}  // namespace bks
