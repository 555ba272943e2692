// Thread-local worker info and batch generator (see Note [Batch randomness] in
// worker_info.hpp), and the calling thread's CPUs.
#include "core/data/worker_info.hpp"

#include <sched.h>

#include <cerrno>
#include <cstring>

#include "base/error.hpp"

namespace actorch::data {

namespace {
thread_local const worker_info* current_worker = nullptr;
thread_local generator* current_batch_gen = nullptr;

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
} // namespace

const worker_info* get_worker_info() {
  return current_worker;
}

generator& batch_generator() {
  return current_batch_gen ? *current_batch_gen : default_generator();
}

namespace {
uint64_t draw_bits() {
  const generator::state s = batch_generator().reserve(1);
  const auto v = generator::philox(s.seed, s.offset);
  return uint64_t(v[0]) << 32 | v[1];
}
} // namespace

int64_t draw_index(int64_t n) {
  return int64_t(draw_bits() % uint64_t(n));
}
double draw_unit() {
  return double(draw_bits() >> 11) * 0x1.0p-53;
}

uint64_t sample_seed(uint64_t batch_seed, int64_t position) {
  return splitmix64(batch_seed ^ splitmix64(uint64_t(position) + 1));
}

uint64_t batch_seed(uint64_t base_seed, int64_t epoch, int64_t batch_index) {
  return splitmix64(splitmix64(splitmix64(base_seed) ^ uint64_t(epoch)) ^ uint64_t(batch_index));
}

std::vector<int> usable_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  ACTORCH_CHECK(::sched_getaffinity(0, sizeof mask, &mask) == 0,
                "usable_cpus: sched_getaffinity failed: ", std::strerror(errno));
  std::vector<int> out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &mask))
      out.push_back(cpu);
  return out;
}

void pin_thread_to_cpu(int cpu) {
  ACTORCH_CHECK(cpu >= 0 && cpu < CPU_SETSIZE, "pin_thread_to_cpu: no CPU ", cpu);
  cpu_set_t mask;
  CPU_ZERO(&mask);
  CPU_SET(cpu, &mask);
  // pid 0: the calling thread alone (Linux affinity is per thread).
  ACTORCH_CHECK(::sched_setaffinity(0, sizeof mask, &mask) == 0, "could not pin the thread to CPU ",
                cpu, ": ", std::strerror(errno));
}

void allow_thread_cpus(const std::vector<int>& cpus) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (const int cpu : cpus) {
    ACTORCH_CHECK(cpu >= 0 && cpu < CPU_SETSIZE, "allow_thread_cpus: no CPU ", cpu);
    CPU_SET(cpu, &mask);
  }
  ACTORCH_CHECK(::sched_setaffinity(0, sizeof mask, &mask) == 0,
                "could not let the thread run on its CPUs again: ", std::strerror(errno));
}

worker_scope::worker_scope(const worker_info* info) : previous_(current_worker) {
  current_worker = info;
}
worker_scope::~worker_scope() {
  current_worker = previous_;
}

batch_scope::batch_scope(uint64_t seed) : gen_(seed), previous_(current_batch_gen) {
  current_batch_gen = &gen_;
}
batch_scope::~batch_scope() {
  current_batch_gen = previous_;
}

} // namespace actorch::data
