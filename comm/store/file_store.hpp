// A store in one file shared by processes that see the same file system (c10d's FileStore, the
// file:// init method). The file is an append-only log of set/delete records; every operation
// takes an flock, replays what other processes appended since its last look, then appends.
// The last of `world_size` users to close it removes the file, so a path can be reused; a file
// a crashed job left behind is started afresh (Note [Stale store files]).
#pragma once

#include <mutex>
#include <unordered_map>

#include "comm/store/store.hpp"

namespace actorch::dist {

class file_store final : public store {
public:
  /// @pre world_size >= 1 (the number of processes that will open `path`), or -1 to never
  /// remove the file.
  file_store(std::string path, int world_size = -1, milliseconds timeout = default_timeout);
  ~file_store() override;

  void set(const std::string& key, const std::string& value) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  using store::wait;
  void wait(const std::vector<std::string>& keys, milliseconds timeout) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

  const std::string& path() const { return path_; }

protected:
  std::string get_now(const std::string& key) override;

private:
  class locked_file; // the open, flocked file for one operation
  void replay(locked_file& f);
  void append(locked_file& f, char op, const std::string& key, const std::string& value);
  int64_t add_locked(locked_file& f, const std::string& key, int64_t delta);

  std::string path_;
  int world_size_;
  std::string record_; // this user's record (Note [Stale store files] in file_store.cpp)
  std::mutex mu_;      // threads of this process; flock orders processes
  int64_t pos_ = 0;    // bytes of the log already replayed into data_
  std::unordered_map<std::string, std::string> data_;
};

} // namespace actorch::dist
