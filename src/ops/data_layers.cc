// Layers that bring data into the graph: Input and MemoryData (filled by the caller), Data
// (IDX, HDF5, LMDB or LevelDB, chosen by content, with transform_param), ImageData (a list of
// image files) and HDF5Data (Caffe's list of .h5 files).
//
// The definitions infer output shapes from the dataset itself (open_dataset and
// open_hdf5_list are cached per path, so the kernel's loader shares what they read).
#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "core/log.h"
#include "data/image_decode.h"
#include "data/loader.h"
#include "ops/op.h"

namespace bks {
namespace {

// (batch, sample...)
Shape batch_of(int64_t batch, const Shape& sample) {
  Shape s{batch};
  s.insert(s.end(), sample.begin(), sample.end());
  return s;
}

// ---- Input ----

// The output shapes, flattened: shape j has ranks[j] dims, taken in order from dims.
struct InputAttrs final : AttrsOf<InputAttrs> {
  std::vector<int64_t> dims;
  std::vector<int64_t> ranks;
  void visit(AttrVisitor& v) override {
    v.field("dims", dims);
    v.field("ranks", ranks);
  }
  // The shapes (cut short where dims run out: InputDef::check reports that).
  std::vector<Shape> shapes() const {
    std::vector<Shape> s;
    size_t at = 0;
    for (int64_t r : ranks) {
      size_t end = std::min(dims.size(), at + static_cast<size_t>(std::max<int64_t>(r, 0)));
      s.emplace_back(dims.begin() + static_cast<std::ptrdiff_t>(at), dims.begin() + static_cast<std::ptrdiff_t>(end));
      at = end;
    }
    return s;
  }
  void set_shapes(const std::vector<Shape>& shapes) {
    dims.clear();
    ranks.clear();
    for (const Shape& s : shapes) {
      dims.insert(dims.end(), s.begin(), s.end());
      ranks.push_back(static_cast<int64_t>(s.size()));
    }
  }
};

void input_from_caffe(const proto::LayerParameter& l, InputAttrs& a, const std::string&) {
  std::vector<Shape> shapes;
  for (const proto::BlobShape& s : l.input_param().shape()) shapes.emplace_back(s.dim().begin(), s.dim().end());
  a.set_shapes(shapes);
}
void input_to_caffe(const InputAttrs& a, proto::LayerParameter& l) {
  proto::InputParameter* p = l.mutable_input_param();
  p->clear_shape();
  for (const Shape& s : a.shapes()) {
    proto::BlobShape* shape = p->add_shape();
    for (int64_t d : s) shape->add_dim(d);
  }
}
BKS_REGISTER_ATTRS("Input", InputAttrs, input_from_caffe, input_to_caffe);

class InputDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 0; }
  int max_outputs(const OpContext&) const override { return -1; }
  void check(const OpContext& c) const override {
    const InputAttrs& a = c.node.attrs.as<InputAttrs>();
    int64_t total = 0;
    for (int64_t r : a.ranks) {
      if (r < 0) c.fail("input_param shape ranks must not be negative, got {}", r);
      total += r;
    }
    if (total != static_cast<int64_t>(a.dims.size()))
      c.fail("input_param shapes need {} dims, {} given", total, a.dims.size());
    size_t tops = c.node.outputs.size(), shapes = a.ranks.size();
    if (shapes != 1 && shapes != tops)
      c.fail("input_param needs one shape, or one per top ({} tops, {} shapes)", tops, shapes);
  }
  void infer(const OpContext& c, const std::vector<Shape>&, std::vector<Shape>& out) const override {
    std::vector<Shape> shapes = c.node.attrs.as<InputAttrs>().shapes();
    for (size_t j = 0; j < out.size(); ++j) {
      out[j] = shapes[shapes.size() == 1 ? 0 : j];
      for (auto d : out[j])
        if (d <= 0) c.fail("input_param shape {} has a non-positive dimension", shape_str(out[j]));
    }
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.has_backward = false;
    f.external_input = true;
    return f;
  }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::external_input}); }
};

void set_input_shapes(Node& n, const std::vector<Shape>& shapes) { n.attrs.as<InputAttrs>().set_shapes(shapes); }

}  // namespace

