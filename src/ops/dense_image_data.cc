// DenseImageData (SegNet fork): image and label-image pairs for segmentation
// (data/dense_image_data.h). dense_image_data_param flips and crops both alike;
// transform_param gives the image's mean and scale (the fork refuses its mirror and
// crop_size, which would move the image without its labels).
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/log.h"
#include "data/dense_image_data.h"
#include "data/image_decode.h"
#include "data/prefetcher.h"
#include "ops/op.h"

namespace bks {
namespace {

struct DenseImageDataAttrs final : AttrsOf<DenseImageDataAttrs> {
  std::string source;  // the list file; empty: not given
  int64_t batch_size = 0;
  int64_t rand_skip = 0;
  bool shuffle = false;
  bool mirror = false;
  DenseImageOptions images;
  float scale = 1.f;  // transform_param's
  std::string mean_file;
  std::vector<float> mean_value;
  void visit(AttrVisitor& v) override {
    v.field("source", source);
    v.field("batch_size", batch_size);
    v.field("rand_skip", rand_skip);
    v.field("shuffle", shuffle);
    v.field("mirror", mirror);
    v.field("new_height", images.new_height);
    v.field("new_width", images.new_width);
    v.field("crop_height", images.crop_height);
    v.field("crop_width", images.crop_width);
    v.field("is_color", images.is_color);
    v.field("root_folder", images.root_folder);
    v.field("scale", scale);
    v.field("mean_file", mean_file);
    v.field("mean_value", mean_value);
  }
};

void dense_from_caffe(const proto::LayerParameter& l, DenseImageDataAttrs& a, const std::string& where) {
  const proto::DenseImageDataParameter& p = l.dense_image_data_param();
  const proto::TransformationParameter& t = l.transform_param();
  if (t.mirror() || t.crop_size() > 0)
    input_error(
        "{}: transform_param.mirror/crop_size would move the image without its labels (the fork refuses them); use "
        "dense_image_data_param mirror and crop_height/crop_width",
        where);
  if (t.force_color() || t.force_gray())
    input_error(
        "{}: transform_param.force_color/force_gray do not apply to DenseImageData; use "
        "dense_image_data_param.is_color",
        where);
  if (t.has_mean_file() && t.mean_file().empty()) input_error("{}: transform_param.mean_file is empty", where);
  if (p.has_mean_file())
    log::warn(
        "{}: dense_image_data_param.mean_file is ignored, as the fork ignores it; transform_param.mean_file "
        "subtracts a mean",
        where);
  a.source = p.source();
  a.batch_size = p.batch_size();
  a.rand_skip = p.rand_skip();
  a.shuffle = p.shuffle();
  a.mirror = p.mirror();
  a.images.new_height = p.new_height();
  a.images.new_width = p.new_width();
  a.images.crop_height = p.crop_height();
  a.images.crop_width = p.crop_width();
  a.images.is_color = p.is_color();
  a.images.root_folder = p.root_folder();
  a.scale = t.scale();
  a.mean_file = t.mean_file();
  a.mean_value.assign(t.mean_value().begin(), t.mean_value().end());
}
void dense_to_caffe(const DenseImageDataAttrs& a, proto::LayerParameter& l) {
  proto::DenseImageDataParameter* p = l.mutable_dense_image_data_param();
  p->clear_source();
  if (!a.source.empty()) p->set_source(a.source);
  p->set_batch_size(static_cast<uint32_t>(a.batch_size));
  p->set_rand_skip(static_cast<uint32_t>(a.rand_skip));
  p->set_shuffle(a.shuffle);
  p->set_mirror(a.mirror);
  p->set_new_height(static_cast<uint32_t>(a.images.new_height));
  p->set_new_width(static_cast<uint32_t>(a.images.new_width));
  p->set_crop_height(static_cast<uint32_t>(a.images.crop_height));
  p->set_crop_width(static_cast<uint32_t>(a.images.crop_width));
  p->set_is_color(a.images.is_color);
  p->set_root_folder(a.images.root_folder);
  proto::TransformationParameter* t = l.mutable_transform_param();
  t->set_scale(a.scale);
  t->clear_mean_file();
  if (!a.mean_file.empty()) t->set_mean_file(a.mean_file);
  t->clear_mean_value();
  for (float m : a.mean_value) t->add_mean_value(m);
}
BKS_REGISTER_ATTRS("DenseImageData", DenseImageDataAttrs, dense_from_caffe, dense_to_caffe);

std::shared_ptr<const DenseImageList> open_list(const OpContext& c) {
  const DenseImageDataAttrs& a = c.node.attrs.as<DenseImageDataAttrs>();
  try {
    return open_dense_image_list(a.source, a.images);
  } catch (const InputError& e) {
    c.fail("{}", e.what());
  }
}

// A sample's (height, width) as the definition tells it: the crop, else the resize; 0 and 0
// when only the images can tell.
std::pair<int64_t, int64_t> declared_size(const DenseImageOptions& o) {
  if (o.crop_height > 0) return {o.crop_height, o.crop_width};
  return {o.new_height, o.new_width};
}

class DenseImageDataDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 0; }
  int min_outputs(const OpContext&) const override { return 2; }
  void check(const OpContext& c) const override {
    const DenseImageDataAttrs& a = c.node.attrs.as<DenseImageDataAttrs>();
    const DenseImageOptions& o = a.images;
    if (a.source.empty()) c.fail("dense_image_data_param.source is required");
    if (a.batch_size <= 0) c.fail("dense_image_data_param.batch_size must be positive");
    if ((o.new_height > 0) != (o.new_width > 0))
      c.fail("dense_image_data_param.new_height and new_width must be given together");
    if ((o.crop_height > 0) != (o.crop_width > 0))
      c.fail("dense_image_data_param.crop_height and crop_width must be given together");
    if (o.new_height * o.new_width > kMaxImagePixels || o.crop_height * o.crop_width > kMaxImagePixels)
      c.fail("dense_image_data_param sizes must be at most {} pixels", kMaxImagePixels);
    if (o.new_height > 0 && o.crop_height > 0 && (o.crop_height > o.new_height || o.crop_width > o.new_width))
      c.fail("dense_image_data_param crop {} x {} exceeds new_height x new_width {} x {}", o.crop_height, o.crop_width,
             o.new_height, o.new_width);
    if (!a.mean_file.empty() && !a.mean_value.empty())
      c.fail("transform_param takes mean_file or mean_value, not both");
  }
  // Image (batch, C, h, w) and labels (batch, 1, h, w); the list tells h and w when neither a
  // crop nor a resize does.
  void infer(const OpContext& c, const std::vector<Shape>&, std::vector<Shape>& out) const override {
    const DenseImageDataAttrs& a = c.node.attrs.as<DenseImageDataAttrs>();
    auto [h, w] = declared_size(a.images);
    if (h == 0) {
      auto list = open_list(c);
      h = list->height;
      w = list->width;
    }
    out[0] = {a.batch_size, a.images.is_color ? 3 : 1, h, w};
    out[1] = {a.batch_size, 1, h, w};
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override { return no_backward_facts(); }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::data_layer}); }
  std::optional<AbsentSource> absent_source(const OpContext& c) const override {
    const DenseImageDataAttrs& a = c.node.attrs.as<DenseImageDataAttrs>();
    if (std::filesystem::exists(a.source)) return std::nullopt;
    auto [h, w] = declared_size(a.images);
    return AbsentSource{a.source, {{a.batch_size, a.images.is_color ? 3 : 1, h, w}, {a.batch_size, 1, h, w}}};
  }
};

