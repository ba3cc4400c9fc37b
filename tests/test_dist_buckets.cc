// GradientBuckets against a scripted communicator: the layout (a small first bucket, then
// buckets of about the configured size, in the order gradients become ready), reductions
// started strictly in that order as buckets fill, the mean written back, and --dist-debug's
// check that every rank reduces the same bucket.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>

#include "core/error.h"
#include "dist/gradient_buckets.h"

namespace bks::dist {
namespace {

class DonePending final : public Pending {
 public:
  bool done() override { return true; }
  void wait() override {}
};

// Two ranks whose other rank always holds the same values: a sum doubles them. Records the
// size of each reduction started; `other_bucket` is what the other rank says it reduces.
class ScriptedWorld final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 2; }
  int hosts() const override { return 1; }
  std::string host() const override { return "here"; }
  void broadcast(void*, size_t, int) override {}
  void allreduce_sum(double* v, size_t n) override {
    for (size_t i = 0; i < n; ++i) v[i] *= 2;
  }
  void allreduce_sum(float* v, size_t n) override {
    for (size_t i = 0; i < n; ++i) v[i] *= 2;
  }
  std::unique_ptr<Pending> iallreduce_sum(float* v, size_t n) override {
    started.push_back(n);
    for (size_t i = 0; i < n; ++i) v[i] *= 2;
    return std::make_unique<DonePending>();
  }
  std::vector<uint64_t> allgather(uint64_t value) override { return {value, other_bucket ? other_bucket : value}; }
  [[noreturn]] void abort(int code) override { throw std::runtime_error("abort"); }
  std::vector<size_t> started;
  uint64_t other_bucket = 0;
};

TEST(GradientBuckets, SmallFirstBucketThenFullOnesInReadyOrder) {
  // Gradients of 100, 300, 200, 500 and 50 floats; first bucket 1000 bytes, then 2000.
  std::vector<std::vector<float>> g = {std::vector<float>(100, 1.f), std::vector<float>(300, 2.f),
                                       std::vector<float>(200, 3.f), std::vector<float>(500, 4.f),
                                       std::vector<float>(50, 5.f)};
  std::vector<GradientSlot> slots;
  for (size_t i = 0; i < g.size(); ++i) slots.push_back({g[i].data(), g[i].size()});
  ScriptedWorld w;
  GradientBuckets b(w, slots, BucketOptions{1000, 2000, false});
  // 400 B < 1000, then 1600 B: bucket 0 = {0, 1}; 800 B, then 2800 B: bucket 1 = {2, 3}; {4}.
  ASSERT_EQ(b.buckets(), 3);
  EXPECT_EQ(b.bucket_elements(0), 400u);
  EXPECT_EQ(b.bucket_elements(1), 700u);
  EXPECT_EQ(b.bucket_elements(2), 50u);
  // Bucket 1 full before bucket 0: nothing starts until bucket 0 is full, then both, in order.
  b.ready(2);
  b.ready(3);
  EXPECT_TRUE(w.started.empty());
  b.ready(0);
  EXPECT_TRUE(w.started.empty());
  b.ready(1);
  EXPECT_EQ(w.started, (std::vector<size_t>{400, 700}));
  // The gradients keep their values until finish() writes the mean back.
  EXPECT_EQ(g[0][0], 1.f);
  g[4][0] = 7.f;  // the last gradient, never declared ready: taken as it is at finish()
  b.finish();
  EXPECT_EQ(w.started, (std::vector<size_t>{400, 700, 50}));
  for (size_t i = 0; i < 4; ++i)
    for (float v : g[i]) ASSERT_EQ(v, static_cast<float>(i + 1)) << i;  // (x + x) / 2
  EXPECT_EQ(g[4][0], 7.f);
  EXPECT_EQ(g[4][1], 5.f);
  // A second step starts over with the same layout.
  w.started.clear();
  for (int i = 0; i < 5; ++i) b.ready(i);
  b.finish();
  EXPECT_EQ(w.started, (std::vector<size_t>{400, 700, 50}));
}

TEST(GradientBuckets, TheLastBucketIsSmallLikeTheFirst) {
  // Four gradients of 1200 bytes; first (and last) buckets 1000 bytes, the others 10000:
  // the gradients backward completes last get a bucket of their own instead of joining a
  // large one that could only start at the very end.
  std::vector<std::vector<float>> g(4, std::vector<float>(300, 1.f));
  std::vector<GradientSlot> slots;
  for (size_t i = 0; i < g.size(); ++i) slots.push_back({g[i].data(), g[i].size()});
  ScriptedWorld w;
  GradientBuckets b(w, slots, BucketOptions{1000, 10000, false});
  ASSERT_EQ(b.buckets(), 3);
  EXPECT_EQ(b.bucket_elements(0), 300u);
  EXPECT_EQ(b.bucket_elements(1), 600u);
  EXPECT_EQ(b.bucket_elements(2), 300u);
  for (int i = 0; i < 3; ++i) b.ready(i);
  EXPECT_EQ(w.started, (std::vector<size_t>{300, 600})) << "the middle bucket waited for the last gradient";
  b.finish();
}

TEST(GradientBuckets, GradientsThatLiveInTheirBucketsAreReducedInPlace) {
  // Two gradients with no memory of their own: they are written where the buckets keep
  // them (what training binds its gradient tensors to), reduced, and averaged there.
  ScriptedWorld w;
  GradientBuckets b(w, {{nullptr, 3}, {nullptr, 2}}, BucketOptions{8, 8, false});
  ASSERT_EQ(b.buckets(), 2);
  auto at = [&](int slot) {
    return reinterpret_cast<float*>(static_cast<char*>(b.storage(slot)->data()) + b.byte_offset(slot));
  };
  for (int i = 0; i < 3; ++i) at(0)[i] = 1.f + i;
  for (int i = 0; i < 2; ++i) at(1)[i] = 10.f + i;
  b.ready(0);
  b.ready(1);
  b.finish();
  EXPECT_EQ(w.started, (std::vector<size_t>{3, 2}));
  EXPECT_EQ(at(0)[2], 3.f);  // (x + x) / 2
  EXPECT_EQ(at(1)[1], 11.f);
}

TEST(GradientBuckets, DebugChecksEveryRankReducesTheSameBucket) {
  std::vector<float> a(10, 1.f), c(10, 1.f);
  ScriptedWorld w;
  GradientBuckets b(w, {{a.data(), a.size()}, {c.data(), c.size()}}, BucketOptions{40, 40, true});
  b.ready(0);  // same bucket on both ranks: fine
  EXPECT_EQ(w.started.size(), 1u);
  w.other_bucket = (uint64_t{5} << 40) | 99;  // the other rank is at bucket 5 of 99 values
  try {
    b.ready(1);
    FAIL() << "a rank reducing another bucket was not caught";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 reduces bucket 1 (10 values), rank 1 bucket 5 (99 values)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(w.started.size(), 1u);  // and the mismatched reduction was never started
}

}  // namespace
}  // namespace bks::dist