void make_external_input(Node& n, const std::vector<Shape>& shapes) {
  n.type = "Input";
  n.attrs = default_attrs("Input");
  set_input_shapes(n, shapes);
}

void keep_external_outputs(Node& n, const std::vector<bool>& keep) {
  std::vector<Shape> shapes = n.attrs.as<InputAttrs>().shapes(), kept;
  std::vector<int> outs;
  for (size_t j = 0; j < n.outputs.size(); ++j) {
    if (!keep[j]) continue;
    outs.push_back(n.outputs[j]);
    if (!shapes.empty()) kept.push_back(shapes[std::min(j, shapes.size() - 1)]);
  }
  n.outputs = outs;
  n.loss_weight.assign(outs.size(), 0.f);
  set_input_shapes(n, kept);
}

void set_external_input_batch(Node& n, int64_t batch) {
  std::vector<Shape> shapes = n.attrs.as<InputAttrs>().shapes();
  for (Shape& s : shapes)
    if (!s.empty()) s[0] = batch;
  set_input_shapes(n, shapes);
}

namespace {

// ---- Data ----

constexpr const char* kBackends[] = {"UNSPECIFIED", "LEVELDB", "LMDB"};

// transform_param, as data/transform.h takes it.
struct TransformAttrs final : AttrStruct {
  TransformOptions o;
  void visit(AttrVisitor& v) override {
    v.field("scale", o.scale);
    v.field("mirror", o.mirror);
    v.field("crop_size", o.crop_size);
    v.field("mean_file", o.mean_file);
    v.field("mean_value", o.mean_value);
  }
};

struct DataAttrs final : AttrsOf<DataAttrs> {
  // The format is chosen by content; a backend given is only reported as ignored.
  enum Backend { unspecified, leveldb, lmdb };
  std::string source;  // empty: not given
  int64_t batch_size = 0;
  int64_t rand_skip = 0;
  int backend = unspecified;
  TransformAttrs transform;
  ImageChannels channels;  // transform_param.force_color / force_gray: how encoded images decode
  void visit(AttrVisitor& v) override {
    v.field("source", source);
    v.field("batch_size", batch_size);
    v.field("rand_skip", rand_skip);
    v.field("backend", backend, kBackends);
    v.field("transform", transform);
    v.field("force_color", channels.force_color);
    v.field("force_gray", channels.force_gray);
  }
};

// transform_param as TransformOptions; mean_file must not be empty.
void transform_from_caffe(const proto::TransformationParameter& t, TransformOptions& o, const std::string& where) {
  if (t.has_mean_file() && t.mean_file().empty()) input_error("{}: transform_param.mean_file is empty", where);
  o.scale = t.scale();
  o.mirror = t.mirror();
  o.crop_size = t.crop_size();
  o.mean_file = t.mean_file();
  o.mean_value.assign(t.mean_value().begin(), t.mean_value().end());
}
void transform_to_caffe(const TransformOptions& o, proto::TransformationParameter& t) {
  t.set_scale(o.scale);
  t.set_mirror(o.mirror);
  t.set_crop_size(static_cast<uint32_t>(o.crop_size));
  t.clear_mean_file();
  if (!o.mean_file.empty()) t.set_mean_file(o.mean_file);
  t.clear_mean_value();
  for (float m : o.mean_value) t.add_mean_value(m);
}

void data_from_caffe(const proto::LayerParameter& l, DataAttrs& a, const std::string& where) {
  const proto::DataParameter& p = l.data_param();
  if (p.has_scale() || p.has_mean_file() || p.has_crop_size() || p.has_mirror())
    input_error("{}: data_param scale/mean_file/crop_size/mirror are deprecated; use transform_param", where);
  a.source = p.source();
  a.batch_size = p.batch_size();
  a.rand_skip = p.rand_skip();
  if (p.has_backend()) a.backend = p.backend() == proto::DataParameter::LMDB ? a.lmdb : a.leveldb;
  const proto::TransformationParameter& t = l.transform_param();
  if (t.force_color() && t.force_gray())
    input_error("{}: transform_param.force_color and force_gray cannot both be set", where);
  transform_from_caffe(t, a.transform.o, where);
  a.channels.force_color = t.force_color();
  a.channels.force_gray = t.force_gray();
}
void data_to_caffe(const DataAttrs& a, proto::LayerParameter& l) {
  proto::DataParameter* p = l.mutable_data_param();
  p->clear_source();
  if (!a.source.empty()) p->set_source(a.source);
  p->set_batch_size(static_cast<uint32_t>(a.batch_size));
  p->set_rand_skip(static_cast<uint32_t>(a.rand_skip));
  p->clear_backend();
  if (a.backend != a.unspecified)
    p->set_backend(a.backend == a.lmdb ? proto::DataParameter::LMDB : proto::DataParameter::LEVELDB);
  proto::TransformationParameter* t = l.mutable_transform_param();
  transform_to_caffe(a.transform.o, *t);
  t->set_force_color(a.channels.force_color);
  t->set_force_gray(a.channels.force_gray);
}
BKS_REGISTER_ATTRS("Data", DataAttrs, data_from_caffe, data_to_caffe);

// A data layer's outputs as its definition alone tells them, without its data: the batch,
// the crop's size, and the channels (and size, without a crop) of the mean; 0 where unknown.
// The second top is the label, (batch).
OpDef::AbsentSource absent(const std::string& source, int64_t batch, const TransformOptions& t, size_t tops) {
  Shape data{batch, 0, t.crop_size, t.crop_size};
  if (t.mean_value.size() > 1) data[1] = static_cast<int64_t>(t.mean_value.size());
  if (!t.mean_file.empty() && std::filesystem::exists(t.mean_file)) {
    proto::BlobProto mean;
    read_binary_proto(t.mean_file, mean);
    Shape m = mean.has_shape() ? Shape(mean.shape().dim().begin(), mean.shape().dim().end())
                               : Shape{mean.num(), mean.channels(), mean.height(), mean.width()};
    if (m.size() == 4) {
      data[1] = m[1];
      if (t.crop_size == 0) data[2] = m[2], data[3] = m[3];
    }
  }
  OpDef::AbsentSource a{source, {data}};
  if (tops > 1) a.shapes.push_back({batch});
  return a;
}

// The dataset of a Data layer, checked: a 'data' field of (C,H,W) samples, and labels when
// a second top asks for them. `warn` logs an ignored data_param.backend (the kernel's).
std::shared_ptr<const Dataset> open_data(const OpContext& c, bool warn) {
  const DataAttrs& a = c.node.attrs.as<DataAttrs>();
  std::shared_ptr<const Dataset> ds;
  try {
    ds = open_dataset(a.source, a.channels);
  } catch (const InputError& e) {
    c.fail("{}", e.what());
  }
  // The source's content decides; a backend naming another format is worth a word.
  const char* found = ds->format == "lmdb" ? "LMDB" : ds->format == "leveldb" ? "LEVELDB" : nullptr;
  if (warn && a.backend != a.unspecified && (!found || found != std::string_view(kBackends[a.backend])))
    log::warn("{}: data_param.backend {} ignored: {} is {} {}", c.where, kBackends[a.backend], a.source,
              found ? "a" : "an", found ? found : ds->format + " file");
  const DatasetField* data = ds->field("data");
  if (!data || data->sample_shape.size() != 3) c.fail("{}: needs a 'data' field of (C,H,W) samples", a.source);
  if (c.node.outputs.size() > 1 && !ds->field("label")) c.fail("{} has no labels for the second top", a.source);
  return ds;
}

// The transform_param of a Data layer over its dataset's samples.
Transform data_transform(const OpContext& c, const Dataset& ds) {
  return Transform(c.node.attrs.as<DataAttrs>().transform.o, ds.field("data")->sample_shape, c.phase == proto::TRAIN,
                   c.where);
}

class DataDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 0; }
  int max_outputs(const OpContext&) const override { return 2; }
  void check(const OpContext& c) const override {
    const DataAttrs& a = c.node.attrs.as<DataAttrs>();
    if (a.source.empty()) c.fail("data_param.source is required");
    if (a.batch_size <= 0) c.fail("data_param.batch_size must be positive");
  }
  // As the loader: the data field transformed, then the label field (field 1).
  void infer(const OpContext& c, const std::vector<Shape>&, std::vector<Shape>& out) const override {
    auto ds = open_data(c, false);
    int64_t batch = c.node.attrs.as<DataAttrs>().batch_size;
    out[0] = batch_of(batch, data_transform(c, *ds).output_shape());
    if (out.size() > 1) out[1] = batch_of(batch, ds->fields[1].sample_shape);
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override { return no_backward_facts(); }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::data_layer}); }
  std::optional<AbsentSource> absent_source(const OpContext& c) const override {
    const DataAttrs& a = c.node.attrs.as<DataAttrs>();
    if (std::filesystem::exists(a.source)) return std::nullopt;
    return absent(a.source, a.batch_size, a.transform.o, c.node.outputs.size());
  }
};

