// HDF5 datasets as Caffe's HDF5Data layer reads them: one dataset per top blob, first axis
// is the sample axis, values converted to float (unsigned bytes kept as bytes). Written by
// bakusoku serve when it packs a dataset.
//
// libhdf5 is loaded on first use: Debian's build pulls in curl, GnuTLS, Kerberos and more
// (about 5 MB of resident pages and start-up time) that runs on IDX data never need.
#include <dlfcn.h>
#include <hdf5.h>

#include <cstdio>

#include "core/error.h"
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

}  // namespace

std::shared_ptr<Dataset> read_hdf5(const std::string& path, const std::vector<std::string>& fields) {
  const Hdf5Api& h5 = hdf5();
  hid_t file = h5.fopen(path.c_str(), kReadOnly, H5P_DEFAULT);
  if (file < 0) input_error("{}: cannot open as HDF5", path);
  auto ds = std::make_shared<Dataset>();
  ds->source = path;
  ds->format = "hdf5";
  ds->size = -1;
  for (const auto& name : fields) {
    hid_t d = h5.dopen(file, name.c_str(), H5P_DEFAULT);
    if (d < 0) {
      h5.fclose(file);
      input_error("{}: no dataset '{}' in the HDF5 file", path, name);
    }
    hid_t space = h5.dget_space(d);
    int nd = h5.sndims(space);
    std::vector<hsize_t> dims(std::max(nd, 1));
    h5.sdims(space, dims.data(), nullptr);
    h5.sclose(space);
    if (nd < 1) {
      h5.dclose(d);
      h5.fclose(file);
      input_error("{}: dataset '{}' has no sample axis", path, name);
    }
    DatasetField f;
    f.name = name;
    // Unsigned bytes (images as bakusoku serve packs them) stay bytes in memory; every
    // other type is read as float.
    hid_t type = h5.dget_type(d);
    bool bytes = h5.tget_class(type) == H5T_INTEGER && h5.tget_size(type) == 1 && h5.tget_sign(type) == H5T_SGN_NONE;
    h5.tclose(type);
    f.dtype = bytes ? DType::u8 : DType::f32;
    for (int i = 1; i < nd; ++i) f.sample_shape.push_back(static_cast<int64_t>(dims[i]));
    int64_t n = static_cast<int64_t>(dims[0]);
    f.bytes.resize(static_cast<size_t>(n * f.sample_numel()) * dtype_size(f.dtype));
    herr_t st = h5.dread(d, bytes ? h5.native_uchar : h5.native_float, H5S_ALL, H5S_ALL, H5P_DEFAULT, f.bytes.data());
    h5.dclose(d);
    if (st < 0) {
      h5.fclose(file);
      input_error("{}: cannot read dataset '{}' as float", path, name);
    }
    if (ds->size >= 0 && n != ds->size)
      input_error("{}: dataset '{}' has {} samples but the others have {}", path, name, n, ds->size);
    ds->size = n;
    ds->fields.push_back(std::move(f));
  }
  h5.fclose(file);
  return ds;
}

void write_hdf5(const std::string& path, const std::vector<DatasetField>& fields, int64_t samples) {
  const Hdf5Api& h5 = hdf5();
  const std::string tmp = path + ".tmp";
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
