#include "formats/caffe_upgrade.h"

#include <map>

#include "core/error.h"
#include "core/log.h"
#include "formats/prototxt.h"

namespace bks {
namespace {

using V1 = proto::V1LayerParameter;

std::string at(const std::string& where, const std::vector<int>* lines, int i) {
  return lines && i >= 0 && i < static_cast<int>(lines->size()) ? fmt::format("{}:{}", where, (*lines)[i]) : where;
}

// V0's string types as V1 enums; any other V0 type is an error, as in Caffe.
const std::map<std::string, V1::LayerType>& v0_types() {
  static const std::map<std::string, V1::LayerType> types{{"accuracy", V1::ACCURACY},
                                                          {"bnll", V1::BNLL},
                                                          {"concat", V1::CONCAT},
                                                          {"conv", V1::CONVOLUTION},
                                                          {"data", V1::DATA},
                                                          {"dropout", V1::DROPOUT},
                                                          {"euclidean_loss", V1::EUCLIDEAN_LOSS},
                                                          {"flatten", V1::FLATTEN},
                                                          {"hdf5_data", V1::HDF5_DATA},
                                                          {"hdf5_output", V1::HDF5_OUTPUT},
                                                          {"im2col", V1::IM2COL},
                                                          {"images", V1::IMAGE_DATA},
                                                          {"infogain_loss", V1::INFOGAIN_LOSS},
                                                          {"innerproduct", V1::INNER_PRODUCT},
                                                          {"lrn", V1::LRN},
                                                          {"multinomial_logistic_loss", V1::MULTINOMIAL_LOGISTIC_LOSS},
                                                          {"pool", V1::POOLING},
                                                          {"relu", V1::RELU},
                                                          {"sigmoid", V1::SIGMOID},
                                                          {"softmax", V1::SOFTMAX},
                                                          {"softmax_loss", V1::SOFTMAX_LOSS},
                                                          {"split", V1::SPLIT},
                                                          {"tanh", V1::TANH},
                                                          {"window_data", V1::WINDOW_DATA}};
  return types;
}

// V1's enum types as the current string types. Types bakusoku does not implement keep
// their Caffe name, so the graph builder refuses them as it refuses any unknown type.
std::string v1_type_name(V1::LayerType t) {
  static const std::map<V1::LayerType, const char*> names{{V1::NONE, ""},
                                                          {V1::ABSVAL, "AbsVal"},
                                                          {V1::ACCURACY, "Accuracy"},
                                                          {V1::ARGMAX, "ArgMax"},
                                                          {V1::BNLL, "BNLL"},
                                                          {V1::CONCAT, "Concat"},
                                                          {V1::CONTRASTIVE_LOSS, "ContrastiveLoss"},
                                                          {V1::CONVOLUTION, "Convolution"},
                                                          {V1::DECONVOLUTION, "Deconvolution"},
                                                          {V1::DATA, "Data"},
                                                          {V1::DROPOUT, "Dropout"},
                                                          {V1::DUMMY_DATA, "DummyData"},
                                                          {V1::EUCLIDEAN_LOSS, "EuclideanLoss"},
                                                          {V1::ELTWISE, "Eltwise"},
                                                          {V1::EXP, "Exp"},
                                                          {V1::FLATTEN, "Flatten"},
                                                          {V1::HDF5_DATA, "HDF5Data"},
                                                          {V1::HDF5_OUTPUT, "HDF5Output"},
                                                          {V1::HINGE_LOSS, "HingeLoss"},
                                                          {V1::IM2COL, "Im2col"},
                                                          {V1::IMAGE_DATA, "ImageData"},
                                                          {V1::INFOGAIN_LOSS, "InfogainLoss"},
                                                          {V1::INNER_PRODUCT, "InnerProduct"},
                                                          {V1::LRN, "LRN"},
                                                          {V1::MEMORY_DATA, "MemoryData"},
                                                          {V1::MULTINOMIAL_LOGISTIC_LOSS, "MultinomialLogisticLoss"},
                                                          {V1::MVN, "MVN"},
                                                          {V1::POOLING, "Pooling"},
                                                          {V1::POWER, "Power"},
                                                          {V1::RELU, "ReLU"},
                                                          {V1::SIGMOID, "Sigmoid"},
                                                          {V1::SIGMOID_CROSS_ENTROPY_LOSS, "SigmoidCrossEntropyLoss"},
                                                          {V1::SILENCE, "Silence"},
                                                          {V1::SOFTMAX, "Softmax"},
                                                          {V1::SOFTMAX_LOSS, "SoftmaxWithLoss"},
                                                          {V1::SPLIT, "Split"},
                                                          {V1::SLICE, "Slice"},
                                                          {V1::TANH, "TanH"},
                                                          {V1::WINDOW_DATA, "WindowData"},
                                                          {V1::THRESHOLD, "Threshold"}};
  auto it = names.find(t);
  return it == names.end() ? std::string() : it->second;
}

std::string v1_name(const V1& l) { return l.has_layer() ? l.layer().name() : l.name(); }
std::string v0_type(const V1& l) { return l.has_layer() ? l.layer().type() : std::string(); }

// Caffe's UpgradeV0PaddingLayers: a "padding" layer disappears into the convolution or
// pooling it feeds (its pad, its bottom). `lines` follows the layers that remain. Layers
// move rather than copy: a .caffemodel's blobs can be most of the machine's memory.
void fold_v0_padding(proto::NetParameter& net, const std::string& where, std::vector<int>* lines) {
  std::map<std::string, int> last_top;  // blob -> layer that last wrote it; -1: a net input
  for (const auto& in : net.input()) last_top[in] = -1;
  google::protobuf::RepeatedPtrField<V1> old;
  old.Swap(net.mutable_layers());
  std::vector<bool> padding(static_cast<size_t>(old.size()));
  for (int i = 0; i < old.size(); ++i) padding[i] = v0_type(old.Get(i)) == "padding";
  std::vector<int> kept_lines;
  for (int i = 0; i < old.size(); ++i) {
    const std::string here = at(where, lines, i);
    V1* l = old.Mutable(i);
    if (!padding[i]) {  // kept: from here on `l` is the net's copy (padding layers stay in `old`)
      V1* kept = net.add_layers();
      kept->Swap(l);
      l = kept;
      if (lines && i < static_cast<int>(lines->size())) kept_lines.push_back((*lines)[i]);
    }
    const std::string type = v0_type(*l);
    for (int j = 0; j < l->bottom_size(); ++j) {
      auto it = last_top.find(l->bottom(j));
      if (it == last_top.end())
        input_error("{}: layer '{}': bottom '{}' is not produced by any earlier layer", here, v1_name(*l),
                    l->bottom(j));
      if (it->second < 0 || !padding[it->second]) continue;
      const V1& src = old.Get(it->second);
      if (type != "conv" && type != "pool")
        input_error(
            "{}: layer '{}' ({}): its bottom comes from the V0 padding layer '{}', which may only feed a "
            "convolution or pooling (Caffe folds the padding into it)",
            here, v1_name(*l), type, v1_name(src));
      if (l->bottom_size() != 1 || src.bottom_size() != 1 || src.top_size() != 1)
        input_error(
            "{}: layer '{}': V0 padding layer '{}' and the layer it feeds must each have one bottom "
            "(and the padding one top) to fold",
            here, v1_name(*l), v1_name(src));
      l->mutable_layer()->set_pad(src.layer().pad());
      l->set_bottom(j, src.bottom(0));
    }
    for (const auto& t : l->top()) last_top[t] = i;
  }
  if (lines) *lines = std::move(kept_lines);
}

// Caffe's UpgradeV0LayerParameter: one flat V0 layer as V1. A field given for a type that
// does not take it is dropped with a warning (Caffe logs it and goes on). Fields bound for
// messages bakusoku's schema lacks (image/window data, infogain, HDF5 output) are dropped:
// those layer types are refused when the graph is built.
V1 upgrade_v0_layer(V1& in, const std::string& where) {
  V1 out;
  *out.mutable_bottom() = in.bottom();
  *out.mutable_top() = in.top();
  if (!in.has_layer()) return out;
  proto::V0LayerParameter& v = *in.mutable_layer();
  const std::string& t = v.type();
  if (v.has_name()) out.set_name(v.name());
  if (v.has_type()) {
    auto it = v0_types().find(t);
    if (it == v0_types().end()) input_error("{}: layer '{}': unknown V0 layer type '{}'", where, v.name(), t);
    out.set_type(it->second);
  }
  out.mutable_blobs()->Swap(v.mutable_blobs());
  *out.mutable_blobs_lr() = v.blobs_lr();
  *out.mutable_weight_decay() = v.weight_decay();
  const bool conv = t == "conv", ip = t == "innerproduct", pool = t == "pool", lrn = t == "lrn";
  const bool data = t == "data", hdf5 = t == "hdf5_data", images = t == "images", window = t == "window_data";
  auto drop = [&](const char* field) {
    log::warn("{}: layer '{}': V0 field '{}' does not apply to type '{}'; dropped, as Caffe does", where, v.name(),
              field, t);
  };
  if (v.has_num_output()) {
    if (conv)
      out.mutable_convolution_param()->set_num_output(v.num_output());
    else if (ip)
      out.mutable_inner_product_param()->set_num_output(v.num_output());
    else
      drop("num_output");
  }
  if (v.has_biasterm()) {
    if (conv)
      out.mutable_convolution_param()->set_bias_term(v.biasterm());
    else if (ip)
      out.mutable_inner_product_param()->set_bias_term(v.biasterm());
    else
      drop("biasterm");
  }
  if (v.has_weight_filler()) {
    if (conv)
      *out.mutable_convolution_param()->mutable_weight_filler() = v.weight_filler();
    else if (ip)
      *out.mutable_inner_product_param()->mutable_weight_filler() = v.weight_filler();
    else
      drop("weight_filler");
  }
  if (v.has_bias_filler()) {
    if (conv)
      *out.mutable_convolution_param()->mutable_bias_filler() = v.bias_filler();
    else if (ip)
      *out.mutable_inner_product_param()->mutable_bias_filler() = v.bias_filler();
    else
      drop("bias_filler");
  }
  if (v.has_pad()) {
    if (conv)
      out.mutable_convolution_param()->add_pad(v.pad());
    else if (pool)
      out.mutable_pooling_param()->set_pad(v.pad());
    else
      drop("pad");
  }
  if (v.has_kernelsize()) {
    if (conv)
      out.mutable_convolution_param()->add_kernel_size(v.kernelsize());
    else if (pool)
      out.mutable_pooling_param()->set_kernel_size(v.kernelsize());
    else
      drop("kernelsize");
  }
  if (v.has_group()) {
    if (conv)
      out.mutable_convolution_param()->set_group(v.group());
    else
      drop("group");
  }
  if (v.has_stride()) {
    if (conv)
      out.mutable_convolution_param()->add_stride(v.stride());
    else if (pool)
      out.mutable_pooling_param()->set_stride(v.stride());
    else
      drop("stride");
  }
  if (v.has_pool()) {
    // V0's MAX/AVE/STOCHASTIC have the values of PoolingParameter's.
    if (pool)
      out.mutable_pooling_param()->set_pool(static_cast<proto::PoolingParameter::PoolMethod>(v.pool()));
    else
      drop("pool");
  }
  if (v.has_dropout_ratio()) {
    if (t == "dropout")
      out.mutable_dropout_param()->set_dropout_ratio(v.dropout_ratio());
    else
      drop("dropout_ratio");
  }
  if (v.has_local_size()) lrn ? out.mutable_lrn_param()->set_local_size(v.local_size()) : drop("local_size");
  if (v.has_alpha()) lrn ? out.mutable_lrn_param()->set_alpha(v.alpha()) : drop("alpha");
  if (v.has_beta()) lrn ? out.mutable_lrn_param()->set_beta(v.beta()) : drop("beta");
  if (v.has_k()) lrn ? out.mutable_lrn_param()->set_k(v.k()) : drop("k");
  if (v.has_source()) {
    if (data)
      out.mutable_data_param()->set_source(v.source());
    else if (hdf5)
      out.mutable_hdf5_data_param()->set_source(v.source());
    else if (window)
      out.mutable_window_data_param()->set_source(v.source());
    else if (!images && t != "infogain_loss")
      drop("source");
  }
  // Transformation fields move to transform_param whatever the type, as in Caffe; but
  // WindowData reads its scale from window_data_param (Caffe's upgrade loses it).
  if (v.has_scale() && window)
    out.mutable_window_data_param()->set_scale(v.scale());
  else if (v.has_scale())
    out.mutable_transform_param()->set_scale(v.scale());
  if (v.has_meanfile()) out.mutable_transform_param()->set_mean_file(v.meanfile());
  if (v.has_cropsize()) out.mutable_transform_param()->set_crop_size(v.cropsize());
  if (v.has_mirror()) out.mutable_transform_param()->set_mirror(v.mirror());
  if (v.has_batchsize()) {
    if (data)
      out.mutable_data_param()->set_batch_size(v.batchsize());
    else if (hdf5)
      out.mutable_hdf5_data_param()->set_batch_size(v.batchsize());
    else if (window)
      out.mutable_window_data_param()->set_batch_size(v.batchsize());
    else if (!images)
      drop("batchsize");
  }
  if (v.has_rand_skip()) {
    if (data)
      out.mutable_data_param()->set_rand_skip(v.rand_skip());
    else if (!images)
      drop("rand_skip");
  }
  if (!images) {
    if (v.has_shuffle_images()) drop("shuffle_images");
    if (v.has_new_height()) drop("new_height");
    if (v.has_new_width()) drop("new_width");
  }
  if (v.has_concat_dim()) {
    if (t == "concat")
      out.mutable_concat_param()->set_concat_dim(v.concat_dim());
    else
      drop("concat_dim");
  }
  if (window) {
    proto::WindowDataParameter& w = *out.mutable_window_data_param();
    if (v.has_det_fg_threshold()) w.set_fg_threshold(v.det_fg_threshold());
    if (v.has_det_bg_threshold()) w.set_bg_threshold(v.det_bg_threshold());
    if (v.has_det_fg_fraction()) w.set_fg_fraction(v.det_fg_fraction());
    if (v.has_det_context_pad()) w.set_context_pad(v.det_context_pad());
    if (v.has_det_crop_mode()) w.set_crop_mode(v.det_crop_mode());
  } else {
    if (v.has_det_fg_threshold()) drop("det_fg_threshold");
    if (v.has_det_bg_threshold()) drop("det_bg_threshold");
    if (v.has_det_fg_fraction()) drop("det_fg_fraction");
    if (v.has_det_context_pad()) drop("det_context_pad");
    if (v.has_det_crop_mode()) drop("det_crop_mode");
  }
  return out;
}

// Caffe's UpgradeV0Net: padding folded, each layer upgraded; of the net's own fields only
// name, input, input_dim and force_backward carry over (V0 had no others).
void upgrade_v0_net(proto::NetParameter& net, const std::string& where, std::vector<int>* lines) {
  fold_v0_padding(net, where, lines);
  proto::NetParameter out;
  if (net.has_name()) out.set_name(net.name());
  for (int i = 0; i < net.layers_size(); ++i)
    *out.add_layers() = upgrade_v0_layer(*net.mutable_layers(i), at(where, lines, i));
  *out.mutable_input() = net.input();
  *out.mutable_input_dim() = net.input_dim();
  if (net.has_force_backward()) out.set_force_backward(net.force_backward());
  net = std::move(out);
}

// One layer's scale/mean_file/crop_size/mirror moved from its data parameter `d` to its
// transform_param (the scale only when `scale`).
template <class P>
void move_transformation(P& d, V1& l, bool scale) {
  if (!(scale && d.has_scale()) && !d.has_mean_file() && !d.has_crop_size() && !d.has_mirror()) return;
  proto::TransformationParameter& t = *l.mutable_transform_param();
  if (scale && d.has_scale()) t.set_scale(d.scale());
  if (d.has_mean_file()) t.set_mean_file(d.mean_file());
  if (d.has_crop_size()) t.set_crop_size(d.crop_size());
  if (d.has_mirror()) t.set_mirror(d.mirror());
  if (scale) d.clear_scale();
  d.clear_mean_file();
  d.clear_crop_size();
  d.clear_mirror();
}

// Caffe's UpgradeNetDataTransformation for the Data, ImageData and WindowData layers of a V1
// net. WindowData keeps its scale in window_data_param, where its layer reads it (Caffe's
// upgrade moves it to transform_param, which that layer ignores).
void upgrade_data_transformation(proto::NetParameter& net) {
  for (V1& l : *net.mutable_layers()) {
    if (l.type() == V1::DATA && l.has_data_param())
      move_transformation(*l.mutable_data_param(), l, true);
    else if (l.type() == V1::IMAGE_DATA && l.has_image_data_param())
      move_transformation(*l.mutable_image_data_param(), l, true);
    else if (l.type() == V1::WINDOW_DATA && l.has_window_data_param())
      move_transformation(*l.mutable_window_data_param(), l, false);
  }
}

// Every V1 `*_param` message has a LayerParameter field of the same name and type (the
// schema keeps them paired); copy those that are set.
void copy_layer_params(const V1& from, proto::LayerParameter& to) {
  const auto* fd = from.GetDescriptor();
  const auto* td = to.GetDescriptor();
  const auto* fr = from.GetReflection();
  const auto* tr = to.GetReflection();
  for (int i = 0; i < fd->field_count(); ++i) {
    const auto* f = fd->field(i);
    if (f->is_repeated() || f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (f->name() == "layer" || !fr->HasField(from, f)) continue;
    const auto* t = td->FindFieldByName(f->name());
    BKS_CHECK(t && t->message_type() == f->message_type(), "V1LayerParameter.{} has no LayerParameter twin", f->name());
    tr->MutableMessage(&to, t)->CopyFrom(fr->GetMessage(from, f));
  }
}

// Caffe's UpgradeV1LayerParameter: blobs_lr, weight_decay, param names and share modes
// become the param specs, in blob order.
proto::LayerParameter upgrade_v1_layer(V1& v) {
  proto::LayerParameter l;
  *l.mutable_bottom() = v.bottom();
  *l.mutable_top() = v.top();
  if (v.has_name()) l.set_name(v.name());
  *l.mutable_include() = v.include();
  *l.mutable_exclude() = v.exclude();
  if (v.has_type()) l.set_type(v1_type_name(v.type()));
  l.mutable_blobs()->Swap(v.mutable_blobs());
  auto spec = [&](int i) {
    while (l.param_size() <= i) l.add_param();
    return l.mutable_param(i);
  };
  for (int i = 0; i < v.param_size(); ++i) spec(i)->set_name(v.param(i));
  for (int i = 0; i < v.blob_share_mode_size(); ++i)
    spec(i)->set_share_mode(static_cast<proto::ParamSpec::DimCheckMode>(v.blob_share_mode(i)));
  for (int i = 0; i < v.blobs_lr_size(); ++i) spec(i)->set_lr_mult(v.blobs_lr(i));
  for (int i = 0; i < v.weight_decay_size(); ++i) spec(i)->set_decay_mult(v.weight_decay(i));
  *l.mutable_loss_weight() = v.loss_weight();
  copy_layer_params(v, l);
  return l;
}

}  // namespace

const char* net_format_name(NetFormat f) { return f == NetFormat::v0 ? "V0" : f == NetFormat::v1 ? "V1" : "current"; }

NetFormat upgrade_net(proto::NetParameter& net, const std::string& where, std::vector<int>* lines) {
  if (net.layers_size() == 0) return NetFormat::current;
  if (net.layer_size() > 0)
    input_error(
        "{}: layer '{}' is in the current format (layer {{ type: \"...\" }}) but the file also has old "
        "V1 'layers' entries (the first is '{}'); Caffe refuses a net that mixes them: write every layer "
        "as layer {{ ... }}",
        at(where, lines, 0), net.layer(0).name(), v1_name(net.layers(0)));
  NetFormat format = NetFormat::v1;
  for (const V1& l : net.layers())
    if (l.has_layer()) format = NetFormat::v0;
  if (format == NetFormat::v0) upgrade_v0_net(net, where, lines);
  upgrade_data_transformation(net);
  google::protobuf::RepeatedPtrField<V1> old;
  old.Swap(net.mutable_layers());
  for (V1& l : old) *net.add_layer() = upgrade_v1_layer(l);
  return format;
}

void upgrade_net_input(proto::NetParameter& net, const std::string& where) {
  const bool shapes = net.input_shape_size() > 0, dims = net.input_dim_size() > 0;
  if (shapes || dims) {
    if (shapes && net.input_shape_size() != net.input_size())
      input_error("{}: {} 'input' names but {} 'input_shape' entries", where, net.input_size(), net.input_shape_size());
    if (!shapes && net.input_dim_size() != 4 * net.input_size())
      input_error("{}: 'input_dim' needs 4 values per input ({} inputs, {} values)", where, net.input_size(),
                  net.input_dim_size());
    proto::LayerParameter in;
    in.set_name("input");
    in.set_type("Input");
    for (int i = 0; i < net.input_size(); ++i) {
      in.add_top(net.input(i));
      proto::BlobShape* s = in.mutable_input_param()->add_shape();
      if (shapes)
        *s = net.input_shape(i);
      else
        for (int k = 0; k < 4; ++k) s->add_dim(net.input_dim(4 * i + k));
    }
    *net.add_layer() = std::move(in);
    for (int i = net.layer_size() - 1; i > 0; --i) net.mutable_layer()->SwapElements(i, i - 1);
  }
  // Names alone (a legacy .caffemodel): dropped, as Caffe does.
  net.clear_input();
  net.clear_input_shape();
  net.clear_input_dim();
}

void upgrade_batch_norm_params(proto::NetParameter& net) {
  for (auto& l : *net.mutable_layer())
    if (l.type() == "BatchNorm" && l.param_size() == 3)
      for (auto& p : *l.mutable_param()) {
        p.set_lr_mult(0.f);
        p.set_decay_mult(0.f);
      }
}

bool upgrade_solver(proto::SolverParameter& s, const std::string& where) {
  if (!s.has_solver_type()) return false;
  if (s.has_type())
    input_error("{}: solver_type (Caffe's old enum) and type are both given; Caffe refuses that: keep type only",
                where);
  static const std::map<proto::SolverParameter::SolverType, const char*> names{
      {proto::SolverParameter::SGD, "SGD"},           {proto::SolverParameter::NESTEROV, "Nesterov"},
      {proto::SolverParameter::ADAGRAD, "AdaGrad"},   {proto::SolverParameter::RMSPROP, "RMSProp"},
      {proto::SolverParameter::ADADELTA, "AdaDelta"}, {proto::SolverParameter::ADAM, "Adam"}};
  auto it = names.find(s.solver_type());
  if (it == names.end())
    input_error("{}: solver_type {} is not a Caffe solver", where, static_cast<int>(s.solver_type()));
  s.set_type(it->second);
  s.clear_solver_type();
  return true;
}

void read_solver_file(const std::string& path, proto::SolverParameter& s) {
  read_prototxt(path, s);
  if (upgrade_solver(s, path))
    log::warn(
        "{}: Caffe's old solver_type enum, read as type: \"{}\"; `bakusoku upgrade_solver_proto_text {} NEW` "
        "writes the current form",
        path, s.type(), path);
  auto inline_net = [&](proto::NetParameter& net, const std::string& field) {
    const std::string where = fmt::format("{}: {}", path, field);
    NetFormat f = upgrade_net(net, where);
    if (f != NetFormat::current)
      log::warn(
          "{}: the net is in Caffe's {} format; upgraded on load (`bakusoku upgrade_solver_proto_text` "
          "writes it in the current format)",
          where, net_format_name(f));
  };
  if (s.has_net_param()) inline_net(*s.mutable_net_param(), "net_param");
  if (s.has_train_net_param()) inline_net(*s.mutable_train_net_param(), "train_net_param");
  for (int i = 0; i < s.test_net_param_size(); ++i)
    inline_net(*s.mutable_test_net_param(i), fmt::format("test_net_param[{}]", i));
}

}  // namespace bks