// ---- HDF5Data ----

struct HDF5DataAttrs final : AttrsOf<HDF5DataAttrs> {
  std::string source;  // a text file listing .h5 files; empty: not given
  int64_t batch_size = 0;
  bool shuffle = false;
  std::vector<std::string> fields;  // the dataset each output reads (Caffe: the top names)
  void visit(AttrVisitor& v) override {
    v.field("source", source);
    v.field("batch_size", batch_size);
    v.field("shuffle", shuffle);
    v.field("fields", fields);
  }
};

void hdf5_data_from_caffe(const proto::LayerParameter& l, HDF5DataAttrs& a, const std::string& where) {
  if (l.has_transform_param()) input_error("{}: HDF5Data does not transform data; remove transform_param", where);
  const proto::HDF5DataParameter& p = l.hdf5_data_param();
  a.source = p.source();
  a.batch_size = p.batch_size();
  a.shuffle = p.shuffle();
  a.fields.assign(l.top().begin(), l.top().end());
}
void hdf5_data_to_caffe(const HDF5DataAttrs& a, proto::LayerParameter& l) {
  proto::HDF5DataParameter* p = l.mutable_hdf5_data_param();
  p->clear_source();
  if (!a.source.empty()) p->set_source(a.source);
  p->set_batch_size(static_cast<uint32_t>(a.batch_size));
  p->set_shuffle(a.shuffle);
  // The datasets are the tops, which the writer sets from the node's outputs.
}
BKS_REGISTER_ATTRS("HDF5Data", HDF5DataAttrs, hdf5_data_from_caffe, hdf5_data_to_caffe);

