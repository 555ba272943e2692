// process_group_gloo: Gloo's algorithms on CPU tensors, run off the caller's thread. This file
// holds the group's set-up and the steps every op shares (process_group_gloo_impl.hpp); the ops
// are in the files named there. The op headers, argument checks and point-to-point slots are in
// gloo_checks.hpp.
//
// Note [Gloo group threads]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A group owns two serial executors (serial_executor.hpp). The *collectives* one runs
// collectives one at a time in issue order (the order every rank issued them in, which is what
// keeps them matched), each under tag 4n+1 of its issue number n (4n+2 for an op's second
// exchange). Before each collective the ranks allgather a small header under tag 4n (op, dtype,
// numel, shape, root, reduce op): when ranks disagree, every rank fails the op with a message
// naming each rank's tensor, instead of hanging or reducing garbage, and the group stays
// usable. Point-to-point ops are posted on the caller's thread at once (Gloo's send waits for
// the peer's recv, so queueing them behind each other could deadlock an exchange) and the
// *p2p waiter* completes their works in posting order (p2p.cpp).
// A Gloo failure (timeout, peer gone) poisons the context (DEPENDENCIES.md, Gloo gotcha 1): the
// op fails with a message naming the op and the peers, and every later op of the group fails at
// once with that reason.
#include "comm/backend/gloo/process_group_gloo_impl.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <sys/socket.h>

#include <gloo/allgather.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "base/env.hpp"
#include "base/error.hpp"
#include "comm/backend/gloo/pair_mesh.hpp"
#include "comm/backend/socket_ifname.hpp"
#include "comm/collective_tag.hpp"
#include "comm/store/prefix_store.hpp"
#include "comm/store/tcp_store.hpp"

namespace actorch::dist {

kernels::cpu::combine_fn reduce_function(reduce_op op, dtype t) {
  using kernels::cpu::combine_op;
  switch (op) {
  case reduce_op::sum:
  case reduce_op::avg: return kernels::cpu::combine(combine_op::sum, t);
  case reduce_op::product: return kernels::cpu::combine(combine_op::product, t);
  case reduce_op::min: return kernels::cpu::combine(combine_op::min, t);
  case reduce_op::max: return kernels::cpu::combine(combine_op::max, t);
  case reduce_op::band: return kernels::cpu::combine(combine_op::band, t);
  case reduce_op::bor: return kernels::cpu::combine(combine_op::bor, t);
  case reduce_op::bxor: return kernels::cpu::combine(combine_op::bxor, t);
  }
  ACTORCH_FAIL("reduce_function: unknown reduce op ", int(op));
}

std::string process_group_gloo::impl::peers() const {
  std::vector<int> others;
  for (int r = 0; r < pg.size(); ++r)
    if (r != pg.rank())
      others.push_back(pg.global_ranks()[size_t(r)]);
  return ranks_str(others);
}

std::string process_group_gloo::impl::where() const {
  return "rank " + std::to_string(pg.global_ranks()[size_t(pg.rank())]) + " of group " +
         ranks_str(pg.global_ranks());
}

namespace {

// Whole milliseconds since `t`, for messages that say how long something took.
long long ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t)
      .count();
}

} // namespace

std::exception_ptr
process_group_gloo::impl::fail_group(const std::string& op, const std::string& what,
                                     std::chrono::steady_clock::time_point began) {
  std::string msg = op + " failed on " + where() + " after " + std::to_string(ms_since(began)) +
                    " ms (the group's timeout is " + std::to_string(opts.timeout.count()) +
                    " ms; peers " + peers() + "): " + what;
  if (ledger) // See Note [Collective ledger]: who the wait was for.
    msg += ". Roll call: " +
           ledger->roll_call(std::clamp(opts.timeout / 4, milliseconds(200), milliseconds(5000)));
  msg += ". The group's Gloo context is unusable now: destroy it and create a new group";
  {
    std::lock_guard lock(mu);
    if (broken.empty())
      broken = msg;
  }
  return std::make_exception_ptr(actorch::error(msg));
}

std::exception_ptr process_group_gloo::impl::refused(const std::string& op) const {
  return std::make_exception_ptr(actorch::error(
      op + " refused on " + where() + ": the group failed earlier and cannot run ops: " + broken));
}

