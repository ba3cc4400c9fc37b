// WindowData (BVLC Caffe, R-CNN's fine-tuning): batches of boxes from a window file, each
// warped to a crop_size square (data/window_data.h). As Caffe's layer takes them: scale from
// window_data_param; crop_size, mirror and the mean from transform_param.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "data/image_decode.h"
#include "data/prefetcher.h"
#include "data/window_data.h"
#include "ops/op.h"

namespace bks {
namespace {

struct WindowDataAttrs final : AttrsOf<WindowDataAttrs> {
  std::string source;  // the window file; empty: not given
  int64_t batch_size = 0;
  float fg_threshold = 0.5f, bg_threshold = 0.5f, fg_fraction = 0.25f;
  int64_t context_pad = 0;
  std::string crop_mode = "warp";
  bool cache_images = false;
  std::string root_folder;
  float scale = 1.f;  // window_data_param.scale
  // transform_param's
  bool mirror = false;
  int64_t crop_size = 0;
  std::string mean_file;
  std::vector<float> mean_value;
  void visit(AttrVisitor& v) override {
    v.field("source", source);
    v.field("batch_size", batch_size);
    v.field("fg_threshold", fg_threshold);
    v.field("bg_threshold", bg_threshold);
    v.field("fg_fraction", fg_fraction);
    v.field("context_pad", context_pad);
    v.field("crop_mode", crop_mode);
    v.field("cache_images", cache_images);
    v.field("root_folder", root_folder);
    v.field("scale", scale);
    v.field("mirror", mirror);
    v.field("crop_size", crop_size);
    v.field("mean_file", mean_file);
    v.field("mean_value", mean_value);
  }
};

void window_data_from_caffe(const proto::LayerParameter& l, WindowDataAttrs& a, const std::string& where) {
  const proto::WindowDataParameter& p = l.window_data_param();
  const proto::TransformationParameter& t = l.transform_param();
  // Caffe's layer reads these from transform_param only (the V1 upgrade moves them there).
  if (p.has_mean_file() || p.has_crop_size() || p.has_mirror())
    input_error("{}: window_data_param mean_file/crop_size/mirror are deprecated; use transform_param", where);
  if (t.has_scale())
    input_error("{}: WindowData scales by window_data_param.scale; Caffe's layer ignores transform_param.scale", where);
  if (t.force_color() || t.force_gray())
    input_error("{}: transform_param.force_color/force_gray do not apply to WindowData (it reads colour images)",
                where);
  if (t.has_mean_file() && t.mean_file().empty()) input_error("{}: transform_param.mean_file is empty", where);
  a.source = p.source();
  a.batch_size = p.batch_size();
  a.fg_threshold = p.fg_threshold();
  a.bg_threshold = p.bg_threshold();
  a.fg_fraction = p.fg_fraction();
  a.context_pad = p.context_pad();
  a.crop_mode = p.crop_mode();
  a.cache_images = p.cache_images();
  a.root_folder = p.root_folder();
  a.scale = p.scale();
  a.mirror = t.mirror();
  a.crop_size = t.crop_size();
  a.mean_file = t.mean_file();
  a.mean_value.assign(t.mean_value().begin(), t.mean_value().end());
}
void window_data_to_caffe(const WindowDataAttrs& a, proto::LayerParameter& l) {
  proto::WindowDataParameter* p = l.mutable_window_data_param();
  p->clear_source();
  if (!a.source.empty()) p->set_source(a.source);
  p->set_batch_size(static_cast<uint32_t>(a.batch_size));
  p->set_fg_threshold(a.fg_threshold);
  p->set_bg_threshold(a.bg_threshold);
  p->set_fg_fraction(a.fg_fraction);
  p->set_context_pad(static_cast<uint32_t>(a.context_pad));
  p->set_crop_mode(a.crop_mode);
  p->set_cache_images(a.cache_images);
  p->set_root_folder(a.root_folder);
  p->set_scale(a.scale);
  proto::TransformationParameter* t = l.mutable_transform_param();
  t->set_mirror(a.mirror);
  t->set_crop_size(static_cast<uint32_t>(a.crop_size));
  t->clear_mean_file();
  if (!a.mean_file.empty()) t->set_mean_file(a.mean_file);
  t->clear_mean_value();
  for (float m : a.mean_value) t->add_mean_value(m);
}
BKS_REGISTER_ATTRS("WindowData", WindowDataAttrs, window_data_from_caffe, window_data_to_caffe);

constexpr int64_t kChannels = 3;  // Caffe reads the images in colour

class WindowDataDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 0; }
  int min_outputs(const OpContext&) const override { return 2; }
  void check(const OpContext& c) const override {
    const WindowDataAttrs& a = c.node.attrs.as<WindowDataAttrs>();
    if (a.source.empty()) c.fail("window_data_param.source is required");
    if (a.batch_size <= 0) c.fail("window_data_param.batch_size must be positive");
    if (a.crop_size <= 0) c.fail("transform_param.crop_size is required: WindowData warps each window to that square");
    if (a.crop_size * a.crop_size > kMaxImagePixels)
      c.fail("transform_param.crop_size {} is over {} pixels", a.crop_size, kMaxImagePixels);
    if (a.context_pad < 0 || 2 * a.context_pad >= a.crop_size)
      c.fail("window_data_param.context_pad {} leaves no room for the window in a crop of {}", a.context_pad,
             a.crop_size);
    if (a.crop_mode != "warp" && a.crop_mode != "square")
      c.fail("window_data_param.crop_mode '{}': expected \"warp\" or \"square\"", a.crop_mode);
    if (!(a.fg_fraction >= 0.f && a.fg_fraction <= 1.f))
      c.fail("window_data_param.fg_fraction {} must lie in [0, 1]", a.fg_fraction);
    if (!a.mean_file.empty() && !a.mean_value.empty())
      c.fail("transform_param takes mean_file or mean_value, not both");
    if (a.mean_value.size() != 0 && a.mean_value.size() != 1 && a.mean_value.size() != kChannels)
      c.fail("{} transform_param.mean_value entries for {} channels (give 1 or {})", a.mean_value.size(), kChannels,
             kChannels);
  }
  // Caffe's shapes: (batch, 3, crop, crop) and one label per item.
  void infer(const OpContext& c, const std::vector<Shape>&, std::vector<Shape>& out) const override {
    const WindowDataAttrs& a = c.node.attrs.as<WindowDataAttrs>();
    out[0] = {a.batch_size, kChannels, a.crop_size, a.crop_size};
    out[1] = {a.batch_size};
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override { return no_backward_facts(); }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::data_layer}); }
  std::optional<AbsentSource> absent_source(const OpContext& c) const override {
    const WindowDataAttrs& a = c.node.attrs.as<WindowDataAttrs>();
    if (std::filesystem::exists(a.source)) return std::nullopt;
    return AbsentSource{a.source, {{a.batch_size, kChannels, a.crop_size, a.crop_size}, {a.batch_size}}};
  }
};

