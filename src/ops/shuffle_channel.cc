// ShuffleChannel (the ShuffleNet forks, farmingyard/ShuffleNet): the channels, viewed as a
// group x (C / group) matrix, are transposed, so output channel j * group + i is input
// channel i * (C / group) + j. Backward applies the inverse permutation.
#include <cstring>

#include "ops/op.h"

namespace bks {
namespace {

struct ShuffleChannelAttrs final : AttrsOf<ShuffleChannelAttrs> {
  int64_t group = 1;
  void visit(AttrVisitor& v) override { v.field("group", group); }
};

void shuffle_from_caffe(const proto::LayerParameter& l, ShuffleChannelAttrs& a, const std::string&) {
  a.group = l.shuffle_channel_param().group();
}
void shuffle_to_caffe(const ShuffleChannelAttrs& a, proto::LayerParameter& l) {
  l.mutable_shuffle_channel_param()->set_group(static_cast<uint32_t>(a.group));
}
BKS_REGISTER_ATTRS("ShuffleChannel", ShuffleChannelAttrs, shuffle_from_caffe, shuffle_to_caffe);

class ShuffleChannelDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override {
    int64_t g = c.node.attrs.as<ShuffleChannelAttrs>().group;
    if (g <= 0 || g > INT32_MAX) c.fail("shuffle_channel_param.group must be positive, got {}", g);
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    int64_t g = c.node.attrs.as<ShuffleChannelAttrs>().group;
    OpContext::ChannelSplit s = c.split_channels(in[0]);
    if (s.c % g)
      c.fail("the bottom's {} channels ({}) are not divisible by shuffle_channel_param.group {}", s.c, shape_str(in[0]),
             g);
    out[0] = in[0];
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.backward_reads_input = false;
    return f;
  }
};

class ShuffleChannelKernel final : public Kernel {
 public:
  explicit ShuffleChannelKernel(const OpInit& i) : Kernel(i), group_(i.node.attrs.as<ShuffleChannelAttrs>().group) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override { s_ = split_channels(in[0]); }

  // Forward moves the (rows x cols) matrix of channel planes to (cols x rows); backward
  // is the same move of the gradient with rows and cols swapped.
  void forward(OpCall& c) override { transpose(c.in[0]->f32(), c.out[0]->f32(), group_, s_.c / group_); }
  void backward(OpCall& c) override {
    if (c.in_grad[0]) transpose(c.out_grad[0]->f32(), c.in_grad[0]->f32(), s_.c / group_, group_);
  }

 private:
  void transpose(const float* src, float* dst, int64_t rows, int64_t cols) const {
    const int64_t plane = s_.spatial, item = s_.c * plane;
    const size_t bytes = static_cast<size_t>(plane) * sizeof(float);
    for (int64_t n = 0; n < s_.n; ++n)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < cols; ++k)
          std::memcpy(dst + n * item + (k * rows + r) * plane, src + n * item + (r * cols + k) * plane, bytes);
  }
  int64_t group_;
  ChannelSplit s_{};
};

}  // namespace

BKS_REGISTER_OP_DEF("ShuffleChannel", ShuffleChannelDef);
BKS_REGISTER_KERNEL("ShuffleChannel", ::bks::DeviceKind::cpu, ShuffleChannelKernel, "loops", kReferencePriority,
                    nullptr);

}  // namespace bks
