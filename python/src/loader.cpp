// _C._Loader: the C++ loader (actors/data_loader.hpp) under actorch.DataLoader, which checks
// torch's arguments in Python (python/actorch/data/dataloader.py) and hands them here: a C++
// dataset, or the user's Python dataset, sampler and batch sampler through python_dataset.hpp;
// worker threads or worker processes, whose fork keeps the interpreter sound (fork hooks).
//
// Note [Python module]
// ~~~~~~~~~~~~~~~~~~~~
// The loader runs in C++: its workers are actor threads, or processes forked from them, that
// touch Python only for the user's Python code (a dataset's __getitem__, a collate_fn, a
// worker_init_fn, a Lambda transform), under the GIL. The iterator releases the GIL while it
// waits for a batch, so the workers' Python code and other Python threads run. A batch's
// tensors are handed out as actorch.Tensor objects (or torch tensors over them) holding the
// batch buffer: the buffer goes back to the loader's pool only when Python drops the last of
// them (and a DLPack consumer, like torch, releases its capsule), so a batch kept past the next
// iteration stays valid. A capsule not consumed calls the DLPack deleter itself, as PyTorch's
// do. The loader is destroyed without the GIL, since its shutdown waits for workers that may
// need the GIL.
//
// Spawned worker processes (multiprocessing_context "spawn" or "forkserver"): each is a new
// interpreter running actorch.data._spawn (Note [Spawned workers] in
// actors/loader/worker_process.cpp), which unpickles the dataset, collate_fn and worker_init_fn
// DataLoader pickled and calls _serve_spawned_worker below: the worker rebuilt as the parent's
// _Loader would build it, then the forked child's loop.
//
// Note [Forking a Python worker]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A worker process is forked from its worker actor's thread, not from the main thread. The fork
// hooks do what os.fork does from any thread: take the GIL (through the thread's kept state,
// Note [Worker thread states] in gil.cpp), PyOS_BeforeFork (the import lock, the at-fork
// handlers of threading, random, logging), fork, then PyOS_AfterFork_Parent in the parent, which
// lets the GIL go, and PyOS_AfterFork_Child in the child, which makes the forking thread the
// child's main thread and deletes the other threads' states. The child keeps the GIL from then
// on: it has one thread, so every later gil_lock there costs a counter, not a lock. Its
// faulthandler answers SIGUSR1 with its Python stack (a slow load's report) from then on. The
// child inherits the parent's Python objects, loaders among them, whose threads it does not
// have: gc.freeze() keeps its collector off them, and a loader reached from the child is never
// destroyed there (python_owned).
#include <pybind11/stl.h>

#include <cxxabi.h>
#include <unistd.h>

#include <csignal>
#include <memory>
#include <optional>

#include "actors/data_loader.hpp"
#include "actors/loader/worker.hpp"
#include "actors/loader/worker_process.hpp"
#include "python/src/bindings.hpp"
#include "python/src/convert.hpp"
#include "python/src/python_dataset.hpp"

