// HDF5 datasets as Caffe's HDF5Data layer reads them: one dataset per top blob, first axis
// is the sample axis, values converted to float.
#include <hdf5.h>

#include "core/error.h"
#include "data/dataset.h"

namespace bks {

std::shared_ptr<Dataset> read_hdf5(const std::string& path, const std::vector<std::string>& fields) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are reported by us, not printed by HDF5
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) input_error("{}: cannot open as HDF5", path);
  auto ds = std::make_shared<Dataset>();
  ds->source = path;
  ds->format = "hdf5";
  ds->size = -1;
  for (const auto& name : fields) {
    hid_t d = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
    if (d < 0) {
      H5Fclose(file);
      input_error("{}: no dataset '{}' in the HDF5 file", path, name);
    }
    hid_t space = H5Dget_space(d);
    int nd = H5Sget_simple_extent_ndims(space);
    std::vector<hsize_t> dims(std::max(nd, 1));
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    H5Sclose(space);
    if (nd < 1) {
      H5Dclose(d);
      H5Fclose(file);
      input_error("{}: dataset '{}' has no sample axis", path, name);
    }
    DatasetField f;
    f.name = name;
    f.dtype = DType::f32;
    for (int i = 1; i < nd; ++i) f.sample_shape.push_back(static_cast<int64_t>(dims[i]));
    int64_t n = static_cast<int64_t>(dims[0]);
    f.bytes.resize(static_cast<size_t>(n * f.sample_numel()) * sizeof(float));
    herr_t st = H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, f.bytes.data());
    H5Dclose(d);
    if (st < 0) {
      H5Fclose(file);
      input_error("{}: cannot read dataset '{}' as float", path, name);
    }
    if (ds->size >= 0 && n != ds->size)
      input_error("{}: dataset '{}' has {} samples but the others have {}", path, name, n, ds->size);
    ds->size = n;
    ds->fields.push_back(std::move(f));
  }
  H5Fclose(file);
  return ds;
}

}  // namespace bks
