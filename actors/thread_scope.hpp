// A scope in which a thread that is not one of CAF's (the consumer's, a Python thread) uses an
// actor system: constructs one, spawns into it, makes a scoped_actor for it. Leaving the scope
// drops CAF's per-thread reference to that system, so that any thread may destroy the system.
#pragma once

#include <caf/logger.hpp>

namespace actorch::actors {

// Note [CAF's per-thread logger]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// CAF 0.17 keeps, per thread, a strong reference to the logger of the last actor system the
// thread constructed, spawned into or made a scoped_actor for (CAF_SET_LOGGER_SYS, active at
// every log level), and ~actor_system waits until its logger is destroyed. So a system that
// thread A touched last and thread B destroys waits, without end, for thread A to touch another
// system or exit. From Python this is no corner: the garbage collector runs a loader's
// destructor on whichever thread allocates, and it held the GIL while it waited, so every
// thread stopped (a loader test hung one run in five under load). Every place where a thread
// that is not CAF's touches a system owned by an actorch object holds a thread_scope; CAF's
// own threads end by releasing their reference, and a system destroyed on the thread that last
// touched it releases the reference itself.
class thread_scope {
public:
  thread_scope() = default;
  ~thread_scope() { caf::logger::set_current_actor_system(nullptr); }
  thread_scope(const thread_scope&) = delete;
  thread_scope& operator=(const thread_scope&) = delete;
};

} // namespace actorch::actors
