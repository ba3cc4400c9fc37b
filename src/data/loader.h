// Assembles batches from an in-memory dataset on a background thread: while step s
// computes, batch s+1 is transformed into a second buffer (its encoded images decoded on
// several threads).
//
// Which samples make batch s is a pure function of (seed, s), so a resumed run reads exactly
// the batches an uninterrupted run would have read.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "data/dataset.h"
#include "data/transform.h"

namespace bks {

struct LoaderOptions {
  int64_t batch = 1;
  bool shuffle = false;  // new permutation each epoch (HDF5Data's shuffle)
  int64_t skip = 0;      // samples skipped at the start (Caffe's rand_skip)
  uint64_t seed = 0;
  std::string name;  // the layer, for deriving random streams
  bool background = true;
};

class BatchLoader {
 public:
  // `data_field` is transformed (if `transform` given) into float; `extra_fields` are copied
  // as float (labels, HDF5 fields).
  BatchLoader(std::shared_ptr<const Dataset> ds, std::vector<int> fields, std::optional<Transform> transform,
              LoaderOptions opt);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Shape of each output for a full batch.
  std::vector<Shape> output_shapes() const;
  // Writes batch `step` into the outputs (one per field).
  void load(int64_t step, const std::vector<Tensor*>& out);
  int64_t sample_index(int64_t step, int64_t i) const;

 private:
  struct Buffers {
    int64_t step = -1;
    std::vector<Tensor> t;
    std::exception_ptr error;  // building `step` failed (an image that does not decode)
  };
  void build(int64_t step, Buffers& b) const;
  // Sample i of batch `step` (dataset sample `idx`) into b; `scratch` holds a decoded image.
  void build_sample(int64_t step, int64_t i, int64_t idx, Buffers& b, std::vector<uint8_t>& scratch) const;
  void worker();

  std::shared_ptr<const Dataset> ds_;
  std::vector<int> fields_;
  std::optional<Transform> transform_;
  LoaderOptions opt_;
  std::vector<Shape> shapes_;
  int64_t decode_threads_ = 1;
  Buffers front_, back_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t want_ = -1;
  bool busy_ = false, stop_ = false;
  mutable std::mutex perm_mu_;
  mutable int64_t perm_epoch_ = -1;
  mutable std::vector<int64_t> perm_;
  std::thread thread_;
};

}  // namespace bks
