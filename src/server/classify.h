// Testing a trained model from the dashboard: one image (an upload, or a sample of a
// packed dataset) through a job's snapshot, top-5 classes with probabilities. The snapshot
// is deployed once (bakusoku deploy's passes, batch 1) and kept for the next request.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/store.h"

namespace bks::server {

struct ClassifyInput {
  std::string net_file, weights_file;  // the job's net.prototxt and snapshot
  std::vector<int64_t> shape;          // C, H, W the network reads
  std::vector<std::string> classes;
  std::string dataset_dir;  // its packed splits (train.h5, val.h5)
};

class Classifier {
 public:
  // One image (bytes, C x H x W) in the network's shape, scaled like the training data
  // (1/256): the top-5 classes.
  json classify_pixels(const ClassifyInput& in, const uint8_t* chw);
  // Many such images: each one's top-5 (as classify_pixels' "top"), in batches when there
  // are enough of them to pay for a batched session.
  std::vector<json> classify_many(const ClassifyInput& in, const std::vector<const uint8_t*>& images);
  // Every sample of a split (`count` images of C x H x W bytes, `labels`): accuracy,
  // per-class accuracy and the confusion matrix (rows: true class, columns: predicted).
  json evaluate(const ClassifyInput& in, const uint8_t* images, const float* labels, int64_t count);
  // One sample through the unoptimised graph: for every layer its output as the layer
  // produced it (before any later in-place layer wrote over it) and its first parameter
  // blob, each with statistics, a histogram and an image (layer_view.h).
  json visualize(const ClassifyInput& in, const uint8_t* chw);

 private:
  struct Entry;
  // batch: images per run; plain: every value kept, no fusion (for visualize).
  std::shared_ptr<Entry> session(const ClassifyInput& in, int64_t batch = 1, bool plain = false);
  std::mutex mu_;
  std::vector<std::shared_ptr<Entry>> cache_;  // most recent last; a few snapshots at most
};

}  // namespace bks::server
