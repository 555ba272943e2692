// The comm actor (comm_actor.hpp): a reorder buffer in front of the process group.
#include "actors/comm_actor.hpp"

#include <map>

#include "actors/comm_messages.hpp"
#include "comm/collective_tag.hpp"
#include "core/trace.hpp"

namespace actorch::actors {

namespace {

struct comm_state {
  std::shared_ptr<dist::process_group> pg;
  uint64_t next = 0;                        // the collective to start next
  std::map<uint64_t, comm_request> waiting; // arrived ahead of `next`

  comm_state() = default;
  comm_state(const comm_state&) = delete;
  comm_state& operator=(const comm_state&) = delete;
  ~comm_state() {
    // Stopped with collectives still held: fail them, so no trainer waits forever.
    for (auto& [seq, r] : waiting)
      r.done(std::make_exception_ptr(error(detail::concat(
          "gradient exchange: the comm actor stopped before collective ", seq, " started"))));
  }
};

// Starts one collective; its completion runs on the process group's worker thread.
void start(comm_state& st, comm_request r) {
  const auto begin = trace::clock::now();
  if (!st.pg) {
    r.done(nullptr);
    return;
  }
  try {
    const size_t bytes = r.sum.nbytes();
    const dist::collective_tag tag(r.tag); // the trainers' name for it ("DDP bucket 3")
    st.pg->all_reduce(r.sum, r.op)
        .then([done = std::move(r.done), begin, seq = r.seq, bytes](const dist::work& w) {
          trace::record("comm", "all_reduce", begin, trace::clock::now(),
                        "\"seq\": " + std::to_string(seq) +
                            ", \"bytes\": " + std::to_string(bytes));
          done(w.exception());
        });
  } catch (...) {
    r.done(std::current_exception());
  }
}

caf::behavior comm_actor(caf::stateful_actor<comm_state>* self,
                         std::shared_ptr<dist::process_group> pg) {
  self->state.pg = std::move(pg);
  return {
      [self](reduce_atom, comm_request& r) {
        auto& st = self->state;
        st.waiting.emplace(r.seq, std::move(r));
        // Start every collective whose predecessors have started: seq order on every process.
        for (auto it = st.waiting.find(st.next); it != st.waiting.end();
             it = st.waiting.find(st.next)) {
          comm_request ready = std::move(it->second);
          st.waiting.erase(it);
          ++st.next;
          start(st, std::move(ready));
        }
      },
  };
}

class comm_exchange final : public dist::process_exchange {
public:
  comm_exchange(caf::actor_system& sys, std::shared_ptr<dist::process_group> pg)
      : rank_(pg ? pg->rank() : 0), size_(pg ? pg->size() : 1), pg_(pg),
        actor_(sys.spawn(comm_actor, std::move(pg))) {}
  ~comm_exchange() override { caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown); }

  int process_rank() const override { return rank_; }
  int num_processes() const override { return size_; }
  tensor empty_shared(int64_t numel, dtype dt) override {
    return pg_ ? pg_->empty_shared(numel, dt) : tensor();
  }
  device collective_device() const override { return pg_ ? pg_->collective_device() : kCPU; }
  void submit(uint64_t seq, tensor sum, dist::reduce_op op,
              std::function<void(std::exception_ptr)> done) override {
    caf::anon_send(
        actor_, reduce_atom::value,
        comm_request{seq, std::move(sum), op, std::move(done), dist::collective_tag::current()});
  }

private:
  int rank_;
  int size_;
  std::shared_ptr<dist::process_group> pg_; // for its properties; the actor runs the collectives
  caf::actor actor_;
};

} // namespace

std::shared_ptr<dist::process_exchange> spawn_comm_actor(caf::actor_system& sys,
                                                         std::shared_ptr<dist::process_group> pg) {
  return std::make_shared<comm_exchange>(sys, std::move(pg));
}

} // namespace actorch::actors
