// Writing a whole file atomically: the bytes go to a temporary file next to `path`, which is
// fsync'ed and renamed over `path` only once complete (serialize::atomic_file), so a reader
// or a crash never sees half a file. For text outputs (metrics, plots' scripts, traces);
// checkpoints go through save_checkpoint / save_safetensors, which do the same.
#pragma once

#include <string>
#include <string_view>

namespace actorch {

/// @throws actorch::error naming `op` and the file when writing or renaming fails.
void write_file_atomically(const std::string& path, std::string_view bytes,
                           const char* op = "write_file_atomically");

} // namespace actorch