// The HDF5 files a HDF5Data layer lists, with one field per top.
std::shared_ptr<const Dataset> open_hdf5_data(const OpContext& c) {
  const HDF5DataAttrs& a = c.node.attrs.as<HDF5DataAttrs>();
  try {
    return open_hdf5_list(a.source, a.fields);
  } catch (const InputError& e) {
    c.fail("{}", e.what());
  }
}

class HDF5DataDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 0; }
  int max_outputs(const OpContext&) const override { return -1; }
  void check(const OpContext& c) const override {
    const HDF5DataAttrs& a = c.node.attrs.as<HDF5DataAttrs>();
    if (a.source.empty()) c.fail("hdf5_data_param.source is required");
    if (a.batch_size <= 0) c.fail("hdf5_data_param.batch_size must be positive");
    if (a.fields.size() != c.node.outputs.size())
      c.fail("{} dataset names for {} tops", a.fields.size(), c.node.outputs.size());
  }
  void infer(const OpContext& c, const std::vector<Shape>&, std::vector<Shape>& out) const override {
    auto ds = open_hdf5_data(c);
    int64_t batch = c.node.attrs.as<HDF5DataAttrs>().batch_size;
    for (size_t j = 0; j < out.size(); ++j) out[j] = batch_of(batch, ds->fields[j].sample_shape);
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override { return no_backward_facts(); }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::data_layer}); }
  std::optional<AbsentSource> absent_source(const OpContext& c) const override {
    const HDF5DataAttrs& a = c.node.attrs.as<HDF5DataAttrs>();
    if (std::filesystem::exists(a.source)) return std::nullopt;
    AbsentSource r{a.source, {}};
    for (size_t j = 0; j < c.node.outputs.size(); ++j) r.shapes.push_back({a.batch_size, 0});  // sizes unknown
    return r;
  }
};

