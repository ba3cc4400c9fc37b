// Dataset creation for the dashboard: IDX files (Fashion-MNIST), an image folder laid out
// as root/<label>/*.png|jpg (DIGITS' layout), or a UTF-8 text file (character-level models:
// text.txt and info.json, see pack_text in datasets.cc). Images are packed once into HDF5 files the Data layer
// reads (train.h5, val.h5: 'data' as bytes N x C x H x W, 'label' as float; mean.h5: the
// mean image as float), with info.json (classes, per-class counts, shape) and PNG thumbnails
// (thumbs/<class>_<k>.png, mean.png).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "server/store.h"

namespace bks::server {

// Checks a dataset request and returns the spec to store (paths made absolute). Throws
// ApiError naming the field. `roots`: the folders source files may come from.
json validate_dataset_spec(const json& body, const std::vector<std::string>& roots);

// Image files larger than this are refused before they are read.
constexpr uintmax_t kMaxImageFileBytes = uintmax_t{256} << 20;
// Text datasets: the largest file, and the most distinct characters (a network's classes).
constexpr uintmax_t kMaxTextFileBytes = uintmax_t{256} << 20;
constexpr size_t kMaxTextVocabulary = 4096;

// Packs the dataset `spec` into `dir`. Every file read (IDX labels beside their images, each
// class folder and image of a folder, through links) must lie inside `roots`; InputError
// naming it otherwise. Progress in [0, 1]; stops (throwing) when cancelled. The server runs
// this in a child process (bakusoku pack-dataset, see dataset_job.h), never in itself.
void pack_dataset(const json& spec, const std::string& dir, const std::vector<std::string>& roots,
                  const std::function<void(double)>& progress, const std::atomic<bool>& cancelled);

// The real path of `path`, a file the server reads for a user (weights to start from):
// InputError naming it when it is missing or leads outside the import folders `roots`.
std::filesystem::path import_file(const std::string& path, const std::vector<std::string>& roots, const char* what);

// Names of Fashion-MNIST's ten classes, in label order.
const std::vector<std::string>& fashion_mnist_classes();

}  // namespace bks::server
