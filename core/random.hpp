// Random number generation: a Philox4x32-10 counter-based generator. Its state is just
// (seed, offset), so a stream can be saved, restored, split or re-created anywhere, and the
// same seed gives the same numbers on every platform. One generator may be shared by many
// threads: each draw locks it and reserves its range of counters.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

namespace actorch {

class generator {
public:
  explicit generator(uint64_t seed = 67280421310721ull);

  /// torch.Generator.manual_seed: restarts the stream at `seed`.
  void manual_seed(uint64_t seed);
  uint64_t initial_seed() const;

  struct state {
    uint64_t seed;
    uint64_t offset; // in blocks of four 32-bit draws
    friend bool operator==(const state&, const state&) = default;
  };
  state get_state() const;
  void set_state(const state& s);

  /// Reserves `blocks` consecutive Philox blocks, under one lock with the seed they belong to:
  /// returns the seed and the first block's counter.
  state reserve(uint64_t blocks);

  /// The four 32-bit values of block `counter` of the stream with `seed` (pure function).
  static std::array<uint32_t, 4> philox(uint64_t seed, uint64_t counter);

private:
  mutable std::mutex mutex_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

/// The generator used when an op is given none (torch's default CPU generator).
generator& default_generator();
/// torch.manual_seed: reseeds the default generator.
void manual_seed(uint64_t seed);

} // namespace actorch
