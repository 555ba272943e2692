// The wire between a dataset worker and its child process (Note [Worker processes] in
// worker_process.cpp): length-prefixed frames over the socket, a spawned child's first frame
// (worker_process::spawn_frame, defined in worker_wire.cpp), the task frame, and a reply's
// structure, whose tensors lie in the shared batch file (shared_batch_file.hpp) and travel as
// offsets into it.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "actors/loader/worker_process.hpp"
#include "actors/messages.hpp"
#include "base/error.hpp"

namespace actorch::actors {

class shared_file;

namespace wire {

class writer {
public:
  template <class T> void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    out.append(s);
  }
  std::string out;
};

class reader {
public:
  explicit reader(std::string_view in) : in_(in) {}
  template <class T> T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    ACTORCH_CHECK(pos_ + sizeof(T) <= in_.size(), "worker process: a truncated frame");
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string get_string() {
    const uint64_t n = get<uint64_t>();
    ACTORCH_CHECK(n <= in_.size() - pos_, "worker process: a truncated frame");
    std::string s(in_.substr(pos_, size_t(n)));
    pos_ += size_t(n);
    return s;
  }
  /// A count of items that take at least one byte each in the frame and `item_bytes` each once
  /// decoded, checked before a vector of them is made (Note [Worker processes]).
  size_t get_count(size_t item_bytes) {
    const uint64_t n = get<uint64_t>();
    const size_t left = in_.size() - pos_;
    ACTORCH_CHECK(n <= left, "worker process: a frame announces ", n, " items with ", left,
                  " bytes left");
    ACTORCH_CHECK(n <= decoded_left_ / item_bytes, "worker process: a frame whose structure ",
                  "takes more than ", worker_process::max_frame_bytes, " bytes once decoded");
    decoded_left_ -= n * item_bytes;
    return size_t(n);
  }
  bool done() const { return pos_ == in_.size(); }

private:
  std::string_view in_;
  size_t pos_ = 0;
  uint64_t decoded_left_ = worker_process::max_frame_bytes;
};

/// Sends the frame: its length, then the body; false if the peer is gone.
bool send_frame(int fd, const std::string& body);

std::string encode_task(const index_batch& t, const std::vector<uint64_t>& released);
/// A task, and the leases the parent releases with it (Note [Lent batches]).
index_batch decode_task(std::string_view frame, std::vector<uint64_t>& released);

/// The child's reply for `b`, its tensors put in `shm`. `lease`: the number the parent
/// releases the batch's lent tensors by; `lent` set when any is (Note [Lent batches]).
std::string encode_reply(const loaded_batch& b, shared_file& shm, uint64_t lease, bool& lent);

/// A custom value's codec failed on a reply that parsed (none registered under its name, or it
/// threw): the batch's error, not a child out of step (Note [Custom values across processes]).
struct codec_failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A sample of a reply, its tensors read from the parent's mapping of the file at `base`
/// (`bytes` of it valid). A lent tensor (Note [Lent batches]) becomes a view of that mapping
/// that holds `lease` (null: copied into `pool`, or new memory, as every other tensor is).
data::sample decode_sample(reader& r, char* base, uint64_t bytes, data::buffer_pool* pool,
                           const std::shared_ptr<void>& lease, int depth);

} // namespace wire
} // namespace actorch::actors
