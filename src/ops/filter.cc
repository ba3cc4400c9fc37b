// Filter (Caffe's selector layer) is refused: its tops hold as many items as the selector
// marks non-zero in each batch, so their shapes change from step to step. bakusoku infers
// every blob's shape once when a net is built and plans memory and kernels for those shapes
// (runtime/plan.h), so no op can produce a data-dependent shape. Caffe's own first Reshape
// sizes the tops to the whole batch, which would be wrong for every later batch.
#include "ops/op_def.h"

namespace bks {

BKS_REFUSE_LAYER_TYPE("Filter",
                      "its tops' batch size is the number of selected items, which changes with the data, and "
                      "bakusoku fixes every blob's shape when the net is built; to leave items out of a loss, "
                      "give them the loss's loss_param.ignore_label instead");

}  // namespace bks
