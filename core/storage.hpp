// The memory behind one or more tensors. Views share a storage through shared_ptr, so the
// memory lives until the last view of it is gone. A storage either owns its bytes (it frees
// them through its allocator) or wraps memory it was given with a deleter (from_blob).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/allocator.hpp"

namespace actorch {

class storage {
public:
  /// Allocates `nbytes` through `alloc`.
  storage(size_t nbytes, allocator* alloc);
  /// Wraps memory owned elsewhere; `deleter` (may be empty) runs when the storage dies.
  storage(void* data, size_t nbytes, actorch::device dev, std::function<void(void*)> deleter);
  ~storage();
  storage(const storage&) = delete;
  storage& operator=(const storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  actorch::device device() const { return device_; }
  /// The allocator that owns the bytes, or nullptr for wrapped memory.
  allocator* owner() const { return allocator_; }

  /// Bumped by every in-place write through any view; autograd compares it with the version a
  /// saved tensor had, to detect tensors modified after they were saved for backward. Atomic:
  /// threads may write disjoint views of one storage at once (trainer actors stepping their
  /// pieces of one shared parameter, Note [Sharded step]).
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

private:
  void* data_;
  size_t nbytes_;
  actorch::device device_;
  allocator* allocator_ = nullptr;
  std::function<void(void*)> deleter_;
  std::atomic<uint64_t> version_{0};
};

} // namespace actorch