namespace actorch::python {

namespace {

/// A loader owned by Python: destroyed without the GIL (Note [Python module]), and never in a
/// process forked from the one that made it (Note [Forking a Python worker]): there its threads
/// do not exist, and its destructor would wait for them for ever.
std::shared_ptr<data::data_loader> python_owned(data::data_loader loader) {
  return std::shared_ptr<data::data_loader>(new data::data_loader(std::move(loader)),
                                            [maker = ::getpid()](data::data_loader* p) {
                                              if (::getpid() != maker)
                                                return; // a fork's copy: left as it is
                                              std::optional<py::gil_scoped_release> no_gil;
                                              if (PyGILState_Check())
                                                no_gil.emplace();
                                              delete p;
                                            });
}

/// See Note [Forking a Python worker].
data::fork_hooks python_fork_hooks() {
  static thread_local PyGILState_STATE state;
  data::fork_hooks hooks;
  hooks.before = [] {
    try {
      keep_thread_state();
      state = PyGILState_Ensure();
    } catch (abi::__forced_unwind&) { // Note [Threads that meet the interpreter's end]
      park_at_interpreter_end();
    }
    PyOS_BeforeFork();
  };
  hooks.parent = [] {
    PyOS_AfterFork_Parent();
    PyGILState_Release(state);
  };
  hooks.child = [] {
    PyOS_AfterFork_Child();
    // The parent asks a slow load for its Python stack with SIGUSR1 (loader_options::
    // worker_stack_signal): answered by faulthandler from the first instant, so that the
    // signal never finds its default action, which would end the child.
    std::signal(SIGUSR1, SIG_IGN);
    try {
      py::module_::import("faulthandler").attr("register")(SIGUSR1, py::arg("all_threads") = true);
      // Everything the parent had goes to the permanent generation: the child's collector never
      // frees it (a loader of the parent's that was garbage there would be destroyed here, and
      // wait for threads the child does not have: CI's fresh root hung so), and never touches
      // those objects' pages (less copy-on-write).
      py::module_::import("gc").attr("freeze")();
    } catch (py::error_already_set&) {
    }
  };
  return hooks;
}

/// Thrown by the loader's interruption point when a signal handler raised (a KeyboardInterrupt
/// for Ctrl-C): carries nothing, since the exception is this thread's pending Python error.
struct python_signal {};

/// The Python iterator over one epoch of a loader. Dropped before the epoch's end (a `break`
/// out of the loop, then the last reference gone), it ends the epoch, so that its workers stop
/// as torch's iterator's do when it is collected, rather than wait, with their prefetched
/// batches, for the next iter().
class loader_iterator {
public:
  loader_iterator(std::shared_ptr<data::data_loader> loader, bool as_torch,
                  to_python_options::form form)
      : loader_(std::move(loader)), as_torch_(as_torch), form_(form) {}
  loader_iterator(loader_iterator&&) = default;
  loader_iterator& operator=(loader_iterator&&) = delete;
  ~loader_iterator() {
    // Not in a process forked from the maker: the loader's threads are not there (Note
    // [Forking a Python worker]).
    if (!loader_ || !epoch_ || ::getpid() != maker_)
      return;
    std::optional<py::gil_scoped_release> no_gil; // its workers may be waiting for the GIL
    if (PyGILState_Check())
      no_gil.emplace();
    try {
      loader_->end_epoch(*epoch_);
    } catch (...) { // nothing to raise it to here; the next begin() ends the epoch then
    }
  }
  /// The next batch. A batch's own error (a dataset's exception) is raised and the epoch goes
  /// on, as torch's; any other (a worker dead 3 times, a timeout) ends it: raised once, saying
  /// how many batches are lost, then StopIteration, as torch's iterator after its error.
  py::object next() {
    if (failed_)
      throw py::stop_iteration();
    bool signalled = false;
    {
      py::gil_scoped_release no_gil; // Note [Python module]
      try {
        if (!it_) {
          it_ = loader_->begin();
          epoch_ = loader_->epoch();
        } else if (*it_ != loader_->end()) {
          ++*it_;
        }
      } catch (const data::data_loader::batch_error&) {
        if (!it_) { // the first batch failed: the epoch goes on from here, as torch's does
          it_ = loader_->this_epoch();
          epoch_ = loader_->epoch();
        }
        ++taken_;
        throw;
      } catch (const actorch::error& e) {
        failed_ = true;
        throw actorch::error(std::string(e.what()) + lost());
      } catch (const python_signal&) { // the epoch ended; the handler's exception is set
        failed_ = true;
        signalled = true;
      }
    }
    if (signalled)
      throw py::error_already_set();
    if (*it_ == loader_->end())
      throw py::stop_iteration();
    ++taken_;
    return to_python(**it_, {.as_torch = as_torch_, .as = form_});
  }

private:
  /// What a fatal error cost the epoch, said after its message.
  std::string lost() const {
    std::optional<int64_t> total;
    try {
      total = loader_->size();
    } catch (const actorch::error&) { // an iterable dataset's epoch has no length
    }
    std::string out =
        "\nThe epoch ends with this error after " + std::to_string(taken_) + " batches";
    if (total && *total >= taken_)
      out += " of its " + std::to_string(*total) + ": the other " +
             std::to_string(*total - taken_) + " are not delivered";
    return out;
  }

