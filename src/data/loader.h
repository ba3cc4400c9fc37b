// Assembles batches from an in-memory dataset on a background thread: while step s
// computes, batch s+1 is transformed into a second buffer (its encoded images decoded on
// several threads).
//
// Which samples make batch s is a pure function of (seed, s), so a resumed run reads exactly
// the batches an uninterrupted run would have read.
#pragma once

#include <memory>
#include <optional>

#include "data/dataset.h"
#include "data/prefetcher.h"
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
  // Batch `step` into `out` (one tensor per field); Prefetcher calls it, in the background.
  void build(int64_t step, std::vector<Tensor>& out) const;
  // Sample i of batch `step` (dataset sample `idx`) into out; `scratch` holds a decoded image.
  void build_sample(int64_t step, int64_t i, int64_t idx, std::vector<Tensor>& out,
                    std::vector<uint8_t>& scratch) const;

  std::shared_ptr<const Dataset> ds_;
  std::vector<int> fields_;
  std::optional<Transform> transform_;
  LoaderOptions opt_;
  std::vector<Shape> shapes_;
  int64_t decode_threads_ = 1;
  std::unique_ptr<EpochOrder> order_;
  std::unique_ptr<Prefetcher> prefetch_;  // last: its thread stops before the rest is destroyed
};

}  // namespace bks
