#include "server/deploy_files.h"

#include <google/protobuf/text_format.h>

#include "engine/deploy.h"
#include "formats/caffe_net.h"
#include "passes/deploy_model.h"

namespace bks::server {

std::string deploy_prototxt(const std::string& net_file) {
  DeployOptions o;
  o.model = net_file;
  o.random_weights = true;  // the layers, not their weights
  DeployModel m = load_deploy_model(o);
  strip_training(m);
  proto::NetParameter net;
  net.set_name("deploy");
  for (int n = 0; n < static_cast<int>(m.graph.nodes.size()); ++n) {
    proto::LayerParameter layer = caffe_layer(m.graph, n);
    // Training's learning-rate multipliers, fillers and zero loss weights mean nothing here.
    layer.clear_param();
    layer.clear_loss_weight();
    layer.mutable_convolution_param()->clear_weight_filler();
    layer.mutable_convolution_param()->clear_bias_filler();
    layer.mutable_inner_product_param()->clear_weight_filler();
    layer.mutable_inner_product_param()->clear_bias_filler();
    if (layer.convolution_param().ByteSizeLong() == 0) layer.clear_convolution_param();
    if (layer.inner_product_param().ByteSizeLong() == 0) layer.clear_inner_product_param();
    if (layer.has_input_param())
      for (auto& shape : *layer.mutable_input_param()->mutable_shape())
        if (shape.dim_size() > 0) shape.set_dim(0, 1);
    *net.add_layer() = layer;
  }
  std::string out;
  google::protobuf::TextFormat::PrintToString(net, &out);
  return out;
}

std::string labels_text(const std::vector<std::string>& classes) {
  std::string out;
  for (const std::string& c : classes) out += c + "\n";
  return out;
}

}  // namespace bks::server