// The batch options of a node: its attributes, and the mean read and checked.
WindowBatchOptions batch_options(const OpInit& i) {
  const WindowDataAttrs& a = i.node.attrs.as<WindowDataAttrs>();
  WindowBatchOptions o;
  o.batch = a.batch_size;
  o.crop_size = static_cast<int>(a.crop_size);
  o.context_pad = static_cast<int>(a.context_pad);
  o.square = a.crop_mode == "square";
  o.mirror = a.mirror;
  o.fg_fraction = a.fg_fraction;
  o.scale = a.scale;
  o.seed = i.seed;
  o.name = i.node.name;
  if (!a.mean_value.empty()) {
    for (int64_t k = 0; k < kChannels; ++k) o.mean.push_back(a.mean_value[a.mean_value.size() == 1 ? 0 : k]);
  } else if (!a.mean_file.empty()) {
    proto::BlobProto blob;
    read_binary_proto(a.mean_file, blob);
    Shape m = blob.has_shape() ? Shape(blob.shape().dim().begin(), blob.shape().dim().end())
                               : Shape{blob.num(), blob.channels(), blob.height(), blob.width()};
    if (m.size() == 3) m.insert(m.begin(), 1);
    // Caffe reads the crop at the same offset on both axes, from the mean's width.
    const int64_t off = m.size() == 4 ? (m[3] - a.crop_size) / 2 : -1;
    if (m.size() != 4 || m[0] != 1 || m[1] != kChannels || off < 0 || off + a.crop_size > m[2] ||
        blob.data_size() != shape_numel(m))
      input_error(
          "{}: mean_file {} is {} ({} values); WindowData needs a 1 x 3 x H x W mean of at least the {} x {} "
          "crop",
          i.where, a.mean_file, shape_str(m), blob.data_size(), a.crop_size, a.crop_size);
    o.mean.assign(blob.data().begin(), blob.data().end());
    o.mean_h = static_cast<int>(m[2]);
    o.mean_w = static_cast<int>(m[3]);
  }
  return o;
}

class WindowDataKernel final : public Kernel {
 public:
  explicit WindowDataKernel(const OpInit& i) : Kernel(i), opt_(batch_options(i)) {
    const WindowDataAttrs& a = i.node.attrs.as<WindowDataAttrs>();
    WindowFileOptions f;
    f.root_folder = a.root_folder;
    f.fg_threshold = a.fg_threshold;
    f.bg_threshold = a.bg_threshold;
    f.cache_images = a.cache_images;
    f.clipped = a.context_pad > 0 || a.crop_mode == "square";
    try {
      ws_ = open_window_file(a.source, f);
      check_window_batch(*ws_, opt_);
    } catch (const InputError& e) {
      fail("{}", e.what());
    }
    Shape data{opt_.batch, kChannels, opt_.crop_size, opt_.crop_size};
    prefetch_ = std::make_unique<Prefetcher>(std::vector<Shape>{data, {opt_.batch}},
                                             [this](int64_t step, std::vector<Tensor>& out) {
                                               build_window_batch(*ws_, opt_, step, out[0].f32(), out[1].f32());
                                             });
  }
  void forward(OpCall& c) override { prefetch_->load(c.step, c.out); }
  int64_t dataset_size() const override { return static_cast<int64_t>(ws_->fg.size() + ws_->bg.size()); }
  std::string kernel_name() const override {
    return fmt::format("window file, {} images ({}), {} + {} windows, background loader", ws_->images.size(),
                       node_.attrs.as<WindowDataAttrs>().cache_images ? "cached encoded" : "read per window",
                       ws_->fg.size(), ws_->bg.size());
  }

 private:
  WindowBatchOptions opt_;
  std::shared_ptr<const WindowSet> ws_;
  std::unique_ptr<Prefetcher> prefetch_;  // last: its thread reads the members above
};

}  // namespace

BKS_REGISTER_OP_DEF("WindowData", WindowDataDef);
BKS_REGISTER_KERNEL("WindowData", ::bks::DeviceKind::cpu, WindowDataKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
