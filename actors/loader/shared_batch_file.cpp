// The shared batch file, the child's side (shared_batch_file.hpp).
//
// Note [Collating into the shared file]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The child's buffer pool takes its memory from the shared file itself (shared_file is the
// pool's allocator: it only grows the file, and the pool recycles what it lent), so a batch the
// child collates is already where the parent reads it: encode_sample records its offset and
// copies nothing. Only a reply's other tensors (a collate_fn's own, a sample's tensor passed
// through unbatched) are copied, after the pool's memory, where the next reply's copies go: the
// parent copies those out before it sends the next task. The pool's buffers are lent to the
// parent and come back to the pool only when the parent releases them (Note [Lent batches]).
// The file is mapped
// once over a reserve of address space (kReserve), so the pool's pointers stay valid as it
// grows; a batch beyond the reserve is an error naming the sizes.
#include "actors/loader/shared_batch_file.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/error.hpp"

namespace actorch::actors {

namespace {
constexpr uint64_t kAlign = 64; // tensors' offsets in the shared file
} // namespace

shared_file::shared_file(int fd, std::string& why) : fd_(fd) {
  void* p = ::mmap(nullptr, kReserve, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED)
    why = "cannot map the shared batch file: " + errno_str(errno);
  else
    base_ = static_cast<char*>(p);
}

shared_file::~shared_file() {
  if (base_ != nullptr)
    ::munmap(base_, kReserve);
}

void* shared_file::allocate(size_t nbytes) {
  ACTORCH_CHECK(base_ != nullptr, "the shared batch file is not mapped");
  const uint64_t at = (top_ + kAlign - 1) / kAlign * kAlign;
  const uint64_t end = at + std::max<uint64_t>(nbytes, 1);
  grow(end);
  // Every page of the pool's memory is written once here, so that the file holds written
  // pages up to top_ whatever the batches later leave untouched (the parent checks that a
  // reply's bytes are in written pages: Note [Worker processes] in worker_process.cpp).
  static const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  for (uint64_t p = at / page * page; p < end; p += page)
    static_cast<volatile char*>(base_)[std::max(p, at)] = 0;
  top_ = end;
  return base_ + at;
}

uint64_t shared_file::append(const tensor& t, bool& lent) {
  const tensor c = t.contiguous();
  const uint64_t n = c.nbytes();
  const char* p = static_cast<const char*>(c.data_ptr());
  const auto addr = uintptr_t(p), base = uintptr_t(base_);
  lent = n > 0 && base_ != nullptr && addr >= base && addr + n <= base + top_;
  if (lent)
    return uint64_t(addr - base);
  if (n == 0)
    return 0; // nothing to read, anywhere in the file
  const uint64_t at = (used_ + kAlign - 1) / kAlign * kAlign;
  grow(at + n);
  std::memcpy(base_ + at, p, n);
  used_ = at + n;
  return at;
}

void shared_file::grow(uint64_t bytes) {
  if (bytes <= size_)
    return;
  ACTORCH_CHECK(bytes <= kReserve, "a batch needs ", bytes,
                " bytes of the shared batch file, more than the ", kReserve,
                " a worker process reserves for it");
  const uint64_t size = std::min(kReserve, std::max<uint64_t>({bytes, 2 * size_, 1 << 20}));
  ACTORCH_CHECK(::ftruncate(fd_, off_t(size)) == 0, "cannot grow the shared batch file to ", size,
                " bytes: ", errno_str(errno));
  size_ = size;
}

} // namespace actorch::actors
