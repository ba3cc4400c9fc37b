#include "core/tensor.h"

#include <array>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "core/device_memory.h"
#include "core/sysinfo.h"

namespace bks {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::f32:
    case DType::s32: return 4;
    case DType::bf16:
    case DType::f16: return 2;
    case DType::u8:
    case DType::s8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::u8: return "U8";
    case DType::s8: return "I8";
    case DType::s32: return "I32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
  }
  return "?";
}

std::string Device::str() const { return kind == DeviceKind::cpu ? "cpu" : fmt::format("cuda:{}", index); }

bool checked_product(const std::vector<int64_t>& dims, int64_t limit, int64_t& product) {
  product = 1;
  for (int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(product, d, &product) || product > limit) return false;
  return true;
}

std::string shape_problem(const Shape& s, size_t elem_bytes) {
  const int64_t limit = kMaxTensorBytes / static_cast<int64_t>(std::max<size_t>(elem_bytes, 1));
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) return fmt::format("shape {} has a negative dimension", shape_str(s));
    // Zero dimensions count as 1 here: the other dimensions' products must not overflow either.
    if (__builtin_mul_overflow(n, std::max<int64_t>(d, 1), &n) || n > limit)
      return fmt::format("shape {} is too large (over {} GiB of {}-byte elements)", shape_str(s), kMaxTensorBytes >> 30,
                         elem_bytes);
  }
  return {};
}

void check_shape(const Shape& s, size_t elem_bytes, const std::string& what) {
  std::string problem = shape_problem(s, elem_bytes);
  if (!problem.empty()) throw InputError(what + ": " + problem);
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

int64_t shape_count(const Shape& s, int begin, int end) {
  int64_t n = 1;
  for (int i = begin; i < end; ++i) n *= s.at(i);
  return n;
}

std::string shape_str(const Shape& s) { return fmt::format("({})", fmt::join(s, ",")); }

int canonical_axis(int64_t axis, int ndim, const char* what) {
  int64_t a = axis < 0 ? axis + ndim : axis;
  if (a < 0 || a >= ndim) input_error("{} {} is out of range for a {}-d blob", what, axis, ndim);
  return static_cast<int>(a);
}

namespace {
std::array<const DeviceMemoryOps*, 2> g_device_ops{};
}  // namespace

void set_device_memory_ops(DeviceKind k, const DeviceMemoryOps* ops) { g_device_ops[static_cast<size_t>(k)] = ops; }

const DeviceMemoryOps& device_memory_ops(Device d) {
  const DeviceMemoryOps* ops = g_device_ops[static_cast<size_t>(d.kind)];
  if (!ops) runtime_error("a tensor on {} needs the CUDA backend, which this build of bakusoku does not have", d.str());
  return *ops;
}

Tensor to_device(const Tensor& t, Device d) {
  Tensor r(t.shape(), t.dtype(), d);
  r.copy_from(t);
  return r;
}

Storage::Storage(size_t bytes, Device dev) : bytes_(bytes), dev_(dev) {
  if (dev.kind != DeviceKind::cpu) {
    ptr_ = device_memory_ops(dev).allocate(std::max<size_t>(bytes, 1), dev.index);
    return;
  }
  // Zero-filling more than the machine holds would end in the kernel's OOM killer, silently.
  static const double physical = physical_memory_bytes();
  if (physical > 0 && static_cast<double>(bytes) > physical)
    runtime_error("cannot allocate {:.1f} GB: this machine has {:.1f} GB of memory (a smaller batch_size needs less)",
                  bytes / 1e9, physical / 1e9);
  size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  ptr_ = std::aligned_alloc(64, rounded);
  if (!ptr_) throw std::bad_alloc();
  std::memset(ptr_, 0, rounded);
}

Storage::~Storage() {
  if (dev_.kind == DeviceKind::cpu)
    std::free(ptr_);
  else
    device_memory_ops(dev_).release(ptr_, std::max<size_t>(bytes_, 1), dev_.index);
}

Tensor::Tensor(Shape shape, DType dtype, Device dev) : shape_(std::move(shape)), dtype_(dtype) {
  check_shape(shape_, dtype_size(dtype_), "tensor");
  storage_ = std::make_shared<Storage>(bytes(), dev);
}

void Tensor::reshape(const Shape& shape, size_t phys_bytes, std::optional<DType> dtype) {
  Device dev = device();
  check_shape(shape, dtype_size(dtype ? *dtype : dtype_), "tensor");
  shape_ = shape;
  if (dtype) dtype_ = *dtype;
  phys_bytes_ = phys_bytes > bytes() ? phys_bytes : 0;
  if (!storage_ || offset_ + this->phys_bytes() > storage_->bytes()) {
    storage_ = std::make_shared<Storage>(this->phys_bytes(), dev);
    offset_ = 0;
  }
}

Tensor Tensor::view(const Shape& shape) const {
  BKS_CHECK(shape_numel(shape) == numel(), "view {} of {}", shape_str(shape), shape_str(shape_));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

void Tensor::bind(std::shared_ptr<Storage> storage, size_t offset, const Shape& shape, size_t phys_bytes, DType dtype) {
  shape_ = shape;
  dtype_ = dtype;
  phys_bytes_ = phys_bytes > bytes() ? phys_bytes : 0;
  BKS_CHECK(offset + this->phys_bytes() <= storage->bytes(), "bind past the end of a {}-byte buffer", storage->bytes());
  storage_ = std::move(storage);
  offset_ = offset;
}

void Tensor::alias_of(const Tensor& other, const Shape& shape, size_t byte_offset) {
  BKS_CHECK(byte_offset + shape_numel(shape) * dtype_size(other.dtype_) <= other.bytes(), "alias {} at byte {} of {}",
            shape_str(shape), byte_offset, shape_str(other.shape_));
  storage_ = other.storage_;
  offset_ = other.offset_ + byte_offset;
  dtype_ = other.dtype_;
  shape_ = shape;
  phys_bytes_ = shape_numel(shape) == other.numel() ? other.phys_bytes_ : 0;
}

void Tensor::zero() {
  if (!storage_) return;
  if (device().kind == DeviceKind::cpu)
    std::memset(raw(), 0, phys_bytes());
  else
    device_memory_ops(device()).zero(raw(), phys_bytes(), device());
}

void Tensor::fill(float v) {
  BKS_CHECK(dtype_ == DType::f32, "fill on {}", dtype_name(dtype_));
  BKS_CHECK(device().kind == DeviceKind::cpu, "fill on {}", device().str());
  std::fill_n(f32(), numel(), v);
}

void Tensor::copy_from(const Tensor& src) {
  BKS_CHECK(src.numel() == numel() && src.dtype() == dtype_, "copy {} {} into {} {}", shape_str(src.shape()),
            dtype_name(src.dtype()), shape_str(shape_), dtype_name(dtype_));
  if (raw() == src.raw()) return;
  size_t n = std::min(phys_bytes(), src.phys_bytes());
  if (device().kind == DeviceKind::cpu && src.device().kind == DeviceKind::cpu)
    std::memcpy(raw(), src.raw(), n);
  else
    device_memory_ops(device().kind == DeviceKind::cpu ? src.device() : device())
        .copy(raw(), device(), src.raw(), src.device(), n);
}

Tensor Tensor::clone() const {
  Tensor t(shape_, dtype_, device());
  t.copy_from(*this);
  return t;
}

}  // namespace bks
