// The process-wide state behind distributed.hpp: the store every group rendezvous through, the
// default group, and the count of new_group calls that names each group's store prefix.
#include "comm/distributed.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <set>

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/parse.hpp"
#include "base/text.hpp"
#include "comm/backend/gloo/process_group_gloo.hpp"
#include "comm/backend/nccl/process_group_nccl.hpp"
#include "comm/elastic.hpp"
#include "comm/host_identity.hpp"
#include "comm/store/file_store.hpp"
#include "comm/store/prefix_store.hpp"
#include "comm/store/tcp_store.hpp"
#include "core/data/distributed_sampler.hpp"

namespace actorch::dist {

namespace {

// Note [Ops of a non-member]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// torch 1.13 lets a rank outside a new_group call the group's ops: each warns ("Running
// all_reduce on global rank 1 which does not belong to the given group.") and returns at once,
// changing nothing (get_rank and get_world_size are -1), so code that runs one program on every
// rank needs no `if`. The group new_group hands such a rank does the same: every op is a
// completed work, the tensors untouched, recv's sender -1, with one warning per op and process
// on stderr. As in torch, membership comes before the arguments: a non-member's src or dst is
// not checked (to_group_rank).
class non_member_group final : public process_group {
public:
  non_member_group(int size, std::vector<int> ranks, std::string backend)
      : process_group(-1, size, std::move(ranks)), backend_(std::move(backend)) {}
  std::string backend() const override { return backend_; }
  work broadcast(tensor&, int) override { return skip("broadcast"); }
  work all_reduce(tensor&, reduce_op) override { return skip("all_reduce"); }
  work reduce(tensor&, int, reduce_op) override { return skip("reduce"); }
  work all_gather(std::vector<tensor>&, const tensor&) override { return skip("all_gather"); }
  work all_gather_into_tensor(tensor&, const tensor&) override {
    return skip("all_gather_into_tensor");
  }
  work gather(std::vector<tensor>&, const tensor&, int) override { return skip("gather"); }
  work scatter(tensor&, const std::vector<tensor>&, int) override { return skip("scatter"); }
  work reduce_scatter(tensor&, const std::vector<tensor>&, reduce_op) override {
    return skip("reduce_scatter");
  }
  work all_to_all(std::vector<tensor>&, const std::vector<tensor>&) override {
    return skip("all_to_all");
  }
  work barrier() override { return skip("barrier"); }
  work monitored_barrier(milliseconds, bool) override { return skip("monitored_barrier"); }
  work send(const tensor&, int, int) override { return skip("send"); }
  work recv(tensor&, int, int) override { return skip("recv"); }

private:
  static work skip(const char* op) {
    static std::mutex mu;
    static std::set<std::string> warned;
    {
      std::lock_guard lock(mu);
      if (warned.insert(op).second)
        std::fprintf(stderr,
                     "Warning: Running %s on global rank %d which does not belong to the given "
                     "group.\n",
                     op, get_rank());
    }
    work w;
    w.mark_completed({}, -1);
    return w;
  }
  std::string backend_;
};

struct state {
  std::mutex mu;
  std::shared_ptr<store> st;
  group world;
  std::string backend;
  milliseconds timeout{0};
  std::string hostname;
  int groups_made = 0;
};

state& global() {
  static state s;
  return s;
}

/// The address of this host that the route to `host` leaves from: what the other ranks can
/// reach us at (peers of a multi-host job connect to the address Gloo advertises). A host name
/// could resolve to 127.0.0.1 on its own machine, so the route decides, not gethostname().
std::string address_toward(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  ACTORCH_CHECK(rc == 0, "init_process_group: cannot resolve MASTER_ADDR '", host,
                "': ", ::gai_strerror(rc));
  std::string out;
  for (addrinfo* a = res; a != nullptr && out.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      continue;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    // A UDP connect sends nothing: it only picks the route and the source address.
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0)
      out = numeric_endpoint(local).first;
    ::close(fd);
  }
  ::freeaddrinfo(res);
  ACTORCH_CHECK(!out.empty(), "init_process_group: no route from this host to MASTER_ADDR '", host,
                "', so no address to give the other ranks: set GLOO_SOCKET_IFNAME to the ",
                "interface they reach this host through");
  return out;
}

/// A rank, a world size or a port read from the URL or the environment: a whole number >= 0.
int parse_count(const std::string& text, const std::string& what) {
  return int(parse_int(text, "init_process_group: " + what, 0, std::numeric_limits<int>::max()));
}

// The first of the variables that is set, parsed; -1 when none is.
int from_env(std::initializer_list<const char*> names, std::string* which) {
  for (const char* n : names)
    if (auto v = env(n)) {
      *which = n;
      return parse_count(*v, std::string("environment variable ") + n);
    }
  return -1;
}

uint16_t parse_port(const std::string& text, const std::string& what) {
  return uint16_t(parse_int(text, "init_process_group: " + what, 1, 65535));
}

group make_group(const std::string& backend, std::shared_ptr<store> st, int rank, int size,
                 milliseconds timeout, const std::string& hostname, std::vector<int> ranks) {
  if (backend == "gloo") {
    process_group_gloo::options o;
    o.timeout = timeout;
    o.hostname = hostname;
    return std::make_shared<process_group_gloo>(std::move(st), rank, size, o, std::move(ranks));
  }
  if (backend == "nccl")
    return make_process_group_nccl(std::move(st), rank, size, timeout, std::move(ranks));
  if (backend == "mpi")
    ACTORCH_FAIL("init_process_group: ", backend_unavailable_reason(backend));
  ACTORCH_FAIL("init_process_group: unknown backend '", backend, "' (expected gloo or nccl)");
}

const char* kNotInitialized =
    "torch.distributed: the default process group is not initialized (call init_process_group "
    "first)";

// `g`, or the default group when g is null.
group resolve(const group& g) {
  if (g)
    return g;
  auto& s = global();
  std::lock_guard lock(s.mu);
  ACTORCH_CHECK(s.world != nullptr, kNotInitialized);
  return s.world;
}

int to_group_rank(const group& g, int global_rank, const char* op, const char* what) {
  if (g->rank() < 0) // Note [Ops of a non-member]: its ops ignore the rank
    return -1;
  const int r = g->group_rank(global_rank);
  ACTORCH_CHECK(r >= 0, op, ": ", what, " ", global_rank, " is not in the group [",
                join_numbers(g->global_ranks(), ", "), "]");
  return r;
}

work finish(work w, bool async_op) {
  if (!async_op)
    w.wait();
  return w;
}

} // namespace

