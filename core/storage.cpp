// storage: owned or wrapped bytes.
#include "core/storage.hpp"

namespace actorch {

storage::storage(size_t nbytes, allocator* alloc)
    : data_(alloc->allocate(nbytes)), nbytes_(nbytes), device_(alloc->device()), allocator_(alloc) {
}

storage::storage(void* data, size_t nbytes, actorch::device dev, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(dev), deleter_(std::move(deleter)) {}

storage::~storage() {
  if (allocator_)
    allocator_->deallocate(data_, nbytes_);
  else if (deleter_)
    deleter_(data_);
}

} // namespace actorch
