// HDF5 datasets as Caffe's HDF5Data layer reads them: one dataset per top blob, first axis
// is the sample axis, values converted to float (unsigned bytes kept as bytes). Written by
// bakusoku serve when it packs a dataset.
//
// libhdf5 is loaded on first use: Debian's build pulls in curl, GnuTLS, Kerberos and more
// (about 5 MB of resident pages and start-up time) that runs on IDX data never need.
#include <dlfcn.h>
#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <new>

#include "core/error.h"
#include "core/file_io.h"
#include "core/isolated_call.h"
#include "data/dataset.h"

namespace bks {
namespace {

struct Hdf5Api {
  decltype(&H5open) open;
  decltype(&H5Eset_auto2) eset_auto;
  decltype(&H5Fopen) fopen;
  decltype(&H5Fclose) fclose;
  decltype(&H5Dopen2) dopen;
  decltype(&H5Dclose) dclose;
  decltype(&H5Dget_space) dget_space;
  decltype(&H5Dread) dread;
  decltype(&H5Sget_simple_extent_ndims) sndims;
  decltype(&H5Sget_simple_extent_dims) sdims;
  decltype(&H5Sclose) sclose;
  decltype(&H5Dget_type) dget_type;
  decltype(&H5Tget_class) tget_class;
  decltype(&H5Tget_size) tget_size;
  decltype(&H5Tget_sign) tget_sign;
  decltype(&H5Tclose) tclose;
  decltype(&H5Fcreate) fcreate;
  decltype(&H5Screate_simple) screate_simple;
  decltype(&H5Dcreate2) dcreate;
  decltype(&H5Dwrite) dwrite;
  decltype(&H5Dget_storage_size) dget_storage_size;
  decltype(&H5Dget_create_plist) dget_create_plist;
  decltype(&H5Pget_nfilters) pget_nfilters;
  decltype(&H5Pclose) pclose;
  hid_t native_float, native_uchar;
};

// The macros H5F_ACC_RDONLY and H5T_NATIVE_FLOAT call into the library; their values are
// taken from it here instead.
constexpr unsigned kReadOnly = 0x0000u, kTruncate = 0x0002u;

const Hdf5Api& hdf5() {
  static const Hdf5Api api = [] {
    void* lib = dlopen(BKS_HDF5_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!lib) input_error("reading HDF5 needs {} ({})", BKS_HDF5_LIBRARY, dlerror());
    auto sym = [&](const char* name) {
      void* p = dlsym(lib, name);
      if (!p) input_error("{}: missing symbol {}", BKS_HDF5_LIBRARY, name);
      return p;
    };
    Hdf5Api a;
    a.open = reinterpret_cast<decltype(a.open)>(sym("H5open"));
    a.eset_auto = reinterpret_cast<decltype(a.eset_auto)>(sym("H5Eset_auto2"));
    a.fopen = reinterpret_cast<decltype(a.fopen)>(sym("H5Fopen"));
    a.fclose = reinterpret_cast<decltype(a.fclose)>(sym("H5Fclose"));
    a.dopen = reinterpret_cast<decltype(a.dopen)>(sym("H5Dopen2"));
    a.dclose = reinterpret_cast<decltype(a.dclose)>(sym("H5Dclose"));
    a.dget_space = reinterpret_cast<decltype(a.dget_space)>(sym("H5Dget_space"));
    a.dread = reinterpret_cast<decltype(a.dread)>(sym("H5Dread"));
    a.sndims = reinterpret_cast<decltype(a.sndims)>(sym("H5Sget_simple_extent_ndims"));
    a.sdims = reinterpret_cast<decltype(a.sdims)>(sym("H5Sget_simple_extent_dims"));
    a.sclose = reinterpret_cast<decltype(a.sclose)>(sym("H5Sclose"));
    a.dget_type = reinterpret_cast<decltype(a.dget_type)>(sym("H5Dget_type"));
    a.tget_class = reinterpret_cast<decltype(a.tget_class)>(sym("H5Tget_class"));
    a.tget_size = reinterpret_cast<decltype(a.tget_size)>(sym("H5Tget_size"));
    a.tget_sign = reinterpret_cast<decltype(a.tget_sign)>(sym("H5Tget_sign"));
    a.tclose = reinterpret_cast<decltype(a.tclose)>(sym("H5Tclose"));
    a.fcreate = reinterpret_cast<decltype(a.fcreate)>(sym("H5Fcreate"));
    a.screate_simple = reinterpret_cast<decltype(a.screate_simple)>(sym("H5Screate_simple"));
    a.dcreate = reinterpret_cast<decltype(a.dcreate)>(sym("H5Dcreate2"));
    a.dwrite = reinterpret_cast<decltype(a.dwrite)>(sym("H5Dwrite"));
    a.dget_storage_size = reinterpret_cast<decltype(a.dget_storage_size)>(sym("H5Dget_storage_size"));
    a.dget_create_plist = reinterpret_cast<decltype(a.dget_create_plist)>(sym("H5Dget_create_plist"));
    a.pget_nfilters = reinterpret_cast<decltype(a.pget_nfilters)>(sym("H5Pget_nfilters"));
    a.pclose = reinterpret_cast<decltype(a.pclose)>(sym("H5Pclose"));
    a.open();
    // A program that links HDF5 itself holds the live copy of these variables (a copy
    // relocation), so the global scope is searched before the library's own symbol.
    auto type = [&](const char* name) {
      void* p = dlsym(RTLD_DEFAULT, name);
      return *static_cast<hid_t*>(p ? p : sym(name));
    };
    a.native_float = type("H5T_NATIVE_FLOAT_g");
    a.native_uchar = type("H5T_NATIVE_UCHAR_g");
    a.eset_auto(H5E_DEFAULT, nullptr, nullptr);  // errors are reported by us, not printed by HDF5
    return a;
  }();
  return api;
}

// An HDF5 identifier, closed when it goes out of scope (also when a check throws).
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

const char* type_class_name(H5T_class_t c) {
  switch (c) {
    case H5T_STRING: return "strings";
    case H5T_COMPOUND: return "compound records";
    case H5T_ENUM: return "enumerations";
    case H5T_ARRAY: return "arrays";
    case H5T_VLEN: return "variable-length values";
    case H5T_REFERENCE: return "references";
    case H5T_OPAQUE: return "opaque bytes";
    default: return "values of an unsupported type";
  }
}

// Stored bytes `stored` may decode to at most this many bytes through HDF5's filters.
int64_t filtered_limit(hsize_t stored) {
  int64_t bound = 0;
  if (stored > static_cast<hsize_t>(INT64_MAX) ||
      __builtin_mul_overflow(static_cast<int64_t>(stored), kMaxDecompressionRatio, &bound))
    bound = INT64_MAX;
  return std::min(bound, kMaxCompressedHdf5FieldBytes);
}

// One HDF5 dataset as a field. Every size is checked against what the file really stores
// before anything is allocated: the storage size HDF5 reports comes from the file's own
// metadata, so it counts for no more than the file's size (`file_size`). `samples`: the
// sample count of the fields read before (-1: none yet); set to this one's.
DatasetField read_field(const Hdf5Api& h5, hid_t file, const std::string& path, const std::string& name,
                        int64_t file_size, int64_t& samples) {
  Handle d(h5.dopen(file, name.c_str(), H5P_DEFAULT), h5.dclose);
  if (!d.ok()) input_error("{}: no dataset '{}' in the HDF5 file", path, name);
  Handle space(h5.dget_space(d.get()), h5.sclose);
  const int nd = space.ok() ? h5.sndims(space.get()) : -1;
  if (nd < 0) input_error("{}: dataset '{}': cannot read its dimensions (corrupt HDF5 file)", path, name);
  if (nd < 1) input_error("{}: dataset '{}' has no sample axis", path, name);
  std::vector<hsize_t> dims(static_cast<size_t>(nd));
  if (h5.sdims(space.get(), dims.data(), nullptr) < 0)
    input_error("{}: dataset '{}': cannot read its dimensions (corrupt HDF5 file)", path, name);
  Shape shape;
  for (int i = 0; i < nd; ++i) {
    if (dims[i] > static_cast<hsize_t>(kMaxTensorBytes))
      input_error("{}: dataset '{}': dimension {} is {}, too large", path, name, i, dims[i]);
    shape.push_back(static_cast<int64_t>(dims[i]));
  }
  if (shape[0] == 0) input_error("{}: dataset '{}' has no samples", path, name);
  for (int i = 1; i < nd; ++i)
    if (shape[i] == 0) input_error("{}: dataset '{}': dimension {} is 0", path, name, i);
  if (samples >= 0 && shape[0] != samples)
    input_error("{}: dataset '{}' has {} samples but the others have {}", path, name, shape[0], samples);
  samples = shape[0];

  Handle type(h5.dget_type(d.get()), h5.tclose);
  const H5T_class_t cls = type.ok() ? h5.tget_class(type.get()) : H5T_NO_CLASS;
  if (cls != H5T_INTEGER && cls != H5T_FLOAT)
    input_error("{}: dataset '{}' holds {}, not numbers", path, name, type_class_name(cls));
  const size_t file_elem = h5.tget_size(type.get());
  if (file_elem == 0) input_error("{}: dataset '{}': cannot read its element type (corrupt HDF5 file)", path, name);
  // Unsigned bytes (images as bakusoku serve packs them) stay bytes in memory; every
  // other type is read as float.
  const bool bytes = cls == H5T_INTEGER && file_elem == 1 && h5.tget_sign(type.get()) == H5T_SGN_NONE;
  DatasetField f;
  f.name = name;
  f.dtype = bytes ? DType::u8 : DType::f32;
  f.sample_shape.assign(shape.begin() + 1, shape.end());
  const size_t mem_elem = dtype_size(f.dtype);

  int64_t count = 0;
  if (!checked_product(shape, kMaxTensorBytes / static_cast<int64_t>(std::max(file_elem, mem_elem)), count))
    input_error("{}: dataset '{}': dimensions {} declare more than {} GiB", path, name, shape_str(shape),
                kMaxTensorBytes >> 30);
  const int64_t file_bytes = count * static_cast<int64_t>(file_elem);
  const int64_t mem_bytes = count * static_cast<int64_t>(mem_elem);
  const hsize_t stored = std::min<hsize_t>(h5.dget_storage_size(d.get()), static_cast<hsize_t>(file_size));
  Handle plist(h5.dget_create_plist(d.get()), h5.pclose);
  const bool filtered = plist.ok() && h5.pget_nfilters(plist.get()) > 0;
  if (filtered) {
    if (std::max(file_bytes, mem_bytes) > filtered_limit(stored))
      input_error(
          "{}: dataset '{}': dimensions {} declare {} bytes but the file stores {} compressed bytes (compressed "
          "fields may decode to at most {}x their stored size and {} GiB)",
          path, name, shape_str(shape), file_bytes, stored, kMaxDecompressionRatio, kMaxCompressedHdf5FieldBytes >> 30);
  } else if (static_cast<hsize_t>(file_bytes) > stored) {
    input_error("{}: dataset '{}': dimensions {} declare {} bytes but the file stores only {}", path, name,
                shape_str(shape), file_bytes, stored);
  }
  // The field, and as much again for libhdf5's conversion and decompression buffers.
  allow_child_memory(static_cast<uint64_t>(mem_bytes) + static_cast<uint64_t>(file_bytes));
  try {
    f.bytes.resize(static_cast<size_t>(mem_bytes));
  } catch (const std::bad_alloc&) {
    input_error("{}: dataset '{}': not enough memory for its {} bytes", path, name, mem_bytes);
  }
  if (h5.dread(d.get(), bytes ? h5.native_uchar : h5.native_float, H5S_ALL, H5S_ALL, H5P_DEFAULT, f.bytes.data()) < 0)
    input_error("{}: cannot read dataset '{}' as {} (corrupt HDF5 file, or a filter this HDF5 lacks)", path, name,
                bytes ? "bytes" : "float");
  return f;
}

// A field crosses from the reading process as: dtype (u8), rank (u32), the sample shape
// (int64 each), the byte count (u64), the bytes.
void send_field(ChildWriter& out, const DatasetField& f) {
  out.value(static_cast<uint8_t>(f.dtype));
  out.value(static_cast<uint32_t>(f.sample_shape.size()));
  for (int64_t d : f.sample_shape) out.value(d);
  out.value(static_cast<uint64_t>(f.bytes.size()));
  out.write(f.bytes.data(), f.bytes.size());
}

DatasetField receive_field(ChildReader& in, const std::string& path, const std::string& name, int64_t samples) {
  DatasetField f;
  f.name = name;
  const auto dtype = in.value<uint8_t>();
  if (dtype != static_cast<uint8_t>(DType::u8) && dtype != static_cast<uint8_t>(DType::f32))
    input_error("{}: dataset '{}': the reading process returned an unknown type", path, name);
  f.dtype = static_cast<DType>(dtype);
  const auto rank = in.value<uint32_t>();
  if (rank >= H5S_MAX_RANK) input_error("{}: dataset '{}' has {} dimensions", path, name, rank + 1);
  for (uint32_t i = 0; i < rank; ++i) f.sample_shape.push_back(in.value<int64_t>());
  Shape full{samples};
  full.insert(full.end(), f.sample_shape.begin(), f.sample_shape.end());
  int64_t count = 0;
  const auto bytes = in.value<uint64_t>();
  if (!checked_product(full, kMaxTensorBytes / static_cast<int64_t>(dtype_size(f.dtype)), count) ||
      static_cast<uint64_t>(count) * dtype_size(f.dtype) != bytes || bytes > in.left())
    input_error("{}: dataset '{}': the reading process returned an inconsistent result", path, name);
  const uint8_t* p = in.bytes(bytes);
  try {
    f.bytes.assign(p, p + bytes);
  } catch (const std::bad_alloc&) {
    input_error("{}: dataset '{}': not enough memory for its {} bytes", path, name, bytes);
  }
  return f;
}

}  // namespace

// libhdf5 parses the file in a child process: it is not hardened against crafted files
// (fuzzing found null dereferences and negative memcpy sizes in its metadata code), and a
// crash there must not take the trainer or the server with it.
std::shared_ptr<Dataset> read_hdf5(const std::string& path, const std::vector<std::string>& fields) {
  const Hdf5Api& h5 = hdf5();  // loaded before the fork
  std::error_code ec;
  const auto file_size = std::filesystem::file_size(path, ec);
  if (ec) input_error("{}: cannot open as HDF5 ({})", path, ec.message());
  int64_t samples = -1;
  ChildOutput result = run_isolated(path, "libhdf5", [&](ChildWriter& out) {
    Handle file(h5.fopen(path.c_str(), kReadOnly, H5P_DEFAULT), h5.fclose);
    if (!file.ok()) input_error("{}: cannot open as HDF5", path);
    for (const auto& name : fields) {
      DatasetField f = read_field(h5, file.get(), path, name, static_cast<int64_t>(file_size), samples);
      if (&name == &fields.front()) out.value(samples);
      send_field(out, f);
    }
  });
  ChildReader in(result, path);
  auto ds = std::make_shared<Dataset>();
  ds->source = path;
  ds->format = "hdf5";
  ds->size = fields.empty() ? -1 : in.value<int64_t>();
  if (!fields.empty() && ds->size <= 0) input_error("{}: the reading process returned no samples", path);
  for (const auto& name : fields) ds->fields.push_back(receive_field(in, path, name, ds->size));
  return ds;
}

void write_hdf5(const std::string& path, const std::vector<DatasetField>& fields, int64_t samples) {
  const Hdf5Api& h5 = hdf5();
  // A temporary a later start removes after a kill, renamed into place when complete.
  const std::string tmp = temporary_path(path);
  hid_t file = h5.fcreate(tmp.c_str(), kTruncate, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) runtime_error("{}: cannot create an HDF5 file", tmp);
  for (const auto& f : fields) {
    std::vector<hsize_t> dims{static_cast<hsize_t>(samples)};
    for (int64_t d : f.sample_shape) dims.push_back(static_cast<hsize_t>(d));
    BKS_CHECK(f.bytes.size() == static_cast<size_t>(samples * f.sample_numel()) * dtype_size(f.dtype),
              "field {} holds {} bytes", f.name, f.bytes.size());
    hid_t space = h5.screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    hid_t type = f.dtype == DType::u8 ? h5.native_uchar : h5.native_float;
    hid_t d = h5.dcreate(file, f.name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t st = d < 0 ? -1 : h5.dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, f.bytes.data());
    if (d >= 0) h5.dclose(d);
    h5.sclose(space);
    if (st < 0) {
      h5.fclose(file);
      runtime_error("{}: cannot write dataset '{}'", tmp, f.name);
    }
  }
  if (h5.fclose(file) < 0) runtime_error("{}: cannot finish the HDF5 file", tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) runtime_error("{}: cannot rename to {}", tmp, path);
}

}  // namespace bks
