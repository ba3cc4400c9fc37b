// One decoded copy of a dataset for all data-parallel ranks on a host. With sharing on, the
// first rank to open a source reads it and writes the samples into a file in /dev/shm (a
// memory-backed filesystem); every rank, that one included, then maps that file read-only,
// so the pages exist once however many ranks read them. Ranks take turns through a file
// lock, so the others wait for the copy instead of reading their own. Anything that stops
// sharing (no /dev/shm, too little room in it, encoded images) falls back to each rank
// reading the dataset itself, with a warning.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "data/dataset.h"

namespace bks {

// Turns sharing on for this process: `tag` names this job's files (the same on every rank
// of the job, different between jobs); `dir` is where they go. An empty tag turns it off.
void share_datasets_between_processes(const std::string& tag, const std::string& dir = "/dev/shm");
bool datasets_shared_between_processes();
// The dataset `key` names, from the shared copy when one exists, else loaded by `load` and
// shared (see above).
std::shared_ptr<const Dataset> open_shared_dataset(const std::string& key,
                                                   const std::function<std::shared_ptr<const Dataset>()>& load);
// Removes the files this process wrote, once every rank has mapped them: the mappings stay
// valid, and the memory goes back when the last rank exits. Returns how many were removed.
int remove_shared_dataset_files();

}  // namespace bks