work process_group_gloo::impl::enqueue(std::string op,
                                       std::function<std::vector<tensor>(uint32_t)> run) {
  work w;
  std::lock_guard lock(mu);
  if (!broken.empty())
    return work::failed(refused(op));
  const uint32_t seq = next_seq++;
  // The ledger's name of it: the op, and the issuing thread's tag (collective_tag.hpp).
  std::string label =
      collective_tag::current().empty() ? op : op + '\t' + collective_tag::current();
  collectives.post(
      [this, op = std::move(op), label = std::move(label), run = std::move(run), w, seq] {
        {
          std::lock_guard guard(mu);
          if (!broken.empty()) {
            w.mark_failed(refused(op));
            return;
          }
        }
        std::vector<tensor> result;
        std::exception_ptr err;
        const auto began = std::chrono::steady_clock::now();
        if (ledger)
          ledger->enter(seq, label);
        try {
          result = run(seq);
        } catch (const actorch::error&) {
          err = std::current_exception(); // ranks disagreed, or a caller mistake: group usable
        } catch (const std::exception& e) {
          err = fail_group(op, e.what(), began); // Gloo's own failure
        }
        if (ledger)
          ledger->finish(seq); // failed or not, this rank is out of it
        if (err)
          w.mark_failed(err);
        else
          w.mark_completed(std::move(result));
      });
  return w;
}

void process_group_gloo::impl::check_headers(const std::string& op, uint32_t seq,
                                             const op_header& mine) {
  if (shm) { // the same exchange through shared memory: no TCP round trip
    std::vector<int64_t> all;
    if (!shm->run(nullptr, 0, 1, nullptr, mine.v, all))
      throw_mismatch(op, all);
    return;
  }
  const size_t n = size_t(pg.size());
  std::vector<int64_t> all(kHeaderLen * n);
  gloo::AllgatherOptions o(ctx(seq));
  o.setInput(const_cast<int64_t*>(mine.v), kHeaderLen);
  o.setOutput(all.data(), all.size());
  o.setTag(4 * seq);
  o.setTimeout(opts.timeout);
  gloo::allgather(o);
  bool same = true;
  for (size_t r = 1; r < n; ++r)
    same = same && std::memcmp(&all[r * kHeaderLen], all.data(), kHeaderLen * 8) == 0;
  if (!same)
    throw_mismatch(op, all);
}

void process_group_gloo::impl::staged(const std::string& op,
                                      const std::function<bool(std::vector<int64_t>&)>& run) {
  std::vector<int64_t> all;
  if (!run(all))
    throw_mismatch(op, all);
}

void process_group_gloo::impl::throw_mismatch(const std::string& op,
                                              const std::vector<int64_t>& all) {
  const size_t n = size_t(pg.size());
  std::string msg = op + ": the ranks of group " + ranks_str(pg.global_ranks()) +
                    " issued different collectives or tensors:";
  for (size_t r = 0; r < n; ++r)
    msg += std::string(r ? ";" : "") + " rank " + std::to_string(pg.global_ranks()[r]) + ": " +
           describe(&all[r * kHeaderLen]);
  ACTORCH_FAIL(msg);
}

