// The GIL on any thread (gil.hpp).
//
// Note [Worker thread states]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Python code runs on a thread only with a PyThreadState of that thread. pybind11's
// gil_scoped_acquire makes one on a thread that has none and deletes it when it lets go, which
// costs microseconds per call: per sample, on a loader worker's thread. keep_thread_state()
// makes the thread's state once (PyGILState_Ensure, then releasing the GIL but not the state),
// and a thread_local deletes it when the thread ends, unless the interpreter is gone by then;
// gil_scoped_acquire then finds it and only takes the GIL. The fork hooks (loader.cpp) rely on
// it too: the worker's thread forks holding the GIL through this state, which the child keeps.
#include "python/src/gil.hpp"

#include <cxxabi.h>
#include <unistd.h>

namespace actorch::python {

namespace {

struct kept_thread_state {
  PyThreadState* state = nullptr;
  ~kept_thread_state() {
    if (state == nullptr || !Py_IsInitialized() || _Py_IsFinalizing())
      return;
    PyEval_RestoreThread(state);
    PyGILState_Release(PyGILState_UNLOCKED); // deletes the state and lets the GIL go
  }
};

} // namespace

void keep_thread_state() {
  thread_local kept_thread_state kept;
  if (kept.state != nullptr || PyGILState_GetThisThreadState() != nullptr)
    return; // kept already, or a thread Python made
  PyGILState_Ensure();
  kept.state = PyEval_SaveThread();
}

// Note [Threads that meet the interpreter's end]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Python 3.11 ends a thread that asks for the GIL once the interpreter is finalizing with
// pthread_exit, whose forced unwind runs through the caller's frames: a loader worker thread's
// (a program that exits in the middle of an epoch on worker threads), where a catch (...) of the
// loader's or CAF's takes it for an error and rethrows it later: std::terminate or a crash at
// exit. Such a thread is parked here instead, for the rest of the process, as Python 3.14 parks
// them itself: the interpreter is gone, so it has nothing left to do, and the loader abandons a
// worker call that does not return (Note [Stuck workers] in actors/data_loader.cpp).
[[noreturn]] void park_at_interpreter_end() {
  for (;;)
    ::pause();
}

gil_lock::gil_lock() try : gil_((keep_thread_state(), py::gil_scoped_acquire())) {
} catch (abi::__forced_unwind&) {
  park_at_interpreter_end();
}

gil_object::~gil_object() {
  gil_lock gil;
  obj = py::object();
}

} // namespace actorch::python
