// What a deployed model ships with besides its bundle: a Caffe deploy prototxt of the
// trained net, and the dataset's labels.
#pragma once

#include <string>
#include <vector>

namespace bks::server {

// The train/test prototxt `net_file` as Caffe users deploy it: the TEST phase with its data
// layers as one Input (batch 1), what only training needs removed, SoftmaxWithLoss as
// Softmax "prob" (the deployment passes' strip-training, written back as layers).
std::string deploy_prototxt(const std::string& net_file);

// One class name per line, in label order (the line number is the class index).
std::string labels_text(const std::vector<std::string>& classes);

}  // namespace bks::server
