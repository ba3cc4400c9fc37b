#include "engine/session.h"

#include "core/error.h"
#include "formats/caffe_net.h"

namespace bks {

InferenceSession::InferenceSession(const Bundle& b, const std::string& source, int threads, int64_t batch) {
  NetLoad nl;
  nl.param = b.net;
  nl.source = source;
  if (batch > 0)
    for (auto& l : *nl.param.mutable_layer())
      if (l.type() == "Input")
        for (auto& s : *l.mutable_input_param()->mutable_shape())
          if (s.dim_size() > 0) s.set_dim(0, batch);
  proto::NetState st;
  st.set_phase(proto::TEST);
  backend_ = std::make_unique<CpuBackend>(threads);
  net_ = std::make_unique<Net>(build_caffe_graph(nl, st), proto::TEST, store_, *backend_, 1);
  for (auto& p : store_.all()) {
    auto it = b.weights.find(p.key);
    if (it == b.weights.end()) input_error("{}: corrupt bundle: no tensor '{}'", source, p.key);
    if (it->second.shape() != p.data.shape() || it->second.dtype() != DType::f32)
      input_error("{}: corrupt bundle: tensor '{}' is {} {}, the graph needs F32 {}", source, p.key,
                  dtype_name(it->second.dtype()), shape_str(it->second.shape()), shape_str(p.data.shape()));
    p.data.copy_from(it->second);
  }
  inputs_ = net_->inputs();
  if (inputs_.empty()) input_error("{}: the bundle's graph has no Input layer", source);
  batch_ = net_->graph().values[inputs_[0]].shape.at(0);
}

InferenceSession::~InferenceSession() = default;

}  // namespace bks
