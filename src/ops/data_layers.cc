// Layers that bring data into the graph: Input (filled by the caller), Data (IDX or HDF5
// file chosen by content, with transform_param) and HDF5Data (Caffe's list of .h5 files).
#include <memory>

#include "core/log.h"
#include "data/loader.h"
#include "ops/op.h"

namespace bks {
namespace {

class InputOp final : public Op {
 public:
  explicit InputOp(const OpInit& i) : Op(i), p_(i.node.param.input_param()), tops_(i.node.outputs.size()) {
    if (p_.shape_size() != 1 && p_.shape_size() != static_cast<int>(tops_))
      fail("input_param needs one shape, or one per top ({} tops, {} shapes)", tops_, p_.shape_size());
  }
  int min_inputs() const override { return 0; }
  int max_outputs() const override { return -1; }
  bool has_backward() const override { return false; }
  bool is_external_input() const override { return true; }
  void infer(const std::vector<Shape>&, std::vector<Shape>& out) override {
    for (size_t j = 0; j < out.size(); ++j) {
      if (!current_.empty()) {
        out[j] = current_[j];
        continue;
      }
      const auto& s = p_.shape(p_.shape_size() == 1 ? 0 : static_cast<int>(j));
      out[j] = Shape(s.dim().begin(), s.dim().end());
      for (auto d : out[j])
        if (d <= 0) fail("input_param shape {} has a non-positive dimension", shape_str(out[j]));
    }
    current_ = out;
  }
  // Lets a caller resize an input (then Net::reshape()).
  void set_shape(int j, const Shape& s) { current_.at(j) = s; }
  void forward(OpCall&) override {}

 private:
  proto::InputParameter p_;
  size_t tops_;
  std::vector<Shape> current_;
};

class DataOp final : public Op {
 public:
  explicit DataOp(const OpInit& i) : Op(i), p_(i.node.param.data_param()) {
    const auto& dp = p_;
    if (!dp.has_source()) fail("data_param.source is required");
    if (dp.batch_size() == 0) fail("data_param.batch_size must be positive");
    if (dp.has_scale() || dp.has_mean_file() || dp.has_crop_size() || dp.has_mirror())
      fail("data_param scale/mean_file/crop_size/mirror are deprecated; use transform_param");
    try {
      ds_ = open_dataset(dp.source());
    } catch (const InputError& e) {
      fail("{}", e.what());
    }
    if (dp.has_backend() && ds_->format != "lmdb" && ds_->format != "leveldb")
      log::warn("{}: data_param.backend {} ignored: {} is an {} file", where_,
                proto::DataParameter::DB_Name(dp.backend()), dp.source(), ds_->format);
    const DatasetField* data = ds_->field("data");
    if (!data || data->sample_shape.size() != 3)
      fail("{}: needs a 'data' field of (C,H,W) samples", dp.source());
    std::vector<int> fields{0};
    if (i.node.outputs.size() > 1) {
      if (!ds_->field("label")) fail("{} has no labels for the second top", dp.source());
      fields.push_back(1);
    }
    LoaderOptions opt;
    opt.batch = dp.batch_size();
    opt.seed = i.seed;
    opt.name = i.node.name;
    if (dp.rand_skip() > 0) opt.skip = static_cast<int64_t>(Rng::derive(i.seed, i.node.name + ".skip").below(dp.rand_skip() + 1));
    loader_ = std::make_unique<BatchLoader>(
        ds_, fields, Transform(i.node.param.transform_param(), data->sample_shape, i.phase == proto::TRAIN, where_), opt);
  }
  int min_inputs() const override { return 0; }
  int max_outputs() const override { return 2; }
  bool has_backward() const override { return false; }
  void infer(const std::vector<Shape>&, std::vector<Shape>& out) override {
    auto shapes = loader_->output_shapes();
    for (size_t j = 0; j < out.size(); ++j) out[j] = shapes[j];
  }
  void forward(OpCall& c) override { loader_->load(c.step, c.out); }
  int64_t dataset_size() const override { return ds_->size; }
  std::string kernel_name() const override {
    return fmt::format("{} dataset, {} samples, cached in memory, background loader", ds_->format, ds_->size);
  }

 private:
  proto::DataParameter p_;
  std::shared_ptr<const Dataset> ds_;
  std::unique_ptr<BatchLoader> loader_;
};

class HDF5DataOp final : public Op {
 public:
  explicit HDF5DataOp(const OpInit& i) : Op(i), p_(i.node.param.hdf5_data_param()) {
    if (!p_.has_source()) fail("hdf5_data_param.source is required");
    if (p_.batch_size() == 0) fail("hdf5_data_param.batch_size must be positive");
    if (i.node.param.has_transform_param()) fail("HDF5Data does not transform data; remove transform_param");
    std::vector<std::string> names(i.node.param.top().begin(), i.node.param.top().end());
    try {
      ds_ = open_hdf5_list(p_.source(), names);
    } catch (const InputError& e) {
      fail("{}", e.what());
    }
    std::vector<int> fields(names.size());
    for (size_t k = 0; k < names.size(); ++k) fields[k] = static_cast<int>(k);
    LoaderOptions opt;
    opt.batch = p_.batch_size();
    opt.shuffle = p_.shuffle();
    opt.seed = i.seed;
    opt.name = i.node.name;
    loader_ = std::make_unique<BatchLoader>(ds_, fields, std::nullopt, opt);
  }
  int min_inputs() const override { return 0; }
  int max_outputs() const override { return -1; }
  bool has_backward() const override { return false; }
  void infer(const std::vector<Shape>&, std::vector<Shape>& out) override {
    auto shapes = loader_->output_shapes();
    for (size_t j = 0; j < out.size(); ++j) out[j] = shapes[j];
  }
  void forward(OpCall& c) override { loader_->load(c.step, c.out); }
  int64_t dataset_size() const override { return ds_->size; }
  std::string kernel_name() const override { return fmt::format("hdf5, {} samples in memory", ds_->size); }

 private:
  proto::HDF5DataParameter p_;
  std::shared_ptr<const Dataset> ds_;
  std::unique_ptr<BatchLoader> loader_;
};

}  // namespace

BKS_REGISTER_OP("Input", InputOp);
BKS_REGISTER_OP("Data", DataOp);
BKS_REGISTER_OP("HDF5Data", HDF5DataOp);

}  // namespace bks
