// The GIL on any thread: a loader worker's thread keeps one Python thread state for its life,
// a thread that meets the interpreter's end parks, and a Python object a thread without the GIL
// drops last takes the GIL to go (gil.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace actorch::python {

namespace py = pybind11;

/// The GIL, taken on any thread: a loader worker's thread keeps one Python thread state for its
/// life instead of making and deleting one per call, as pybind11's gil_scoped_acquire alone would
/// (Note [Worker thread states] in gil.cpp).
class gil_lock {
public:
  gil_lock();
  gil_lock(const gil_lock&) = delete;
  gil_lock& operator=(const gil_lock&) = delete;

private:
  py::gil_scoped_acquire gil_;
};

/// Never returns: where a thread that asked for the GIL during the interpreter's finalization
/// waits (Note [Threads that meet the interpreter's end] in gil.cpp).
[[noreturn]] void park_at_interpreter_end();

/// Keeps a Python thread state for the calling thread's life (see gil_lock); what a worker
/// thread calls before it takes the GIL. @pre the GIL is not held by this thread.
void keep_thread_state();

/// A Python object that a thread without the GIL may drop last (a collate_fn held by the
/// loader's workers, a dataset): it takes the GIL to let go of it.
struct gil_object {
  explicit gil_object(py::object o) : obj(std::move(o)) {}
  ~gil_object();
  gil_object(const gil_object&) = delete;
  gil_object& operator=(const gil_object&) = delete;
  py::object obj;
};

} // namespace actorch::python
