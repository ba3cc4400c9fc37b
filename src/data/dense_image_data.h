// SegNet's DenseImageData (alexgkendall/caffe-segnet): a list of "image label_image" lines;
// each sample is the image (C x H x W, BGR as OpenCV reads it) and its label image's pixel
// values as class ids (1 x H x W). Resizing uses bilinear for the image and nearest
// neighbour for the labels (class ids must not blend); the random mirror and crop apply to
// both alike.
//
// The files are kept encoded in memory and decoded as batches are built.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/prefetcher.h"
#include "data/transform.h"

namespace bks {

struct DenseImageOptions {
  std::string root_folder;
  bool is_color = true;
  int64_t new_height = 0, new_width = 0;    // 0 and 0: each image's own size
  int64_t crop_height = 0, crop_width = 0;  // 0 and 0: no crop
};

struct DenseImagePair {
  std::string image_path, label_path;  // root_folder + the listed paths
  std::string image, label;            // the files' bytes
  int64_t line = 0;                    // in the list file
};

struct DenseImageList {
  std::string source;
  std::vector<DenseImagePair> pairs;
  int64_t channels = 3;
  // The samples' size before the crop (after new_height/new_width); with a crop, images may
  // differ in size and this is the first's.
  int64_t height = 0, width = 0;
};

// Reads (or returns the cached) list: every image and label file read, their headers checked.
// InputError naming the list file and line of a malformed line, a file that cannot be read
// or is not a PNG/JPEG, a label image whose size differs from its image's, images of
// differing sizes without a crop, or one smaller than the crop.
std::shared_ptr<const DenseImageList> open_dense_image_list(const std::string& list_file, const DenseImageOptions& o);
std::shared_ptr<DenseImageList> read_dense_image_list(const std::string& list_file, const DenseImageOptions& o);

struct DenseBatchOptions {
  int64_t batch = 1;
  bool mirror = false;  // dense_image_data_param.mirror: random flips of image and labels
  uint64_t seed = 0;
  std::string name;  // the layer, for its random streams
};

// Fills batch `step`: sample i is pair order.sample(step, i), decoded, flipped at random
// (mirror), cropped at a random offset (crop), its image through `transform` (mean and scale
// only; null: none) into `data` (batch x C x h x w) and its labels into `label` (batch x 1 x
// h x w). A pure function of (o.seed, o.name, step). RuntimeError naming a file that no
// longer decodes.
void build_dense_batch(const DenseImageList& list, const DenseImageOptions& io, const DenseBatchOptions& o,
                       const EpochOrder& order, const Transform* transform, int64_t step, float* data, float* label);

}  // namespace bks
