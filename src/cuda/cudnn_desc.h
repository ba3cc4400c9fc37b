// Owning wrappers of cuDNN's descriptors, so a kernel that throws midway leaks none.
#pragma once

#include <cudnn.h>

#include <cstdint>

#include "core/tensor.h"
#include "cuda/cuda_check.h"

namespace bks::cuda {

// A cuDNN descriptor of type T, made by Create and freed by Destroy.
template <class T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Descriptor {
 public:
  Descriptor() { BKS_CUDNN_CALL(Create(&d_)); }
  ~Descriptor() { Destroy(d_); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  operator T() const { return d_; }

 protected:
  T d_ = nullptr;
};

class TensorDesc
    : public Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor> {
 public:
  // A packed NCHW float tensor; dimensions past the int range are an input error.
  void set(int64_t n, int64_t c, int64_t h, int64_t w);
  // The same for a 4-d shape.
  void set(const Shape& s) { set(s.at(0), s.at(1), s.at(2), s.at(3)); }
};

class FilterDesc
    : public Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor> {
 public:
  void set(int64_t k, int64_t c, int64_t h, int64_t w);
};

using ConvDesc =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using PoolDesc = Descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;
using ActivationDesc =
    Descriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor>;

// A dimension as cuDNN's int; InputError when it does not fit.
int cudnn_dim(int64_t v);

}  // namespace bks::cuda