// ---- ImageData ----

struct ImageDataAttrs final : AttrsOf<ImageDataAttrs> {
  std::string source;  // the list file; empty: not given
  int64_t batch_size = 1;
  int64_t rand_skip = 0;
  bool shuffle = false;
  ImageListOptions images;
  TransformAttrs transform;
  void visit(AttrVisitor& v) override {
    v.field("source", source);
    v.field("batch_size", batch_size);
    v.field("rand_skip", rand_skip);
    v.field("shuffle", shuffle);
    v.field("new_height", images.new_height);
    v.field("new_width", images.new_width);
    v.field("is_color", images.is_color);
    v.field("root_folder", images.root_folder);
    v.field("transform", transform);
  }
};

void image_data_from_caffe(const proto::LayerParameter& l, ImageDataAttrs& a, const std::string& where) {
  const proto::ImageDataParameter& p = l.image_data_param();
  if (p.has_scale() || p.has_mean_file() || p.has_crop_size() || p.has_mirror())
    input_error("{}: image_data_param scale/mean_file/crop_size/mirror are deprecated; use transform_param", where);
  if (l.transform_param().force_color() || l.transform_param().force_gray())
    input_error("{}: transform_param.force_color/force_gray do not apply to ImageData; use image_data_param.is_color",
                where);
  a.source = p.source();
  a.batch_size = p.batch_size();
  a.rand_skip = p.rand_skip();
  a.shuffle = p.shuffle();
  a.images.new_height = p.new_height();
  a.images.new_width = p.new_width();
  a.images.is_color = p.is_color();
  a.images.root_folder = p.root_folder();
  transform_from_caffe(l.transform_param(), a.transform.o, where);
}
void image_data_to_caffe(const ImageDataAttrs& a, proto::LayerParameter& l) {
  proto::ImageDataParameter* p = l.mutable_image_data_param();
  p->clear_source();
  if (!a.source.empty()) p->set_source(a.source);
  p->set_batch_size(static_cast<uint32_t>(a.batch_size));
  p->set_rand_skip(static_cast<uint32_t>(a.rand_skip));
  p->set_shuffle(a.shuffle);
  p->set_new_height(static_cast<uint32_t>(a.images.new_height));
  p->set_new_width(static_cast<uint32_t>(a.images.new_width));
  p->set_is_color(a.images.is_color);
  p->set_root_folder(a.images.root_folder);
  transform_to_caffe(a.transform.o, *l.mutable_transform_param());
}
BKS_REGISTER_ATTRS("ImageData", ImageDataAttrs, image_data_from_caffe, image_data_to_caffe);

std::shared_ptr<const Dataset> open_images(const OpContext& c) {
  const ImageDataAttrs& a = c.node.attrs.as<ImageDataAttrs>();
  try {
    return open_image_list(a.source, a.images);
  } catch (const InputError& e) {
    c.fail("{}", e.what());
  }
}

Transform image_transform(const OpContext& c, const Dataset& ds) {
  return Transform(c.node.attrs.as<ImageDataAttrs>().transform.o, ds.fields[0].sample_shape, c.phase == proto::TRAIN,
                   c.where);
}

class ImageDataDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 0; }
  int max_outputs(const OpContext&) const override { return 2; }
  void check(const OpContext& c) const override {
    const ImageDataAttrs& a = c.node.attrs.as<ImageDataAttrs>();
    if (a.source.empty()) c.fail("image_data_param.source is required");
    if (a.batch_size <= 0) c.fail("image_data_param.batch_size must be positive");
    if ((a.images.new_height > 0) != (a.images.new_width > 0))
      c.fail("image_data_param.new_height and new_width must be given together");
    if (a.images.new_height < 0 || a.images.new_width < 0 || a.images.new_height * a.images.new_width > kMaxImagePixels)
      c.fail("image_data_param.new_height x new_width must be at most {} pixels", kMaxImagePixels);
  }
  void infer(const OpContext& c, const std::vector<Shape>&, std::vector<Shape>& out) const override {
    auto ds = open_images(c);
    int64_t batch = c.node.attrs.as<ImageDataAttrs>().batch_size;
    out[0] = batch_of(batch, image_transform(c, *ds).output_shape());
    if (out.size() > 1) out[1] = batch_of(batch, ds->fields[1].sample_shape);
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override { return no_backward_facts(); }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::data_layer}); }
  std::optional<AbsentSource> absent_source(const OpContext& c) const override {
    const ImageDataAttrs& a = c.node.attrs.as<ImageDataAttrs>();
    if (std::filesystem::exists(a.source)) return std::nullopt;
    AbsentSource r = absent(a.source, a.batch_size, a.transform.o, c.node.outputs.size());
    if (a.images.new_height > 0 && a.transform.o.crop_size == 0)
      r.shapes[0][2] = a.images.new_height, r.shapes[0][3] = a.images.new_width;
    if (r.shapes[0][1] == 0) r.shapes[0][1] = a.images.is_color ? 3 : 1;
    return r;
  }
};

// ---- MemoryData ----

// Filled by the program that embeds the net (as Input is), with Caffe's fixed shapes:
// data (batch, channels, height, width) and label (batch, 1, 1, 1).
struct MemoryDataAttrs final : AttrsOf<MemoryDataAttrs> {
  int64_t batch_size = 0, channels = 0, height = 0, width = 0;
  void visit(AttrVisitor& v) override {
    v.field("batch_size", batch_size);
    v.field("channels", channels);
    v.field("height", height);
    v.field("width", width);
  }
};

void memory_data_from_caffe(const proto::LayerParameter& l, MemoryDataAttrs& a, const std::string& where) {
  const proto::MemoryDataParameter& p = l.memory_data_param();
  if (l.has_transform_param())
    log::warn("{}: transform_param is not applied: MemoryData holds what the program writes into it", where);
  a.batch_size = p.batch_size();
  a.channels = p.channels();
  a.height = p.height();
  a.width = p.width();
}
void memory_data_to_caffe(const MemoryDataAttrs& a, proto::LayerParameter& l) {
  proto::MemoryDataParameter* p = l.mutable_memory_data_param();
  p->set_batch_size(static_cast<uint32_t>(a.batch_size));
  p->set_channels(static_cast<uint32_t>(a.channels));
  p->set_height(static_cast<uint32_t>(a.height));
  p->set_width(static_cast<uint32_t>(a.width));
}
BKS_REGISTER_ATTRS("MemoryData", MemoryDataAttrs, memory_data_from_caffe, memory_data_to_caffe);

class MemoryDataDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 0; }
  int min_outputs(const OpContext&) const override { return 2; }
  int max_outputs(const OpContext&) const override { return 2; }
  void check(const OpContext& c) const override {
    const MemoryDataAttrs& a = c.node.attrs.as<MemoryDataAttrs>();
    if (a.batch_size <= 0 || a.channels <= 0 || a.height <= 0 || a.width <= 0)
      c.fail("memory_data_param batch_size, channels, height and width must be positive");
  }
  void infer(const OpContext& c, const std::vector<Shape>&, std::vector<Shape>& out) const override {
    const MemoryDataAttrs& a = c.node.attrs.as<MemoryDataAttrs>();
    out[0] = {a.batch_size, a.channels, a.height, a.width};
    out[1] = {a.batch_size, 1, 1, 1};
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f = no_backward_facts();
    f.external_input = true;
    return f;
  }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::external_input}); }
};

// ---- Kernels ----

class InputKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  void forward(OpCall&) override {}
};