  std::shared_ptr<data::data_loader> loader_;
  std::optional<data::data_loader::iterator> it_;
  int64_t taken_ = 0;            // batches (and batch errors) this iterator gave
  bool failed_ = false;          // a fatal error was raised: StopIteration from now on
  std::optional<int64_t> epoch_; // the epoch it_ walks, once begun
  pid_t maker_ = ::getpid();
  bool as_torch_;
  to_python_options::form form_;
};

/// A sampler (or batch sampler) argument: null for None, the C++ one actorch.data made, or the
/// user's Python iterable through its adapter (python_dataset.hpp), which may yield `keys` of
/// any kind where the dataset takes them (a Python dataset's; null for a C++ one's).
template <class Cxx, class Adapter>
std::shared_ptr<Cxx> cxx_or_adapted(const py::object& s, std::shared_ptr<sampler_keys> keys) {
  if (s.is_none())
    return nullptr;
  if (py::isinstance<Cxx>(s))
    return s.cast<std::shared_ptr<Cxx>>();
  return std::make_shared<Adapter>(s, std::move(keys));
}

/// Python code as a collate_fn: the samples as Python objects in (as a list; `unbatched`, with
/// batch_size None: the one sample itself, as torch calls it), the batch back as the very
/// object it returned, which leaves a worker process pickled (Note [Python objects across
/// processes] in convert.cpp).
data::collate_fn python_collate(py::object fn, bool unbatched) {
  return [held = std::make_shared<gil_object>(std::move(fn)),
          unbatched](std::vector<data::sample> samples) -> data::sample {
    gil_lock gil;
    try {
      py::object batch;
      if (unbatched) {
        ACTORCH_INTERNAL_ASSERT(samples.size() == 1, "an unbatched collate of ", samples.size(),
                                " samples");
        batch = held->obj(to_python(samples[0], {}));
      } else {
        py::list items;
        for (const auto& s : samples)
          items.append(to_python(s, {}));
        batch = held->obj(items);
      }
      return std::make_shared<python_value>(std::move(batch));
    } catch (py::error_already_set& e) {
      rethrow_python_error(e, "collate_fn raised ");
    }
  };
}

/// The worker_init_fn, collate_fn and dataset of a loader over a Python dataset, built alike for
/// _Loader and for a spawned worker: `unbatched` says whether batch_size is None (torch's
/// default_convert).
struct python_parts {
  data::dataset_ptr dataset;
  data::iterable_dataset_ptr iterable;
  data::collate_fn collate;
  std::function<void(int64_t)> worker_init_fn;
};

python_parts python_parts_of(const py::object& dataset, bool iterable, const py::object& collate_fn,
                             const py::object& worker_init_fn, bool unbatched, bool cxx_dataset) {
  python_parts out;
  if (!collate_fn.is_none())
    out.collate = python_collate(collate_fn, unbatched);
  else if (!cxx_dataset && unbatched)
    // torch's default_convert keeps a Python dataset's numbers and containers as they are
    // (from_python already made its arrays tensors): nothing to do per sample.
    out.collate = [](std::vector<data::sample> s) { return std::move(s[0]); };
  if (!worker_init_fn.is_none())
    out.worker_init_fn = [fn = std::make_shared<gil_object>(worker_init_fn)](int64_t id) {
      gil_lock gil;
      try {
        fn->obj(id);
      } catch (py::error_already_set& e) {
        rethrow_python_error(e, "");
      }
    };
  if (cxx_dataset)
    return out;
  const bool opaque = !collate_fn.is_none(); // the collate_fn takes them as they are
  if (iterable)
    out.iterable = std::make_shared<python_iterable_dataset>(dataset, opaque);
  else
    out.dataset = std::make_shared<python_map_dataset>(dataset, opaque);
  return out;
}

} // namespace

void bind_loader(py::module_& m) {
  register_python_codec();
  m.def(
      "_parse_spawn_frame",
      [](py::bytes frame) {
        const auto [h, payload] = actors::worker_process::parse_spawn_frame(std::string(frame));
        return py::make_tuple(h.id, h.num_workers, h.base_seed, h.batch_size, h.drop_last, h.cpu,
                              h.start_cpu, py::bytes(payload));
      },
      "A spawned worker's first frame: (id, num_workers, base_seed, batch_size, drop_last, cpu, "
      "start_cpu, payload)");
  m.def(
      "_serve_spawned_worker",
      [](int sock, int shm_fd, int parent, py::tuple numbers, py::object dataset, bool iterable,
         py::object collate_fn, py::object worker_init_fn, bool unbatched,
         const std::string& init_error) {
        actors::worker_config cfg;
        cfg.id = numbers[0].cast<int64_t>();
        cfg.num_workers = numbers[1].cast<int64_t>();
        cfg.base_seed = numbers[2].cast<uint64_t>();
        cfg.recipe.batch_size = numbers[3].cast<int64_t>();
        cfg.recipe.drop_last = numbers[4].cast<bool>();
        cfg.cpu = numbers[5].cast<int>();
        cfg.start_cpu = numbers[6].cast<int>();
        if (init_error.empty()) {
          python_parts parts =
              python_parts_of(dataset, iterable, collate_fn, worker_init_fn, unbatched, false);
          cfg.dataset = std::move(parts.dataset);
          cfg.iterable = std::move(parts.iterable);
          cfg.recipe.collate = std::move(parts.collate);
          cfg.worker_init_fn = std::move(parts.worker_init_fn);
        }
        actors::serve_spawned_worker(sock, shm_fd, pid_t(parent), std::move(cfg), init_error);
      },
      "Serves a spawned worker's tasks (actorch.data._spawn); never returns");
  py::class_<loader_iterator>(m, "_LoaderIterator")
      .def("__iter__", [](loader_iterator& it) -> loader_iterator& { return it; })
      .def("__next__", &loader_iterator::next);
  py::class_<data::data_loader, std::shared_ptr<data::data_loader>>(m, "_Loader")
      .def(py::init([](py::object dataset, bool iterable, std::optional<int64_t> batch_size,
                       bool shuffle, py::object sampler, py::object batch_sampler,
                       int64_t num_workers, py::object collate_fn, bool pin_memory, bool drop_last,
                       double timeout, bool retry_timeouts, py::object worker_init_fn,
                       bool processes, std::optional<uint64_t> seed,
                       std::optional<int64_t> prefetch_factor, bool persistent_workers,
                       bool in_order, bool round_robin, double report_delay, py::object spawn) {
             const bool cxx_dataset = py::isinstance<data::dataset>(dataset);
             python_parts parts = python_parts_of(dataset, iterable, collate_fn, worker_init_fn,
                                                  !batch_size, cxx_dataset);
             std::shared_ptr<sampler_keys> keys;
             if (const auto* map = dynamic_cast<const python_map_dataset*>(parts.dataset.get()))
               keys = map->keys(); // Note [Sampler keys]
             data::loader_options o;
             o.batch_size = batch_size;
             o.shuffle = shuffle;
             o.sampler = cxx_or_adapted<data::sampler, python_sampler>(sampler, keys);
             o.batch_sampler =
                 cxx_or_adapted<data::batch_sampler, python_batch_sampler>(batch_sampler, keys);
             o.num_workers = num_workers;
             o.pin_memory = pin_memory;
             o.drop_last = drop_last;
             o.timeout = timeout;
             o.retry_timeouts = retry_timeouts;
             o.prefetch_factor = prefetch_factor;
             o.persistent_workers = persistent_workers;
             o.in_order = in_order;
             o.round_robin = round_robin;
             o.report_delay = report_delay;
             if (seed)
               o.generator = std::make_shared<generator>(*seed);
             if (!spawn.is_none()) { // (argv, payload): Note [Spawned workers]
               const auto [argv, payload] =
                   spawn.cast<std::pair<std::vector<std::string>, py::bytes>>();
               o.multiprocessing_context = "spawn";
               o.spawn = {argv, std::string(payload)};
               o.worker_stack_signal = SIGUSR1; // actorch.data._spawn registers faulthandler
             } else if (processes) {
               o.multiprocessing_context = "fork";
               o.fork_hooks = python_fork_hooks();
               // faulthandler prints the child's Python stack on it (actorch.data.dataloader)
               o.worker_stack_signal = SIGUSR1;
             }
             o.collate_fn = std::move(parts.collate);
             o.worker_init_fn = std::move(parts.worker_init_fn);
             o.interruption_point = [] { // a Ctrl-C while the loop waits for a worker
               gil_lock gil;
               if (PyErr_CheckSignals() != 0)
                 throw python_signal{};
             };
             if (cxx_dataset)
               return python_owned(
                   data::data_loader(dataset.cast<std::shared_ptr<data::dataset>>(), std::move(o)));
             if (iterable)
               return python_owned(data::data_loader(parts.iterable, std::move(o)));
             return python_owned(data::data_loader(parts.dataset, std::move(o)));
           }),
           py::arg("dataset"), py::arg("iterable"), py::arg("batch_size"), py::arg("shuffle"),
           py::arg("sampler"), py::arg("batch_sampler"), py::arg("num_workers"),
           py::arg("collate_fn"), py::arg("pin_memory"), py::arg("drop_last"), py::arg("timeout"),
           py::arg("retry_timeouts"), py::arg("worker_init_fn"), py::arg("processes"),
           py::arg("seed"), py::arg("prefetch_factor"), py::arg("persistent_workers"),
           py::arg("in_order"), py::arg("round_robin"), py::arg("report_delay"),
           py::arg("spawn") = py::none())
      .def("__len__", &data::data_loader::size)
      .def("_timing",
           [](const data::data_loader& l) {
             const data::loader_timing t = l.timing();
             return py::make_tuple(t.first_batch_s, t.wait_s, t.work_s, t.batches, t.starvation());
           })
      .def("_manual_seed", &data::data_loader::manual_seed, py::arg("seed"))
      .def("_seed_next_epoch", &data::data_loader::seed_next_epoch, py::arg("base_seed"))
      .def(
          "_set_spawn_payload",
          [](data::data_loader& l, const py::bytes& payload) {
            l.set_spawn_payload(std::string(payload));
          },
          py::arg("payload"))
      // Note [Loader state from Python] in python/actorch/data/_state.py: the C++ state as a
      // tuple of plain values, (epoch, delivered, streams, loader generator (seed, offset),
      // sampler generator or None).
      .def("_state",
           [](const data::data_loader& l) {
             const data::loader_state s = l.state();
             py::object sampler = py::none();
             if (s.sampler_generator)
               sampler = py::make_tuple(s.sampler_generator->seed, s.sampler_generator->offset);
             return py::make_tuple(
                 s.epoch, s.delivered, s.streams,
                 py::make_tuple(s.loader_generator.seed, s.loader_generator.offset), sampler);
           })
      .def(
          "_load_state",
          [](data::data_loader& l, int64_t epoch, std::vector<int64_t> delivered, int64_t streams,
             std::pair<uint64_t, uint64_t> gen, std::optional<std::pair<uint64_t, uint64_t>> smp) {
            data::loader_state s;
            s.epoch = epoch;
            s.delivered = std::move(delivered);
            s.streams = streams;
            s.loader_generator = {gen.first, gen.second};
            if (smp)
              s.sampler_generator = generator::state{smp->first, smp->second};
            l.load_state(s);
          },
          py::arg("epoch"), py::arg("delivered"), py::arg("streams"), py::arg("generator"),
          py::arg("sampler_generator"))
      .def("_end_epoch", [](data::data_loader& l) { l.end_epoch(l.epoch()); })
      .def("_iter",
           [](std::shared_ptr<data::data_loader> self, bool as_torch, const std::string& form) {
             using f = to_python_options::form;
             return loader_iterator(std::move(self), as_torch,
                                    form == "collated"    ? f::collated
                                    : form == "converted" ? f::converted
                                                          : f::sample);
           });
}

} // namespace actorch::python
