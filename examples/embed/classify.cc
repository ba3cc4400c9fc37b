// Embedding bakusoku: load a bundle written by `bakusoku deploy` and run it from two
// threads at once. Each thread classifies its own batches; the program checks every
// result against a single-threaded run of the same batch.
//
//   bakusoku deploy --model examples/fashion_mnist/lenet_train_test.prototxt
//       --weights runs/.../snapshots/iter_10000.safetensors -o lenet.bks
//   build/examples/embed/bakusoku_embed_example lenet.bks
#include <bakusoku/engine.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>
#include <vector>

namespace {

// A deterministic, different input per batch number.
std::vector<float> make_batch(const bakusoku::TensorInfo& in, int batch_number) {
  std::vector<float> x(static_cast<size_t>(in.count()));
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>((i * 2654435761u + batch_number * 40503u) % 256) / 256.f;
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s BUNDLE.bks\n", argv[0]);
    return 2;
  }
  std::unique_ptr<bakusoku::Engine> engine;
  try {
    engine = bakusoku::Engine::load(argv[1]);
  } catch (const bakusoku::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  const auto& in = engine->input(0);
  const auto& out = engine->output(0);
  std::printf("%s: input '%s' (%lld values), output '%s' (%lld values)\n", argv[1], in.name.c_str(),
              static_cast<long long>(in.count()), out.name.c_str(), static_cast<long long>(out.count()));

  constexpr int kBatches = 8, kRounds = 20;
  std::vector<std::vector<float>> inputs, expected;
  for (int b = 0; b < kBatches; ++b) {
    inputs.push_back(make_batch(in, b));
    expected.emplace_back(static_cast<size_t>(out.count()));
    engine->run({inputs[b].data()}, {expected[b].data()});
  }

  // Two threads, each running every batch many times, at the same time.
  int mismatches[2] = {0, 0};
  auto work = [&](int t) {
    std::vector<float> y(static_cast<size_t>(out.count()));
    for (int r = 0; r < kRounds; ++r)
      for (int b = t; b < kBatches + t; ++b) {
        int k = b % kBatches;
        engine->run({inputs[k].data()}, {y.data()});
        if (y != expected[k]) ++mismatches[t];
      }
  };
  std::thread a(work, 0), b(work, 1);
  a.join();
  b.join();

  const int64_t classes = out.shape.size() > 1 ? out.shape[1] : out.count();
  const float* p = expected[0].data();
  int64_t top = std::max_element(p, p + classes) - p;
  std::printf("batch 0, item 0: top-1 class %lld (score %.4f)\n", static_cast<long long>(top), p[top]);
  if (mismatches[0] || mismatches[1]) {
    std::printf("threads disagree with the single-threaded run: %d and %d mismatching batches\n", mismatches[0],
                mismatches[1]);
    return 1;
  }
  std::printf("2 threads x %d runs: every result equals the single-threaded run\n", kRounds * kBatches);
  return 0;
}
