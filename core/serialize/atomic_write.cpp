// write_file_atomically (atomic_write.hpp) over serialize::atomic_file.
#include "core/serialize/atomic_write.hpp"

#include "core/serialize/file_io.hpp"

namespace actorch {

void write_file_atomically(const std::string& path, std::string_view bytes, const char* op) {
  const serialize::where w{op, path};
  serialize::atomic_file f(w);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

} // namespace actorch
