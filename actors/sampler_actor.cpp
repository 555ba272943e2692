// The sampler actor. See sampler_actor.hpp for its role.
//
// Note [Loader credits]: CAF 0.17's stream stages do not keep back-pressure across a stage, so
// flow control is explicit. A run starts with `credits` = prefetch_factor x num_workers. The
// sampler emits one index batch per credit; the credit comes back only when the consumer
// releases the batch (the range-for moves past it, or a consumer actor replies credit_atom).
// So at most `credits` batches exist anywhere between the sampler and the consumer, whatever
// the speeds: loading, waiting in the reorder buffer, queued, or held by the consumer. Batch
// memory is bounded by construction, and with buffers recycled through the pool a steady-state
// epoch allocates nothing.
//
// Note [Loader stages]: collate and pin-memory run inside the dataset workers (in parallel, as
// PyTorch collates in its workers), writing straight into pooled, pinned when asked, buffers.
// The sampler runs them only for batches a user's source returns uncollated or unpinned.
//
// Note [In order]: with in_order the sampler delivers batches in sampler order: a batch that
// arrives early waits in `ready` until every earlier one went out. It cannot deadlock: batches
// are emitted in order, so the next one to deliver was always emitted and holds a credit.
// Errors are delivered in order too (the consumer sees the batch before the failure first),
// except timeouts, which go out at once.
//
// Note [Worker death]: workers are linked to the sampler, which traps exits. A worker that dies
// (an exception not derived from std::exception, a kill) sends its exit; so may its pending
// request fail. Whichever comes first replaces the worker (a new actor in the same slot, same
// id) and re-issues the batches it held with attempt + 1; replies of older attempts or of older
// runs (generation) are dropped. After max_attempts loads of one batch, the death is an error.
#include "actors/sampler_actor.hpp"

#include <algorithm>
#include <map>
#include <sstream>
#include <unordered_map>

#include "actors/dataset_worker.hpp"
#include "core/data/worker_info.hpp"

