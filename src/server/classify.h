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
};

class Classifier {
 public:
  // Image bytes (PNG or JPEG; ApiError 400 naming "image" when they are not one): resized to
  // the network's input, scaled like the training data (1/256).
  json classify_image(const ClassifyInput& in, const std::string& bytes);
  // One sample (bytes, C x H x W) already in the network's shape.
  json classify_pixels(const ClassifyInput& in, const uint8_t* chw);

 private:
  struct Entry;
  std::shared_ptr<Entry> session(const ClassifyInput& in);
  std::mutex mu_;
  std::vector<std::shared_ptr<Entry>> cache_;  // most recent last; a few snapshots at most
};

}  // namespace bks::server