void init_process_group(const init_options& opts) {
  auto& s = global();
  std::lock_guard lock(s.mu);
  ACTORCH_CHECK(s.world == nullptr, "init_process_group: the default process group is already ",
                "initialized (call destroy_process_group first)");
  ACTORCH_CHECK(opts.timeout.count() > 0, "init_process_group: the timeout must be > 0");
  // -1, PyTorch's default, means "not given": take it from the URL or the environment.
  ACTORCH_CHECK(opts.rank >= -1, "init_process_group: rank must not be negative (-1: from the ",
                "environment), but got ", opts.rank);
  ACTORCH_CHECK(opts.world_size >= -1, "init_process_group: world_size must not be negative ",
                "(-1: from the environment), but got ", opts.world_size);
  std::string rank_src = "the rank argument", world_src = "the world_size argument";
  int rank = opts.rank, world_size = opts.world_size;
  ACTORCH_CHECK(opts.store == nullptr || opts.init_method.empty(),
                "init_process_group: cannot specify both init_method ('", opts.init_method,
                "') and store: the store is the rendezvous (torch refuses the two together too)");
  std::string url = opts.init_method.empty() ? "env://" : opts.init_method;

  // tcp:// and file:// may carry ?rank=R&world_size=N.
  if (auto q = url.find('?'); q != std::string::npos && !opts.store) {
    std::string query = url.substr(q + 1);
    url = url.substr(0, q);
    size_t pos = 0;
    while (pos <= query.size()) {
      const size_t amp = std::min(query.find('&', pos), query.size());
      const std::string kv = query.substr(pos, amp - pos);
      const size_t eq = kv.find('=');
      ACTORCH_CHECK(eq != std::string::npos, "init_process_group: malformed query '", kv,
                    "' in init_method '", opts.init_method, "'");
      const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
      if (k == "rank" && rank < 0) {
        rank = parse_count(v, "rank in the URL");
        rank_src = "the URL";
      } else if (k == "world_size" && world_size < 0) {
        world_size = parse_count(v, "world_size in the URL");
        world_src = "the URL";
      }
      pos = amp + 1;
    }
  }
  if (rank < 0)
    rank = from_env({"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}, &rank_src);
  if (world_size < 0)
    world_size = from_env({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"}, &world_src);
  ACTORCH_CHECK(world_size != -1, "init_process_group: the world size is unknown: pass ",
                "world_size or set WORLD_SIZE (or OMPI_COMM_WORLD_SIZE / SLURM_NTASKS)");
  ACTORCH_CHECK(rank != -1, "init_process_group: the rank is unknown: pass rank or set RANK ",
                "(or OMPI_COMM_WORLD_RANK / SLURM_PROCID)");
  ACTORCH_CHECK(world_size >= 1, "init_process_group: world_size must be >= 1 but got ", world_size,
                " (from ", world_src, ")");
  ACTORCH_CHECK(rank >= 0 && rank < world_size, "init_process_group: rank ", rank, " (from ",
                rank_src, ") is outside [0, ", world_size, ")");

  std::shared_ptr<store> st = opts.store;
  std::string hostname = "127.0.0.1";
  if (!st) {
    std::string host;
    uint16_t port = 0;
    if (url == "env://") {
      auto addr = env("MASTER_ADDR");
      auto p = env("MASTER_PORT");
      ACTORCH_CHECK(addr.has_value(), "init_process_group: env:// needs MASTER_ADDR, which is ",
                    "not set (also MASTER_PORT, WORLD_SIZE and RANK)");
      ACTORCH_CHECK(p.has_value(), "init_process_group: env:// needs MASTER_PORT, which is not ",
                    "set (also MASTER_ADDR, WORLD_SIZE and RANK)");
      host = *addr;
      port = parse_port(*p, "MASTER_PORT");
    } else if (url.rfind("tcp://", 0) == 0) {
      const auto [h, p] = split_host_port(url.substr(6));
      ACTORCH_CHECK(!h.empty() && !p.empty(), "init_process_group: malformed ", "init_method '",
                    opts.init_method, "' (expected tcp://host:port)");
      host = h;
      port = parse_port(p, "the port in '" + opts.init_method + "'");
    } else if (url.rfind("file://", 0) == 0) {
      const std::string path = url.substr(7);
      ACTORCH_CHECK(!path.empty() && path.front() == '/', "init_process_group: malformed ",
                    "init_method '", opts.init_method, "' (expected file:///absolute/path)");
      st = std::make_shared<file_store>(path, world_size, opts.timeout);
    } else {
      ACTORCH_FAIL("init_process_group: unsupported init_method '", opts.init_method,
                   "' (expected env://, tcp://host:port or file:///path)");
    }
    // torchrun's agent hosts the store on MASTER_PORT and says so: every rank joins it as a
    // client, under the attempt's prefix, as torch's _create_c10d_store does.
    const auto agent_store = env("TORCHELASTIC_USE_AGENT_STORE");
    if (!st && url == "env://" && agent_store && *agent_store == "True") {
      const std::string attempt = env("TORCHELASTIC_RESTART_COUNT").value_or("0");
      st = std::make_shared<prefix_store>(
          "/worker/attempt_" + attempt,
          std::make_shared<tcp_store>(host, port, false, opts.timeout));
    }
    if (!st)
      st = std::make_shared<tcp_store>(host, port, rank == 0, opts.timeout);
    if (!host.empty())
      hostname = address_toward(host, port);
  }
  const std::string backend = Backend::canonical(opts.backend);
  if (elastic::enabled() && elastic::replacement() > 0) {
    // A replacement for a lost rank of an elastic job: its world is the membership the
    // launcher published with it, which the survivors regroup into (Note [Elastic membership]).
    ACTORCH_CHECK(backend == "gloo", "init_process_group: a replacement rank of an elastic job ",
                  "joins a gloo group; backend ", backend, " cannot regroup");
    elastic::coordinator c(opts.timeout);
    for (;;) {
      const elastic::membership m = c.join(opts.timeout);
      try {
        s.world = c.make_group(m);
      } catch (const std::exception&) {
        // Another rank lost before this membership met: join the newer one (Note [Superseded
        // membership] in comm/elastic.cpp).
        if (c.published(m.generation + 1, std::chrono::milliseconds(0)))
          continue;
        throw;
      }
      elastic::set_joined_membership(m.generation);
      break;
    }
  } else {
    s.world = make_group(backend, std::make_shared<prefix_store>("default_pg", st), rank,
                         world_size, opts.timeout, hostname, {});
  }
  s.st = st;
  s.backend = backend;
  s.timeout = opts.timeout;
  s.hostname = hostname;
  s.groups_made = 0;
  // DistributedSampler's num_replicas and rank default to the default group's (core cannot
  // call comm, so comm tells it how to ask).
  data::set_default_group_query([]() -> std::optional<std::pair<int64_t, int64_t>> {
    if (!is_initialized())
      return std::nullopt;
    return std::pair<int64_t, int64_t>{get_world_size(), get_rank()};
  });
}

bool is_initialized() {
  auto& s = global();
  std::lock_guard lock(s.mu);
  return s.world != nullptr;
}

void destroy_process_group() {
  auto& s = global();
  group w;
  std::shared_ptr<store> st;
  {
    std::lock_guard lock(s.mu);
    w = std::move(s.world);
    st = std::move(s.st);
    s.world = nullptr;
  }
  // Destroyed outside the lock: a group finishes its queued ops first.
}

group world() {
  return resolve(nullptr);
}

int get_rank(const group& g) {
  return g ? g->rank() : world()->rank();
}
int get_world_size(const group& g) {
  if (g && g->rank() < 0) // Note [Ops of a non-member]
    return -1;
  return g ? g->size() : world()->size();
}
std::string get_backend(const group& g) {
  return g ? g->backend() : world()->backend();
}

group new_group(std::vector<int> ranks, std::optional<milliseconds> timeout,
                std::optional<std::string> backend_name) {
  auto& s = global();
  std::shared_ptr<store> st;
  int n = 0, me = 0, world_size = 0;
  std::string backend, hostname;
  milliseconds t{0};
  {
    std::lock_guard lock(s.mu);
    ACTORCH_CHECK(s.world != nullptr, kNotInitialized);
    const group& w = s.world;
    st = s.st;
    n = s.groups_made++;
    me = w->rank();
    world_size = w->size();
    backend = backend_name ? Backend::canonical(*backend_name) : s.backend;
    hostname = s.hostname;
    t = timeout.value_or(s.timeout);
  }
  if (ranks.empty())
    for (int r = 0; r < world_size; ++r)
      ranks.push_back(r);
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    ACTORCH_CHECK(sorted[i] >= 0 && sorted[i] < world_size, "new_group: rank ", sorted[i],
                  " is outside the default group's [0, ", world_size, ")");
    ACTORCH_CHECK(i == 0 || sorted[i] != sorted[i - 1], "new_group: rank ", sorted[i],
                  " is listed twice");
  }
  ranks = sorted; // group rank i is the i-th smallest global rank, as in torch
  int my_index = -1;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == me)
      my_index = int(i);
  if (my_index < 0)
    return std::make_shared<non_member_group>(int(ranks.size()), ranks, backend);
  return make_group(backend, std::make_shared<prefix_store>("group_" + std::to_string(n), st),
                    my_index, int(ranks.size()), t, hostname, ranks);
}

void send(const tensor& t, int dst, const group& g, int tag) {
  isend(t, dst, g, tag).wait();
}

int recv(tensor& t, int src, const group& g, int tag) {
  return irecv(t, src, g, tag).source_rank();
}

work isend(const tensor& t, int dst, const group& g, int tag) {
  const group pg = resolve(g);
  return pg->send(t, to_group_rank(pg, dst, "send", "dst"), tag);
}

work irecv(tensor& t, int src, const group& g, int tag) {
  const group pg = resolve(g);
  const int gsrc = src == -1 ? -1 : to_group_rank(pg, src, "recv", "src");
  // Report the sender as a global rank.
  work out;
  pg->recv(t, gsrc, tag).then([out, ranks = pg->global_ranks()](const work& w) {
    if (auto e = w.exception())
      out.mark_failed(e);
    else
      out.mark_completed({}, w.source_rank() < 0 ? -1 : ranks[size_t(w.source_rank())]);
  });
  return out;
}

work broadcast(tensor& t, int src, const group& g, bool async_op) {
  const group pg = resolve(g);
  return finish(pg->broadcast(t, to_group_rank(pg, src, "broadcast", "src")), async_op);
}
work all_reduce(tensor& t, reduce_op op, const group& g, bool async_op) {
  return finish(resolve(g)->all_reduce(t, op), async_op);
}
work reduce(tensor& t, int dst, reduce_op op, const group& g, bool async_op) {
  const group pg = resolve(g);
  return finish(pg->reduce(t, to_group_rank(pg, dst, "reduce", "dst"), op), async_op);
}
work all_gather(std::vector<tensor>& tensor_list, const tensor& t, const group& g, bool async_op) {
  return finish(resolve(g)->all_gather(tensor_list, t), async_op);
}
work all_gather_into_tensor(tensor& output, const tensor& input, const group& g, bool async_op) {
  return finish(resolve(g)->all_gather_into_tensor(output, input), async_op);
}
work gather(const tensor& t, std::vector<tensor>& gather_list, int dst, const group& g,
            bool async_op) {
  const group pg = resolve(g);
  return finish(pg->gather(gather_list, t, to_group_rank(pg, dst, "gather", "dst")), async_op);
}
work scatter(tensor& t, const std::vector<tensor>& scatter_list, int src, const group& g,
             bool async_op) {
  const group pg = resolve(g);
  return finish(pg->scatter(t, scatter_list, to_group_rank(pg, src, "scatter", "src")), async_op);
}
work reduce_scatter(tensor& output, const std::vector<tensor>& input_list, reduce_op op,
                    const group& g, bool async_op) {
  return finish(resolve(g)->reduce_scatter(output, input_list, op), async_op);
}
work all_to_all(std::vector<tensor>& output_list, const std::vector<tensor>& input_list,
                const group& g, bool async_op) {
  return finish(resolve(g)->all_to_all(output_list, input_list), async_op);
}
work barrier(const group& g, bool async_op) {
  return finish(resolve(g)->barrier(), async_op);
}
void monitored_barrier(const group& g, std::optional<milliseconds> timeout, bool wait_all_ranks) {
  const group pg = resolve(g);
  milliseconds t = timeout.value_or(milliseconds(0));
  if (!timeout) {
    auto& s = global();
    std::lock_guard lock(s.mu);
    t = s.timeout;
  }
  pg->monitored_barrier(t, wait_all_ranks).wait();
}

bool is_available() {
  return true;
}
bool is_gloo_available() {
  return true;
}
bool is_nccl_available() {
  return ACTORCH_HAVE_CUDA != 0;
}
bool is_mpi_available() {
  return false;
}

std::string Backend::canonical(std::string_view name) {
  std::string lower(name);
  for (char& c : lower)
    c = char(std::tolower(static_cast<unsigned char>(c)));
  ACTORCH_CHECK(lower == GLOO || lower == NCCL || lower == MPI, "unknown backend '", name,
                "' (expected gloo or nccl, in any case, or Backend::GLOO / Backend::NCCL)");
  return lower;
}

std::string backend_unavailable_reason(const std::string& backend) {
  if (backend == "gloo")
    return "";
  if (backend == "nccl")
    return is_nccl_available() ? ""
                               : "the nccl backend is not available: this build has no CUDA "
                                 "(configure with ACTORCH_ENABLE_CUDA=ON where nvcc is found)";
  if (backend == "mpi")
    return "the mpi backend is not available: actorch has no MPI backend (PyTorch builds it "
           "only from source against an MPI library); use gloo for CPU tensors and nccl for "
           "CUDA tensors, started with `actorch launch` (or mpirun: init reads "
           "OMPI_COMM_WORLD_RANK / _SIZE)";
  return "unknown backend '" + backend + "' (expected gloo or nccl)";
}

} // namespace actorch::dist
