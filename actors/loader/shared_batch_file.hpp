// The shared batch file as a worker process's child sees it: the allocator of its buffer pool and
// where a reply's other tensors are copied (Note [Collating into the shared file] in
// shared_batch_file.cpp). The parent maps the same file (worker_process.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/allocator.hpp"
#include "core/tensor.hpp"

namespace actorch::actors {

class shared_file final : public allocator {
public:
  static constexpr uint64_t kReserve = uint64_t(16) << 30;
  /// `why` says why the file cannot be mapped (empty when it is).
  shared_file(int fd, std::string& why);
  ~shared_file() override;
  shared_file(const shared_file&) = delete;
  shared_file& operator=(const shared_file&) = delete;

  void* allocate(size_t nbytes) override;
  void deallocate(void*, size_t) noexcept override {} // the pool keeps its buffers to the end
  actorch::device device() const override { return kCPU; }
  std::string_view name() const override { return "shared batch file"; }

  /// A new reply: its copies go after the pool's memory.
  void reset() { used_ = top_; }
  /// The bytes a reply uses from the file's start (the pool's memory and the reply's copies).
  uint64_t used() const { return used_; }
  /// The offset of t's bytes (C order) in the file: where they are, for a contiguous tensor in
  /// the pool's memory (`lent`: the parent may keep them there, Note [Lent batches]); else
  /// copied in after it, for this reply only.
  uint64_t append(const tensor& t, bool& lent);

private:
  void grow(uint64_t bytes);

  int fd_;
  char* base_ = nullptr;
  uint64_t size_ = 0; // the file's
  uint64_t top_ = 0;  // the pool's memory: [0, top_)
  uint64_t used_ = 0; // this reply's: [0, used_)
};

} // namespace actorch::actors
