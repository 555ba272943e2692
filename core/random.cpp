// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
#include "core/random.hpp"

namespace actorch {

generator::generator(uint64_t seed) : seed_(seed) {}

void generator::manual_seed(uint64_t seed) {
  std::lock_guard lock(mutex_);
  seed_ = seed;
  offset_ = 0;
}

uint64_t generator::initial_seed() const {
  std::lock_guard lock(mutex_);
  return seed_;
}

generator::state generator::get_state() const {
  std::lock_guard lock(mutex_);
  return {seed_, offset_};
}

void generator::set_state(const state& s) {
  std::lock_guard lock(mutex_);
  seed_ = s.seed;
  offset_ = s.offset;
}

generator::state generator::reserve(uint64_t blocks) {
  std::lock_guard lock(mutex_);
  const state first{seed_, offset_};
  offset_ += blocks;
  return first;
}

std::array<uint32_t, 4> generator::philox(uint64_t seed, uint64_t counter) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kMul0) * c0;
    const uint64_t p1 = uint64_t(kMul1) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

generator& default_generator() {
  static generator g;
  return g;
}

void manual_seed(uint64_t seed) {
  default_generator().manual_seed(seed);
}

} // namespace actorch
