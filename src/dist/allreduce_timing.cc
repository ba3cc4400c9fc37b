#include "dist/allreduce_timing.h"

#include <algorithm>
#include <chrono>

namespace bks::dist {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

std::vector<AllreduceTiming> time_allreduce(Communicator& comm, const std::vector<size_t>& sizes, int rounds,
                                            const BucketOptions& buckets) {
  std::vector<AllreduceTiming> out;
  const double ring = comm.size() > 1 ? 2.0 * (comm.size() - 1) / comm.size() : 1.0;
  for (size_t bytes : sizes) {
    const size_t n = std::max<size_t>(bytes / sizeof(float), 1);
    std::vector<float> data(n, 1.f);
    // The bucketed path as training runs it: gradients of 1 MB that live in their buckets.
    std::vector<GradientSlot> slots;
    const size_t piece = (size_t{1} << 20) / sizeof(float);
    for (size_t off = 0; off < n; off += piece) slots.push_back({nullptr, std::min(piece, n - off)});
    GradientBuckets path(comm, slots, buckets);
    auto fill_buckets = [&] {
      for (int s = 0; s < static_cast<int>(slots.size()); ++s) {
        float* g = reinterpret_cast<float*>(static_cast<char*>(path.storage(s)->data()) + path.byte_offset(s));
        std::fill(g, g + slots[static_cast<size_t>(s)].n, 1.f);
      }
    };
    std::vector<double> plain, bucketed;
    double scratch = 0;
    for (int r = 0; r < rounds + 1; ++r) {  // the first round warms up
      comm.allreduce_sum(&scratch, 1);      // start together
      double t0 = now_s();
      comm.allreduce_sum(data.data(), n);
      double t1 = now_s();
      fill_buckets();  // keep the values from growing (not timed)
      comm.allreduce_sum(&scratch, 1);
      double t2 = now_s();
      for (int s = 0; s < static_cast<int>(slots.size()); ++s) path.ready(s);
      path.finish();
      double t3 = now_s();
      if (r > 0) plain.push_back(t1 - t0), bucketed.push_back(t3 - t2);
      std::fill(data.begin(), data.end(), 1.f);
    }
    AllreduceTiming t;
    t.bytes = n * sizeof(float);
    t.allreduce_s = median(plain);
    t.buckets_s = median(bucketed);
    t.allreduce_bus_gbs = t.allreduce_s > 0 ? ring * t.bytes / t.allreduce_s / 1e9 : 0;
    t.buckets_bus_gbs = t.buckets_s > 0 ? ring * t.bytes / t.buckets_s / 1e9 : 0;
    out.push_back(t);
  }
  return out;
}

}  // namespace bks::dist
