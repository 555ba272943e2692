// The dataset worker actor and the batch loading it shares with the num_workers = 0 path.
#include "actors/dataset_worker.hpp"

#include <sstream>

namespace actorch::actors {

std::string indices_str(const std::vector<int64_t>& idx) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < idx.size() && i < 16; ++i)
    os << (i ? ", " : "") << idx[i];
  if (idx.size() > 16)
    os << ", ...";
  os << ']';
  return os.str();
}

loaded_batch load_batch(const index_batch& task, const data::dataset& ds,
                        const data::collate_fn& collate, data::buffer_pool* pool, bool pin_memory,
                        const std::string& who, const std::atomic<uint64_t>* active_generation) {
  loaded_batch out;
  out.generation = task.generation;
  out.seq = task.seq;
  data::batch_scope randomness(task.seed); // See Note [Batch randomness]
  std::vector<data::sample> samples;
  samples.reserve(task.indices.size());
  for (int64_t index : task.indices) {
    // A new run started (early exit, new epoch): stop loading what nobody will read.
    if (active_generation &&
        active_generation->load(std::memory_order_relaxed) != task.generation) {
      out.error = "cancelled";
      return out;
    }
    try {
      samples.push_back(ds.get(index));
    } catch (const std::exception& e) {
      out.error = who + " failed on sample index " + std::to_string(index) + " (batch " +
                  std::to_string(task.seq) + "): " + e.what();
      return out;
    }
  }
  try {
    if (collate) {
      out.data = collate(std::move(samples));
      if (pin_memory && pool)
        out.data = data::pin_memory(out.data, *pool);
    } else {
      out.data = data::default_collate(std::move(samples), pool);
    }
    out.pinned = pin_memory;
  } catch (const std::exception& e) {
    out.error = who + " failed to collate batch " + std::to_string(task.seq) + " (sample indices " +
                indices_str(task.indices) + "): " + e.what();
  }
  return out;
}

namespace {

struct worker_state {
  worker_config cfg;
  data::worker_info info;
  bool initialized = false;
  std::string name;
};

source_actor::behavior_type dataset_worker(source_actor::stateful_pointer<worker_state> self,
                                           worker_config cfg) {
  auto& st = self->state;
  st.info = {cfg.id, cfg.num_workers, cfg.base_seed + uint64_t(cfg.id), cfg.dataset};
  st.name = "DataLoader worker " + std::to_string(cfg.id);
  st.cfg = std::move(cfg);
  // Note [Worker crash]: an exception escaping a handler (one not derived from std::exception,
  // which load_batch does not catch) kills this actor; the sampler sees it go down, spawns a
  // replacement and re-issues its batch. Quietly: the sampler reports it if it persists.
  self->set_exception_handler([](caf::scheduled_actor*, std::exception_ptr&) -> caf::error {
    return caf::sec::runtime_error;
  });
  return {
      [self](load_atom, const index_batch& task) -> loaded_batch {
        auto& s = self->state;
        data::worker_scope scope(&s.info);
        if (!s.initialized) {
          s.initialized = true;
          if (s.cfg.worker_init_fn) {
            try {
              s.cfg.worker_init_fn(s.cfg.id);
            } catch (const std::exception& e) {
              loaded_batch out;
              out.generation = task.generation;
              out.seq = task.seq;
              out.worker = s.cfg.id;
              out.error = s.name + ": worker_init_fn failed: " + e.what();
              return out;
            }
          }
        }
        loaded_batch out = load_batch(task, *s.cfg.dataset, s.cfg.collate, s.cfg.pool.get(),
                                      s.cfg.pin_memory, s.name, s.cfg.active_generation.get());
        out.worker = s.cfg.id;
        return out;
      },
  };
}

} // namespace

source_actor spawn_dataset_worker(caf::actor_system& sys, worker_config cfg) {
  return sys.spawn<caf::detached>(dataset_worker, std::move(cfg));
}

} // namespace actorch::actors
