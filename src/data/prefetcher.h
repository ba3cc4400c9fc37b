// Batch building for data layers: while step s computes, the next batch it will be asked
// for is built on a background thread into a second buffer (s + 1 for one process; under N
// data-parallel ranks each rank reads every N-th batch, s + N, learnt from the steps asked). BatchLoader builds rows of
// an in-memory Dataset on it; WindowData (sampled windows) and DenseImageData (decoded image pairs) their own batches.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor.h"

namespace bks {

class Prefetcher {
 public:
  // Fills the tensors (one per output, of the shapes given) with batch `step`.
  using Build = std::function<void(int64_t step, std::vector<Tensor>& out)>;
  Prefetcher(std::vector<Shape> shapes, Build build, bool background = true);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Writes batch `step` into the outputs (null ones are skipped), then starts the next one:
  // step + (step - the step before), or step + 1 at first. An error building a batch in the
  // background is thrown here, by the step that needs it.
  void load(int64_t step, const std::vector<Tensor*>& out);

 private:
  struct Buffers {
    int64_t step = -1;
    std::vector<Tensor> t;
    std::exception_ptr error;
  };
  void build(int64_t step, Buffers& b) const;
  void worker();

  Build build_;
  bool background_;
  Buffers front_, back_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t want_ = -1;
  int64_t last_step_ = -1;  // the step load() was last asked for
  bool busy_ = false, stop_ = false;
  std::thread thread_;
};

// Which sample is item i of batch `step`: sequential from `skip`, wrapping; with `shuffle`, a
// new permutation each epoch, derived from (seed, name, epoch). A pure function of its
// arguments, so resumed runs read the batches uninterrupted ones read (BatchLoader's order).
class EpochOrder {
 public:
  EpochOrder(int64_t size, int64_t batch, bool shuffle, int64_t skip, uint64_t seed, std::string name);
  int64_t sample(int64_t step, int64_t i) const;

 private:
  int64_t size_, batch_, skip_;
  bool shuffle_;
  uint64_t seed_;
  std::string name_;
  mutable std::mutex mu_;
  mutable int64_t epoch_ = -1;
  mutable std::vector<int64_t> perm_;
};

}  // namespace bks
