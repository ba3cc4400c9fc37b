// Whole-file reads and atomic writes: temporary file, fsync, rename, so a crash never
// leaves a half-written file in place of a good one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace google::protobuf {
class Message;
}

namespace bks {

// The file's bytes; InputError "path: cannot open <what> (reason)" when it cannot be read.
std::string read_file(const std::string& path, const char* what);
// Reads a binary protobuf file (Caffe's .binaryproto / .caffemodel) into `msg`.
void read_binary_proto(const std::string& path, google::protobuf::Message& msg);
// Writes atomically: a temporary file of this process beside `path`, fsync, rename, fsync
// of the directory. A crash leaves `path` old or new, never partial.
void write_file_atomic(const std::string& path, const std::string& data);
// The same for a file made of pieces, written in order without joining them in memory.
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces);
// "<path>.tmp-<pid>-<n>": the temporary a writer of this process uses for `path` (for writers
// that cannot go through write_file_atomic, such as HDF5's own file creation), named so that
// remove_stale_temporaries recognises it.
std::string temporary_path(const std::string& path);
// Deletes the temporaries that writers killed mid-write left in `dir` (those of processes
// no longer alive); returns how many.
int remove_stale_temporaries(const std::string& dir);

// The first executable `name` in the directories of $PATH, or "" when there is none.
std::string find_on_path(const std::string& name);
// The path of this program, for running it again as a child (jobs, fine-tunes, MPI ranks):
// where it was started from, even when a rebuild has since replaced the file; "bakusoku"
// (found on $PATH) when the path cannot be read.
std::string self_executable();
// `word` as the shell reads it back as itself: as it is when plain, else single-quoted
// (for command lines printed to people and written into scripts).
std::string shell_word(const std::string& word);

// What a file holds, by its first bytes: IDX (raw or gzip), HDF5, text, ...
enum class FileKind { missing, idx, gzip, hdf5, text, directory, unknown };
FileKind detect_file_kind(const std::string& path);

}  // namespace bks
