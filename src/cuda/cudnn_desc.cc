#include "cuda/cudnn_desc.h"

#include <climits>

#include "core/error.h"

namespace bks::cuda {

int cudnn_dim(int64_t v) {
  if (v < 0 || v > INT_MAX) input_error("dimension {} is beyond what cuDNN takes", v);
  return static_cast<int>(v);
}

void TensorDesc::set(int64_t n, int64_t c, int64_t h, int64_t w) {
  BKS_CUDNN_CALL(cudnnSetTensor4dDescriptor(d_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, cudnn_dim(n), cudnn_dim(c),
                                            cudnn_dim(h), cudnn_dim(w)));
}

void FilterDesc::set(int64_t k, int64_t c, int64_t h, int64_t w) {
  BKS_CUDNN_CALL(cudnnSetFilter4dDescriptor(d_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, cudnn_dim(k), cudnn_dim(c),
                                            cudnn_dim(h), cudnn_dim(w)));
}

}  // namespace bks::cuda
