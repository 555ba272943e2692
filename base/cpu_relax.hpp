// A pause for spin-waits: tells the core this thread is waiting (PAUSE on x86-64, YIELD on
// AArch64), so a spinning waiter gives its sibling hyperthread the pipeline and leaves the
// memory order machinery alone.
#pragma once

namespace actorch {

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

} // namespace actorch
