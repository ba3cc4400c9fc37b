// bakusoku convert_imageset / compute_image_mean: Caffe's tools of the same names, with the
// same arguments, for making the LMDB/LevelDB databases Data layers read.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "data/convert_imageset.h"

namespace bks::cli {

namespace {

struct ConvertArgs {
  std::string root, list, db, backend = "lmdb";
  ConvertImagesetOptions o;
};

}  // namespace

Runner add_convert_imageset(CLI::App& app) {
  auto* cmd = app.add_subcommand("convert_imageset",
                                 "Make an LMDB/LevelDB database of Datum records from a list of images, as Caffe's "
                                 "convert_imageset: ROOT/ LIST DB (LIST lines are 'PATH LABEL', PATH under ROOT)");
  auto a = std::make_shared<ConvertArgs>();
  cmd->add_option("root", a->root, "Folder the list's paths are relative to (its trailing / matters, as in Caffe)")
      ->required();
  cmd->add_option("list", a->list, "Text file: one 'PATH LABEL' per line")->required();
  cmd->add_option("db", a->db, "The database to create (must not exist)")->required();
  cmd->add_flag("--gray", a->o.gray, "Decode images as one grey channel (else colour, BGR as Caffe)");
  cmd->add_flag("--shuffle", a->o.shuffle, "Store the images in a random order (the same for the same --seed)");
  cmd->add_option("--seed", a->o.seed, "Seed of --shuffle")->default_val(0);
  cmd->add_option("--backend", a->backend, "lmdb or leveldb")->default_val("lmdb");
  cmd->add_option("--resize_height", a->o.resize_height, "Resize every image to this height (with --resize_width)")
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option("--resize_width", a->o.resize_width, "Resize every image to this width (with --resize_height)")
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_flag("--check_size", a->o.check_size, "Fail unless every image has the first one's size");
  cmd->add_flag("--encoded", a->o.encoded, "Store PNG/JPEG files (decoded while training) instead of pixels");
  cmd->add_option("--encode_type", a->o.encode_type, "With --encoded: png or jpg (default: each file's own format)");
  return [a] {
    if (a->backend == "lmdb")
      a->o.backend = DbBackend::lmdb;
    else if (a->backend == "leveldb")
      a->o.backend = DbBackend::leveldb;
    else
      input_error("convert_imageset: --backend {} is not lmdb or leveldb", a->backend);
    int64_t n = convert_imageset(a->root, a->list, a->db, a->o, [](int64_t done, int64_t total) {
      log::info("Processed {} of {} files.", done, total);
    });
    log::info("Wrote {} records to {} {}", n, db_backend_name(a->o.backend), a->db);
    return 0;
  };
}

Runner add_compute_image_mean(CLI::App& app) {
  auto* cmd = app.add_subcommand("compute_image_mean",
                                 "Write the per-pixel mean of an LMDB/LevelDB database as a .binaryproto "
                                 "(transform_param.mean_file), as Caffe's compute_image_mean");
  auto db = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  cmd->add_option("db", *db, "The database")->required();
  cmd->add_option("out", *out, "The mean file to write (.binaryproto)")->required();
  return [db, out] {
    std::vector<double> m = compute_image_mean(*db, *out);
    log::info("Wrote {}; mean per channel: {:.4f}", *out, fmt::join(m, " "));
    return 0;
  };
}

}  // namespace bks::cli
