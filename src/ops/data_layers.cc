// Layers that bring data into the graph: Input (filled by the caller), Data (IDX or HDF5
// file chosen by content, with transform_param) and HDF5Data (Caffe's list of .h5 files).
//
// The definitions infer output shapes from the dataset itself (open_dataset and
// open_hdf5_list are cached per path, so the kernel's loader shares what they read).
#include <algorithm>
#include <memory>

#include "core/log.h"
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

class InputDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 0; }
  int max_outputs(const OpContext&) const override { return -1; }
  void check(const OpContext& c) const override {
    const auto& p = c.node.param.input_param();
    size_t tops = c.node.outputs.size();
    if (p.shape_size() != 1 && p.shape_size() != static_cast<int>(tops))
      c.fail("input_param needs one shape, or one per top ({} tops, {} shapes)", tops, p.shape_size());
  }
  void infer(const OpContext& c, const std::vector<Shape>&, std::vector<Shape>& out) const override {
    const auto& p = c.node.param.input_param();
    for (size_t j = 0; j < out.size(); ++j) {
      const auto& s = p.shape(p.shape_size() == 1 ? 0 : static_cast<int>(j));
      out[j] = Shape(s.dim().begin(), s.dim().end());
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

}  // namespace

void make_external_input(Node& n, const std::vector<Shape>& shapes) {
  proto::LayerParameter p;
  p.set_name(n.name);
  p.set_type("Input");
  for (const Shape& s : shapes) {
    auto* shape = p.mutable_input_param()->add_shape();
    for (int64_t d : s) shape->add_dim(d);
  }
  n.param = p;
  n.type = "Input";
}

void keep_external_outputs(Node& n, const std::vector<bool>& keep) {
  const auto& shapes = n.param.input_param();
  proto::InputParameter kept;
  std::vector<int> outs;
  for (size_t j = 0; j < n.outputs.size(); ++j) {
    if (!keep[j]) continue;
    outs.push_back(n.outputs[j]);
    if (shapes.shape_size() > 0)
      *kept.add_shape() = shapes.shape(static_cast<int>(std::min<size_t>(j, shapes.shape_size() - 1)));
  }
  n.outputs = outs;
  n.loss_weight.assign(outs.size(), 0.f);
  *n.param.mutable_input_param() = kept;
}

namespace {

// ---- Data ----

// The dataset of a Data layer, checked: a 'data' field of (C,H,W) samples, and labels when
// a second top asks for them. `warn` logs an ignored data_param.backend (the kernel's).
std::shared_ptr<const Dataset> open_data(const OpContext& c, bool warn) {
  const auto& dp = c.node.param.data_param();
  std::shared_ptr<const Dataset> ds;
  try {
    ds = open_dataset(dp.source());
  } catch (const InputError& e) {
    c.fail("{}", e.what());
  }
  if (warn && dp.has_backend() && ds->format != "lmdb" && ds->format != "leveldb")
    log::warn("{}: data_param.backend {} ignored: {} is an {} file", c.where,
              proto::DataParameter::DB_Name(dp.backend()), dp.source(), ds->format);
  const DatasetField* data = ds->field("data");
  if (!data || data->sample_shape.size() != 3) c.fail("{}: needs a 'data' field of (C,H,W) samples", dp.source());
  if (c.node.outputs.size() > 1 && !ds->field("label")) c.fail("{} has no labels for the second top", dp.source());
  return ds;
}

// The transform_param of a Data layer over its dataset's samples.
Transform data_transform(const OpContext& c, const Dataset& ds) {
  return Transform(c.node.param.transform_param(), ds.field("data")->sample_shape, c.phase == proto::TRAIN, c.where);
}

class DataDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 0; }
  int max_outputs(const OpContext&) const override { return 2; }
  void check(const OpContext& c) const override {
    const auto& dp = c.node.param.data_param();
    if (!dp.has_source()) c.fail("data_param.source is required");
    if (dp.batch_size() == 0) c.fail("data_param.batch_size must be positive");
    if (dp.has_scale() || dp.has_mean_file() || dp.has_crop_size() || dp.has_mirror())
      c.fail("data_param scale/mean_file/crop_size/mirror are deprecated; use transform_param");
  }
  // As the loader: the data field transformed, then the label field (field 1).
  void infer(const OpContext& c, const std::vector<Shape>&, std::vector<Shape>& out) const override {
    auto ds = open_data(c, false);
    int64_t batch = c.node.param.data_param().batch_size();
    out[0] = batch_of(batch, data_transform(c, *ds).output_shape());
    if (out.size() > 1) out[1] = batch_of(batch, ds->fields[1].sample_shape);
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override { return no_backward_facts(); }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::data_layer}); }
};