class DenseImageDataKernel final : public Kernel {
 public:
  explicit DenseImageDataKernel(const OpInit& i) : Kernel(i), list_(open_list(context())) {
    const DenseImageDataAttrs& a = i.node.attrs.as<DenseImageDataAttrs>();
    opt_.batch = a.batch_size;
    opt_.mirror = a.mirror;
    opt_.seed = i.seed;
    opt_.name = i.node.name;
    const auto size = static_cast<int64_t>(list_->pairs.size());
    // The fork skips a random number in [0, rand_skip) at the start.
    int64_t skip = 0;
    if (a.rand_skip > 0) {
      if (a.rand_skip >= size)
        fail("dense_image_data_param.rand_skip {} is not below the {} pairs listed", a.rand_skip, size);
      skip = static_cast<int64_t>(Rng::derive(i.seed, i.node.name + ".skip").below(static_cast<uint64_t>(a.rand_skip)));
    }
    order_ = std::make_unique<EpochOrder>(size, a.batch_size, a.shuffle, skip, i.seed, i.node.name);
    auto [h, w] = declared_size(a.images);
    if (h == 0) h = list_->height, w = list_->width;
    TransformOptions t;
    t.scale = a.scale;
    t.mean_file = a.mean_file;
    t.mean_value = a.mean_value;
    transform_.emplace(t, Shape{list_->channels, h, w}, i.phase == proto::TRAIN, i.where);
    Shape data{a.batch_size, list_->channels, h, w}, label{a.batch_size, 1, h, w};
    prefetch_ =
        std::make_unique<Prefetcher>(std::vector<Shape>{data, label}, [this](int64_t step, std::vector<Tensor>& out) {
          build_dense_batch(*list_, node_.attrs.as<DenseImageDataAttrs>().images, opt_, *order_, &*transform_, step,
                            out[0].f32(), out[1].f32());
        });
  }
  void forward(OpCall& c) override { prefetch_->load(c.step, c.out); }
  int64_t dataset_size() const override { return static_cast<int64_t>(list_->pairs.size()); }
  std::string kernel_name() const override {
    return fmt::format("image and label list, {} pairs kept encoded, decoded by a background loader",
                       list_->pairs.size());
  }

 private:
  std::shared_ptr<const DenseImageList> list_;
  DenseBatchOptions opt_;
  std::unique_ptr<EpochOrder> order_;
  std::optional<Transform> transform_;
  std::unique_ptr<Prefetcher> prefetch_;  // last: its thread reads the members above
};

}  // namespace

BKS_REGISTER_OP_DEF("DenseImageData", DenseImageDataDef);
BKS_REGISTER_KERNEL("DenseImageData", ::bks::DeviceKind::cpu, DenseImageDataKernel, "loops", kReferencePriority,
                    nullptr);

}  // namespace bks