namespace actorch::actors {

namespace {

struct outstanding_task {
  int64_t worker;
  int attempt;
};

struct sampler_state {
  sampler_config cfg;
  std::vector<source_actor> sources;
  std::vector<int64_t> load; // outstanding requests per source
  epoch_plan plan;
  bool active = false;
  bool failed = false;
  size_t next_emit = 0; // position in plan.batches
  int64_t credit = 0;
  std::unordered_map<int64_t, outstanding_task> outstanding; // by seq
  std::unordered_map<int64_t, size_t> position;              // seq -> position
  std::map<size_t, delivery> ready;                          // reorder buffer, by position
  size_t next_deliver = 0;
  size_t delivered = 0;
  std::vector<caf::actor_addr> retired; // replaced workers, whose exit may still arrive
};

using sampler_pointer = caf::stateful_actor<sampler_state>*;

std::string source_name(const sampler_state& st, int64_t w) {
  return (st.cfg.respawn ? "DataLoader worker " : "DataLoader source ") + std::to_string(w);
}

void push(sampler_pointer self, delivery d) {
  auto& st = self->state;
  if (!d.error.empty())
    st.failed = true; // the run ends with the first error the consumer sees
  if (st.plan.sink)
    self->send(st.plan.sink, batch_atom::value, std::move(d));
  else
    st.cfg.queue->enqueue(std::move(d));
}

void deliver(sampler_pointer self, int64_t seq, data::sample data, std::string error,
             bool urgent = false) {
  auto& st = self->state;
  delivery d;
  d.generation = st.plan.generation;
  d.seq = seq;
  d.data = std::move(data);
  d.error = std::move(error);
  if (!st.cfg.in_order || urgent) {
    push(self, std::move(d));
    ++st.delivered;
  } else {
    // See Note [In order].
    st.ready.emplace(st.position.at(seq), std::move(d));
    while (!st.ready.empty() && st.ready.begin()->first == st.next_deliver) {
      const bool err = !st.ready.begin()->second.error.empty();
      push(self, std::move(st.ready.begin()->second));
      st.ready.erase(st.ready.begin());
      ++st.next_deliver;
      ++st.delivered;
      if (err)
        break;
    }
  }
  if (!st.failed && st.delivered == st.plan.batches.size()) {
    delivery end;
    end.generation = st.plan.generation;
    end.end_of_epoch = true;
    push(self, std::move(end));
    st.active = false;
  }
}

void pump(sampler_pointer self);
void replace_source(sampler_pointer self, int64_t w, const caf::error& reason);

void dispatch(sampler_pointer self, int64_t seq, int64_t w, int attempt) {
  auto& cur = self->state;
  const auto& [s, indices] = cur.plan.batches[cur.position.at(seq)];
  index_batch task;
  task.generation = cur.plan.generation;
  task.epoch = cur.plan.epoch;
  task.seq = seq;
  task.indices = indices;
  task.seed = data::batch_seed(cur.plan.base_seed, cur.plan.epoch, seq);
  cur.outstanding[seq] = {w, attempt};
  ++cur.load[size_t(w)];
  const uint64_t gen = cur.plan.generation;
  const caf::duration timeout =
      cur.cfg.timeout_s > 0
          ? caf::duration(std::chrono::microseconds(int64_t(cur.cfg.timeout_s * 1e6)))
          : caf::duration(caf::infinite);
  self->request(cur.sources[size_t(w)], timeout, load_atom::value, std::move(task))
      .then(
          [self, gen, seq, w, attempt](loaded_batch& b) {
            auto& st = self->state;
            if (gen != st.plan.generation || !st.active || st.failed)
              return;
            auto it = st.outstanding.find(seq);
            if (it == st.outstanding.end() || it->second.attempt != attempt)
              return;
            st.outstanding.erase(it);
            --st.load[size_t(w)];
            if (b.error.empty()) {
              // See Note [Loader stages].
              try {
                if (!b.collated) {
                  auto samples = std::move(b.data.as_tuple());
                  b.data = st.cfg.collate
                               ? st.cfg.collate(std::move(samples))
                               : data::default_collate(std::move(samples), st.cfg.pool.get());
                  b.pinned = st.cfg.pin_memory && !st.cfg.collate;
                }
                if (st.cfg.pin_memory && !b.pinned)
                  b.data = data::pin_memory(b.data, *st.cfg.pool);
              } catch (const std::exception& e) {
                b.error = "DataLoader failed to collate batch " + std::to_string(seq) + " from " +
                          source_name(st, w) + " (sample indices " +
                          indices_str(st.plan.batches[st.position.at(seq)].second) +
                          "): " + e.what();
              }
            }
            deliver(self, seq, std::move(b.data), std::move(b.error));
            pump(self);
          },
          [self, gen, seq, w, attempt](caf::error& err) {
            auto& st = self->state;
            if (gen != st.plan.generation || !st.active || st.failed)
              return;
            auto it = st.outstanding.find(seq);
            if (it == st.outstanding.end() || it->second.attempt != attempt)
              return;
            if (err == caf::sec::request_timeout) {
              std::ostringstream os;
              os << "DataLoader timed out after " << st.cfg.timeout_s << " seconds waiting for "
                 << source_name(st, w) << " to load batch " << seq << " (sample indices "
                 << indices_str(st.plan.batches[st.position.at(seq)].second) << ")";
              deliver(self, seq, {}, os.str(), true);
              return;
            }
            replace_source(self, w, err); // the source is gone: see Note [Worker death]
          });
}

void pump(sampler_pointer self) {
  auto& st = self->state;
  while (st.active && !st.failed && st.credit > 0 && st.next_emit < st.plan.batches.size()) {
    // The least busy source; ties go to the lowest id.
    size_t w = 0;
    for (size_t i = 1; i < st.load.size(); ++i)
      if (st.load[i] < st.load[w])
        w = i;
    const int64_t seq = st.plan.batches[st.next_emit].first;
    ++st.next_emit;
    --st.credit;
    dispatch(self, seq, int64_t(w), 0);
  }
}

void replace_source(sampler_pointer self, int64_t w, const caf::error& reason) {
  auto& st = self->state;
  if (!st.cfg.respawn) {
    if (st.active && !st.failed)
      deliver(self, -1, {}, source_name(st, w) + " stopped: " + caf::to_string(reason), true);
    return;
  }
  // A new worker in slot w. The old one is dead already (or about to be: kill it).
  self->unlink_from(st.sources[size_t(w)]);
  st.retired.push_back(st.sources[size_t(w)].address());
  caf::anon_send_exit(st.sources[size_t(w)], caf::exit_reason::kill);
  st.sources[size_t(w)] = st.cfg.respawn(w);
  self->link_to(st.sources[size_t(w)]);
  st.load[size_t(w)] = 0;
  if (!st.active || st.failed)
    return;
  std::vector<std::pair<int64_t, int>> reissue;
  for (const auto& [seq, task] : st.outstanding)
    if (task.worker == w)
      reissue.emplace_back(seq, task.attempt + 1);
  for (const auto& [seq, attempt] : reissue) {
    if (attempt >= st.cfg.max_attempts) {
      deliver(self, seq, {},
              source_name(st, w) + " died " + std::to_string(attempt) +
                  " times while loading batch " + std::to_string(seq) + " (sample indices " +
                  indices_str(st.plan.batches[st.position.at(seq)].second) +
                  "); last exit reason: " + caf::to_string(reason),
              true);
      return;
    }
    dispatch(self, seq, w, attempt);
  }
}

caf::behavior sampler_actor(sampler_pointer self, sampler_config cfg) {
  auto& cur = self->state;
  cur.cfg = std::move(cfg);
  cur.sources = cur.cfg.sources;
  cur.load.assign(cur.sources.size(), 0);
  for (auto& s : cur.sources) {
    if (cur.cfg.respawn)
      self->link_to(s);
    else
      self->monitor(s);
  }
  self->set_exit_handler([self](caf::exit_msg& msg) {
    auto& st = self->state;
    for (size_t w = 0; w < st.sources.size(); ++w)
      if (msg.source == st.sources[w].address()) {
        replace_source(self, int64_t(w), msg.reason); // See Note [Worker death]
        return;
      }
    // A worker replaced already (its request failed first): nothing left to do.
    if (std::find(st.retired.begin(), st.retired.end(), msg.source) != st.retired.end())
      return;
    // From the loader (or anyone else): stop, and take the linked workers along.
    self->quit(msg.reason ? msg.reason : caf::error(caf::exit_reason::user_shutdown));
  });
  self->set_down_handler([self](caf::down_msg& msg) {
    auto& st = self->state;
    for (size_t w = 0; w < st.sources.size(); ++w)
      if (msg.source == st.sources[w].address())
        replace_source(self, int64_t(w), msg.reason);
  });
  return {
      [self](epoch_atom, epoch_plan& plan) {
        auto& st = self->state;
        st.plan = std::move(plan);
        st.active = true;
        st.failed = false;
        st.next_emit = 0;
        st.credit = st.plan.credits;
        st.outstanding.clear();
        st.ready.clear();
        st.position.clear();
        for (size_t i = 0; i < st.plan.batches.size(); ++i)
          st.position[st.plan.batches[i].first] = i;
        st.next_deliver = 0;
        st.delivered = 0;
        std::fill(st.load.begin(), st.load.end(), 0);
        if (st.plan.batches.empty()) {
          delivery end;
          end.generation = st.plan.generation;
          end.end_of_epoch = true;
          push(self, std::move(end));
          st.active = false;
          return;
        }
        pump(self);
      },
      [self](credit_atom, uint64_t generation) {
        auto& st = self->state;
        if (generation != st.plan.generation)
          return;
        ++st.credit;
        pump(self);
      },
  };
}

} // namespace

caf::actor spawn_sampler(caf::actor_system& sys, sampler_config cfg) {
  return sys.spawn<caf::detached>(sampler_actor, std::move(cfg));
}

} // namespace actorch::actors