// ---- HDF5Data ----

// The HDF5 files a HDF5Data layer lists, with one field per top.
std::shared_ptr<const Dataset> open_hdf5_data(const OpContext& c) {
  std::vector<std::string> names(c.node.param.top().begin(), c.node.param.top().end());
  try {
    return open_hdf5_list(c.node.param.hdf5_data_param().source(), names);
  } catch (const InputError& e) {
    c.fail("{}", e.what());
  }
}

class HDF5DataDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 0; }
  int max_outputs(const OpContext&) const override { return -1; }
  void check(const OpContext& c) const override {
    const auto& p = c.node.param.hdf5_data_param();
    if (!p.has_source()) c.fail("hdf5_data_param.source is required");
    if (p.batch_size() == 0) c.fail("hdf5_data_param.batch_size must be positive");
    if (c.node.param.has_transform_param()) c.fail("HDF5Data does not transform data; remove transform_param");
  }
  void infer(const OpContext& c, const std::vector<Shape>&, std::vector<Shape>& out) const override {
    auto ds = open_hdf5_data(c);
    int64_t batch = c.node.param.hdf5_data_param().batch_size();
    for (size_t j = 0; j < out.size(); ++j) out[j] = batch_of(batch, ds->fields[j].sample_shape);
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override { return no_backward_facts(); }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::data_layer}); }
};

// ---- Kernels ----

class InputKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  void forward(OpCall&) override {}
};

class DataKernel final : public Kernel {
 public:
  explicit DataKernel(const OpInit& i) : Kernel(i), ds_(open_data(context(), true)) {
    const auto& dp = i.node.param.data_param();
    std::vector<int> fields{0};
    if (i.node.outputs.size() > 1) fields.push_back(1);
    LoaderOptions opt;
    opt.batch = dp.batch_size();
    opt.seed = i.seed;
    opt.name = i.node.name;
    if (dp.rand_skip() > 0)
      opt.skip = static_cast<int64_t>(Rng::derive(i.seed, i.node.name + ".skip").below(dp.rand_skip() + 1));
    loader_ = std::make_unique<BatchLoader>(ds_, fields, data_transform(context(), *ds_), opt);
  }
  void forward(OpCall& c) override { loader_->load(c.step, c.out); }
  int64_t dataset_size() const override { return ds_->size; }
  std::string kernel_name() const override {
    return fmt::format("{} dataset, {} samples, cached in memory, background loader", ds_->format, ds_->size);
  }

 private:
  std::shared_ptr<const Dataset> ds_;
  std::unique_ptr<BatchLoader> loader_;
};

class HDF5DataKernel final : public Kernel {
 public:
  explicit HDF5DataKernel(const OpInit& i) : Kernel(i), ds_(open_hdf5_data(context())) {
    const auto& p = i.node.param.hdf5_data_param();
    std::vector<int> fields(static_cast<size_t>(i.node.param.top_size()));
    for (size_t k = 0; k < fields.size(); ++k) fields[k] = static_cast<int>(k);
    LoaderOptions opt;
    opt.batch = p.batch_size();
    opt.shuffle = p.shuffle();
    opt.seed = i.seed;
    opt.name = i.node.name;
    loader_ = std::make_unique<BatchLoader>(ds_, fields, std::nullopt, opt);
  }
  void forward(OpCall& c) override { loader_->load(c.step, c.out); }
  int64_t dataset_size() const override { return ds_->size; }
  std::string kernel_name() const override { return fmt::format("hdf5, {} samples in memory", ds_->size); }

 private:
  std::shared_ptr<const Dataset> ds_;
  std::unique_ptr<BatchLoader> loader_;
};

}  // namespace

BKS_REGISTER_OP_DEF("Input", InputDef);
BKS_REGISTER_OP_DEF("Data", DataDef);
BKS_REGISTER_OP_DEF("HDF5Data", HDF5DataDef);

BKS_REGISTER_KERNEL("Input", ::bks::DeviceKind::cpu, InputKernel, "loops", kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("Data", ::bks::DeviceKind::cpu, DataKernel, "loops", kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("HDF5Data", ::bks::DeviceKind::cpu, HDF5DataKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
