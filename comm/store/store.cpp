// The parts of every store that do not depend on where the keys live.
#include "comm/store/store.hpp"

#include "base/error.hpp"

namespace actorch::dist {

store::~store() = default;

std::string store::get(const std::string& key) {
  wait({key}, timeout());
  return get_now(key);
}

void store::throw_timeout(const char* store_name, const std::vector<std::string>& keys,
                          milliseconds timeout,
                          const std::function<bool(const std::string&)>& present) {
  std::vector<std::string> missing;
  try {
    for (const auto& k : keys)
      if (present ? !present(k) : !check({k}))
        missing.push_back(k);
  } catch (const std::exception&) {
    missing.clear(); // the store does not answer at all (a silent master): name every key
  }
  ACTORCH_FAIL(store_name, ": timed out after ", timeout.count(), " ms waiting for keys ",
               join_keys(missing.empty() ? keys : missing));
}

std::string join_keys(const std::vector<std::string>& keys) {
  std::string out = "[";
  for (size_t i = 0; i < keys.size(); ++i)
    out += (i ? ", " : "") + keys[i];
  return out + "]";
}

} // namespace actorch::dist
