#include "train/global_batch.h"

#include <google/protobuf/message.h>

#include "core/error.h"

namespace bks {
namespace {

// Whether Caffe's include/exclude rules could put the layer in the TRAIN phase (stage and
// level rules are left to the net builder; a layer they drop keeps a batch it never uses).
bool may_train(const proto::LayerParameter& l) {
  for (const auto& r : l.exclude())
    if (r.has_phase() && r.phase() == proto::TRAIN) return false;
  if (l.include_size() == 0) return true;
  for (const auto& r : l.include())
    if (!r.has_phase() || r.phase() == proto::TRAIN) return true;
  return false;
}

}  // namespace

void divide_train_batch(proto::NetParameter& net, int ranks, const std::string& where) {
  int divided = 0;
  for (auto& l : *net.mutable_layer()) {
    if (!may_train(l)) continue;
    // Every data layer's parameters keep the batch in a field named batch_size.
    const auto* refl = l.GetReflection();
    std::vector<const google::protobuf::FieldDescriptor*> fields;
    refl->ListFields(l, &fields);
    for (const auto* f : fields) {
      if (f->type() != google::protobuf::FieldDescriptor::TYPE_MESSAGE || f->is_repeated()) continue;
      google::protobuf::Message* m = refl->MutableMessage(&l, f);
      const auto* b = m->GetDescriptor()->FindFieldByName("batch_size");
      if (!b || b->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_UINT32) continue;
      const uint32_t batch = m->GetReflection()->GetUInt32(*m, b);
      if (batch % static_cast<uint32_t>(ranks) != 0 || batch == 0)
        input_error("{}: layer '{}': --global-batch: {}.batch_size {} does not divide over {} ranks", where, l.name(),
                    f->name(), batch, ranks);
      m->GetReflection()->SetUInt32(m, b, batch / static_cast<uint32_t>(ranks));
      ++divided;
    }
  }
  if (divided == 0)
    input_error("{}: --global-batch: the TRAIN phase has no data layer with a batch_size to divide over {} ranks",
                where, ranks);
}

}  // namespace bks
