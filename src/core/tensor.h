// Tensor: a typed, shaped view of a device buffer.
//
// A tensor knows its dtype and device. Storage is shared between tensors that alias (in-place
// ops, reshape views). Buffers are 64-byte aligned so vendor kernels can use aligned loads.
// reshape() keeps the buffer when it is large enough, so steady-state steps do not allocate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace bks {

enum class DType : uint8_t { f32, f64, u8, s8, s32, bf16, f16 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);

enum class DeviceKind : uint8_t { cpu, cuda };
struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  bool operator==(const Device&) const = default;
  std::string str() const;
};

using Shape = std::vector<int64_t>;
// The largest tensor bakusoku allocates: 64 GiB. A shape beyond it is an input error (a
// crafted file or a typo), found before anything is allocated.
constexpr int64_t kMaxTensorBytes = int64_t{1} << 36;
// Why `s` is not a shape a tensor of `elem_bytes`-byte elements may have (a negative
// dimension, or more than kMaxTensorBytes even counting 0 dimensions as 1, so that no
// product of its dimensions can overflow); empty when it is one.
std::string shape_problem(const Shape& s, size_t elem_bytes);
// InputError "<what>: <problem>" when shape_problem finds one.
void check_shape(const Shape& s, size_t elem_bytes, const std::string& what);
// The product of `dims`; false when a factor is negative or it exceeds `limit`.
bool checked_product(const std::vector<int64_t>& dims, int64_t limit, int64_t& product);
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);
// Product of dims [begin, end).
int64_t shape_count(const Shape& s, int begin, int end);
// Caffe's axis convention: negative counts from the end. Throws InputError when out of range.
int canonical_axis(int64_t axis, int ndim, const char* what);

class Storage {
 public:
  Storage(size_t bytes, Device dev);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() { return ptr_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return dev_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  Device dev_;
};

class Tensor {
 public:
  Tensor() = default;
  // Allocates a zero-filled tensor.
  explicit Tensor(Shape shape, DType dtype = DType::f32, Device dev = {});

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(i < 0 ? i + ndim() : i); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device{}; }

  void* raw() { return storage_ ? static_cast<char*>(storage_->data()) + offset_ : nullptr; }
  const void* raw() const { return storage_ ? static_cast<const char*>(storage_->data()) + offset_ : nullptr; }
  template <class T>
  T* data() {
    return static_cast<T*>(raw());
  }
  template <class T>
  const T* data() const {
    return static_cast<const T*>(raw());
  }
  float* f32() { return data<float>(); }
  const float* f32() const { return data<float>(); }

  // Changes the shape; reallocates only when the buffer is too small (contents then zeroed).
  // `phys_bytes` > bytes() reserves room for a padded (blocked) layout of the same shape.
  // `dtype`, when given, changes the element type (int8 values between quantized ops).
  void reshape(const Shape& shape, size_t phys_bytes = 0, std::optional<DType> dtype = {});
  // Elements the buffer holds in its layout: numel() when plain, more when a blocked layout
  // pads channels. Elementwise kernels that accept any layout loop over this.
  int64_t phys_numel() const { return phys_bytes_ ? static_cast<int64_t>(phys_bytes_ / dtype_size(dtype_)) : numel(); }
  size_t phys_bytes() const { return phys_bytes_ ? phys_bytes_ : bytes(); }
  // Same buffer, new shape of equal element count.
  Tensor view(const Shape& shape) const;
  // Views `bytes` of `storage` from `offset` (memory planned into a shared arena).
  void bind(std::shared_ptr<Storage> storage, size_t offset, const Shape& shape, size_t phys_bytes = 0,
            DType dtype = DType::f32);
  // Shares this tensor's buffer (in-place ops) with its own shape (and other's layout size),
  // from `byte_offset` on (a run of it, for a Concat written in place).
  void alias_of(const Tensor& other, const Shape& shape, size_t byte_offset = 0);
  bool shares_storage(const Tensor& o) const { return storage_ && storage_ == o.storage_; }
  bool uses_storage(const Storage* s) const { return storage_.get() == s; }

  void zero();
  void fill(float v);
  void copy_from(const Tensor& src);  // same numel and dtype
  Tensor clone() const;

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
  size_t phys_bytes_ = 0;  // 0: plain layout, bytes() of data
};

}  // namespace bks