// A data layer's kernel: batches of its dataset assembled by a background loader.
class LoaderKernel : public Kernel {
 public:
  LoaderKernel(const OpInit& i, std::shared_ptr<const Dataset> ds, std::optional<Transform> transform,
               LoaderOptions opt, int64_t rand_skip, std::string describe)
      : Kernel(i), ds_(std::move(ds)), describe_(std::move(describe)) {
    opt.seed = i.seed;
    opt.name = i.node.name;
    // Caffe skips a random number of samples in [0, rand_skip] at the start.
    if (rand_skip > 0)
      opt.skip =
          static_cast<int64_t>(Rng::derive(i.seed, i.node.name + ".skip").below(static_cast<uint64_t>(rand_skip) + 1));
    std::vector<int> fields(i.node.outputs.size());
    for (size_t k = 0; k < fields.size(); ++k) fields[k] = static_cast<int>(k);
    loader_ = std::make_unique<BatchLoader>(ds_, fields, std::move(transform), opt);
  }
  void forward(OpCall& c) override { loader_->load(c.step, c.out); }
  int64_t dataset_size() const override { return ds_->size; }
  std::string kernel_name() const override { return describe_; }

 protected:
  static LoaderOptions batch(int64_t batch_size, bool shuffle = false) {
    LoaderOptions o;
    o.batch = batch_size;
    o.shuffle = shuffle;
    return o;
  }

 private:
  std::shared_ptr<const Dataset> ds_;
  std::string describe_;
  std::unique_ptr<BatchLoader> loader_;
};

std::string cached_description(const Dataset& ds) {
  const DatasetField* data = ds.field("data");
  return fmt::format("{} dataset, {} samples, {}, background loader", ds.format, ds.size,
                     data && data->encoded ? "kept encoded in memory and decoded as batches are built"
                                           : "cached in memory");
}

class DataKernel final : public LoaderKernel {
 public:
  explicit DataKernel(const OpInit& i) : DataKernel(i, open_data(OpContext{i.node, i.where, i.phase}, true)) {}

 private:
  DataKernel(const OpInit& i, std::shared_ptr<const Dataset> ds)
      : LoaderKernel(i, ds, data_transform(OpContext{i.node, i.where, i.phase}, *ds),
                     batch(i.node.attrs.as<DataAttrs>().batch_size), i.node.attrs.as<DataAttrs>().rand_skip,
                     cached_description(*ds)) {}
};

class ImageDataKernel final : public LoaderKernel {
 public:
  explicit ImageDataKernel(const OpInit& i) : ImageDataKernel(i, open_images(OpContext{i.node, i.where, i.phase})) {}

 private:
  ImageDataKernel(const OpInit& i, std::shared_ptr<const Dataset> ds)
      : LoaderKernel(i, ds, image_transform(OpContext{i.node, i.where, i.phase}, *ds),
                     batch(i.node.attrs.as<ImageDataAttrs>().batch_size, i.node.attrs.as<ImageDataAttrs>().shuffle),
                     i.node.attrs.as<ImageDataAttrs>().rand_skip, cached_description(*ds)) {}
};

class HDF5DataKernel final : public LoaderKernel {
 public:
  explicit HDF5DataKernel(const OpInit& i) : HDF5DataKernel(i, open_hdf5_data(OpContext{i.node, i.where, i.phase})) {}

 private:
  HDF5DataKernel(const OpInit& i, std::shared_ptr<const Dataset> ds)
      : LoaderKernel(i, ds, std::nullopt,
                     batch(i.node.attrs.as<HDF5DataAttrs>().batch_size, i.node.attrs.as<HDF5DataAttrs>().shuffle), 0,
                     fmt::format("hdf5, {} samples in memory", ds->size)) {}
};

}  // namespace

BKS_REGISTER_OP_DEF("Input", InputDef);
BKS_REGISTER_OP_DEF("Data", DataDef);
BKS_REGISTER_OP_DEF("HDF5Data", HDF5DataDef);
BKS_REGISTER_OP_DEF("ImageData", ImageDataDef);
BKS_REGISTER_OP_DEF("MemoryData", MemoryDataDef);

BKS_REGISTER_KERNEL("Input", ::bks::DeviceKind::cpu, InputKernel, "loops", kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("MemoryData", ::bks::DeviceKind::cpu, InputKernel, "loops", kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("Data", ::bks::DeviceKind::cpu, DataKernel, "loops", kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("ImageData", ::bks::DeviceKind::cpu, ImageDataKernel, "loops", kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("HDF5Data", ::bks::DeviceKind::cpu, HDF5DataKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
