// Tile: `tiles` copies of the input side by side along `axis` (Caffe's tile_param): each
// block of axes [axis, end) repeats, so the axis grows by the factor. Backward sums the
// copies.
#include <cstring>

#include "ops/op.h"

namespace bks {
namespace {

struct TileAttrs final : AttrsOf<TileAttrs> {
  int64_t axis = 1;
  int64_t tiles = 0;  // Caffe has no default: 0 means not given
  void visit(AttrVisitor& v) override {
    v.field("axis", axis);
    v.field("tiles", tiles);
  }
};

void tile_from_caffe(const proto::LayerParameter& l, TileAttrs& a, const std::string&) {
  a.axis = l.tile_param().axis();
  a.tiles = l.tile_param().tiles();
}
void tile_to_caffe(const TileAttrs& a, proto::LayerParameter& l) {
  l.mutable_tile_param()->set_axis(static_cast<int32_t>(a.axis));
  l.mutable_tile_param()->set_tiles(static_cast<int32_t>(a.tiles));
}
BKS_REGISTER_ATTRS("Tile", TileAttrs, tile_from_caffe, tile_to_caffe);

// Blocks before the axis, and the floats of one block to repeat.
struct TileSplit {
  int64_t outer = 1, inner = 1;
};
TileSplit tile_split(const TileAttrs& a, const Shape& s) {
  int axis = canonical_axis(a.axis, static_cast<int>(s.size()), "tile_param.axis");
  return {shape_count(s, 0, axis), shape_count(s, axis, static_cast<int>(s.size()))};
}

class TileDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override {
    int64_t t = c.node.attrs.as<TileAttrs>().tiles;
    if (t <= 0) c.fail("tile_param.tiles must be given and positive, got {}", t);
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    const TileAttrs& a = c.node.attrs.as<TileAttrs>();
    int axis = canonical_axis(a.axis, static_cast<int>(in[0].size()), "tile_param.axis");
    out[0] = in[0];
    if (__builtin_mul_overflow(in[0][axis], a.tiles, &out[0][axis]))
      c.fail("tile_param.tiles {} makes axis {} of {} overflow", a.tiles, axis, shape_str(in[0]));
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.backward_reads_input = false;
    return f;
  }
};

class TileKernel final : public Kernel {
 public:
  explicit TileKernel(const OpInit& i) : Kernel(i), a_(i.node.attrs.as<TileAttrs>()) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override { sp_ = tile_split(a_, in[0]); }
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    float* y = c.out[0]->f32();
    for (int64_t o = 0; o < sp_.outer; ++o)
      for (int64_t t = 0; t < a_.tiles; ++t)
        std::memcpy(y + (o * a_.tiles + t) * sp_.inner, x + o * sp_.inner, sp_.inner * sizeof(float));
  }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* dy = c.out_grad[0]->f32();
    float* dx = c.in_grad[0]->f32();
    for (int64_t o = 0; o < sp_.outer; ++o) {
      float* d = dx + o * sp_.inner;
      std::memcpy(d, dy + o * a_.tiles * sp_.inner, sp_.inner * sizeof(float));
      for (int64_t t = 1; t < a_.tiles; ++t) {
        const float* g = dy + (o * a_.tiles + t) * sp_.inner;
        for (int64_t k = 0; k < sp_.inner; ++k) d[k] += g[k];
      }
    }
  }

 private:
  TileAttrs a_;
  TileSplit sp_;
};

}  // namespace

BKS_REGISTER_OP_DEF("Tile", TileDef);
BKS_REGISTER_KERNEL("Tile", ::bks::DeviceKind::cpu, TileKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
