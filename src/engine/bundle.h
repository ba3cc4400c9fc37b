// The deployment bundle (.bks): one safetensors file holding the optimised inference graph
// (Caffe prototxt text in the metadata), its blobs ("<layer>.<index>", as weights files
// name them) and what deploy decided (precision, passes, source). A bundle from a newer
// format version, a truncated or corrupt file, or a graph that does not parse is an
// InputError naming the file.
#pragma once

#include <map>
#include <string>

#include "caffe.pb.h"
#include "core/tensor.h"

namespace bks {

constexpr int kBundleVersion = 1;

struct Bundle {
  proto::NetParameter net;
  std::map<std::string, Tensor> weights;
  std::map<std::string, std::string> info;  // "precision", "source", "passes", ...
};

// Sets the batch (first) dimension of every Input layer's shapes.
void set_input_batch(proto::NetParameter& net, int64_t batch);

void save_bundle(const std::string& path, const Bundle& b);
Bundle load_bundle(const std::string& path);
// Whether the file starts like a bundle (so `test` and `bench` can tell it from a prototxt).
bool is_bundle_file(const std::string& path);

}  // namespace bks