process_group_gloo::process_group_gloo(std::shared_ptr<store> s, int rank, int size, options opts,
                                       std::vector<int> global_ranks)
    : process_group(rank, size, std::move(global_ranks)),
      impl_(std::make_unique<impl>(*this, std::move(s), std::move(opts))) {
  ACTORCH_CHECK(impl_->st != nullptr, "process_group_gloo: the store is null");
  ACTORCH_CHECK(rank >= 0, "process_group_gloo: rank ", rank, " is outside [0, ", size, ")");
  ACTORCH_CHECK(impl_->opts.timeout.count() > 0, "process_group_gloo: the timeout must be > 0");
  // Note [Socket interfaces]
  // ~~~~~~~~~~~~~~~~~~~~~~~~
  // With interfaces (options::interfaces, else GLOO_SOCKET_IFNAME="eth0,eth1"), the group makes
  // one Gloo TCP device per interface, each bound to that interface's address, and one full
  // mesh (context) per device, rendezvousing under its own store prefix. The n-th collective
  // runs on context n % k and a point-to-point op with tag t on context t % k (c10d's
  // getContext(tag)): every rank picks the same context for the same op, and consecutive ops
  // spread over the interfaces. Without interfaces, one device listens on options::hostname.
  std::vector<gloo::transport::tcp::attr> attrs;
  std::vector<std::string> ifnames = impl_->opts.interfaces;
  for (const auto& name : ifnames)
    parse_gloo_ifnames(name, "process_group_gloo: options::interfaces entry");
  if (ifnames.empty())
    ifnames = gloo_socket_ifnames();
  for (const auto& name : ifnames) {
    gloo::transport::tcp::attr attr;
    attr.iface = name;
    attr.ai_family = interface_family(name);
    attrs.push_back(attr);
  }
  if (attrs.empty()) {
    gloo::transport::tcp::attr attr;
    attr.hostname = impl_->opts.hostname;
    attrs.push_back(attr);
  }
  const std::string secret = impl_->opts.secret.empty() ? job_secret() : impl_->opts.secret;
  const auto began = std::chrono::steady_clock::now();
  try {
    for (size_t i = 0; i < attrs.size(); ++i) {
      impl_->devices.push_back(gloo::transport::tcp::CreateDevice(attrs[i]));
      // Device 0 keeps the keys a single-device group uses.
      const std::shared_ptr<store> keys =
          i == 0 ? impl_->st
                 : std::make_shared<prefix_store>("device" + std::to_string(i), impl_->st);
      impl_->contexts.push_back(connect_mesh(*keys, impl_->devices.back(), rank, global_ranks_,
                                             secret, impl_->opts.timeout));
    }
    if (impl_->opts.shared_memory && env_flag("ACTORCH_GLOO_SHM", true))
      impl_->shm = shm_collectives::connect(
          *impl_->st, rank, size, impl_->opts.timeout, impl_->where(),
          impl_->opts.single_copy && env_flag("ACTORCH_GLOO_SINGLE_COPY", true));
    if (size > 1) {
      const auto delay = impl_->opts.report_delay.count() > 0
                             ? std::min(impl_->opts.report_delay, impl_->opts.timeout / 2)
                             : milliseconds(0);
      impl_->ledger =
          std::make_unique<collective_ledger>(impl_->st, rank, global_ranks_, impl_->where(),
                                              collective_ledger::options{.report_delay = delay});
    }
  } catch (const std::exception& e) {
    // Say how long it took: a peer that never joins fails the store's wait after the timeout,
    // one that joined and then never connects fails Gloo's connect after it (Note [Gloo
    // connect timeout]).
    ACTORCH_FAIL("process_group_gloo: rank ", global_ranks_[size_t(rank)], " of group ",
                 ranks_str(global_ranks_), " could not connect to its peers after ",
                 ms_since(began), " ms (the group's timeout is ", impl_->opts.timeout.count(),
                 " ms): ", e.what());
  }
}

process_group_gloo::~process_group_gloo() {
  // The ops' tasks use the group (its rank, size, contexts): finish them first.
  impl_->collectives.shutdown();
  impl_->p2p_waiter.shutdown();
}

// Note [Aborting a Gloo group]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Gloo's Pair::close() closes the socket but leaves an op waiting on the pair to its timeout,
// which is what a rank behind a cut link meets (no reset ever comes). shutdown(2) on the
// pair's socket instead makes Gloo's event loop read its end: the pair fails every op waiting
// on it with "Connection closed", and the peer, if it still hears us, sees the same. Gloo keeps
// the socket to itself, so abort() finds it among this process's descriptors by the pair's
// local address (its port is the socket's alone).
void process_group_gloo::abort() {
  std::vector<sockaddr_storage> ours;
  for (auto& context : impl_->contexts)
    for (int peer = 0; peer < size(); ++peer)
      if (peer != rank())
        if (auto& pair = context->getPair(peer))
          ours.push_back(
              static_cast<const gloo::transport::tcp::Address&>(pair->address()).getSockaddr());
  for (const int fd : sockets_bound_to(ours))
    if (fd >= 0)
      ::shutdown(fd, SHUT_RDWR);
}

milliseconds process_group_gloo::timeout() const {
  return impl_->opts.timeout;
}

std::string process_group_gloo::transport() const {
  if (impl_->shm == nullptr)
    return "tcp";
  return impl_->shm->single_copy() ? "shared memory, single copy" : "shared memory";
}

std::string process_group_gloo::broken_reason() const {
  std::lock_guard lock(impl_->mu);
  return impl_->broken;
}

} // namespace actorch::dist
