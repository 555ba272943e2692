// The `coll` workload of ../shared/bench/WORKLOADS.md, as its peer (torch_collectives.py) runs
// it: float32 SUM over `world` ranks on 127.0.0.1; each size's buffer of n elements (n a
// multiple of the world, bytes = n * 4: all_gather's whole output, reduce_scatter's whole
// input); 3 warm-ups, then 20 timed iterations (5 from 16 MiB) each after a barrier; the median
// and the slowest; then one fresh run checked against its closed form on every rank.
// Started without RANK in the environment, it forks its own ranks (run_as_ranks).
#include <algorithm>
#include <chrono>
#include <functional>
#include <iomanip>

#include "bench/bench.hpp"
#include "comm/distributed.hpp"
#include "core/ops/factory.hpp"
#include "core/ops/reduce.hpp"

namespace actorch::bench {

namespace {

const std::vector<std::string> kOps = {"all_reduce",     "broadcast",  "reduce",   "all_gather",
                                       "reduce_scatter", "all_to_all", "send_recv"};

// nccl-tests' bus bandwidth factors.
double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce")
    return 2.0 * (n - 1) / n;
  if (op == "broadcast" || op == "reduce" || op == "send_recv")
    return 1;
  return double(n - 1) / n;
}

// Whether every element of t equals v.
bool all_equal(const tensor& t, double v) {
  return t.numel() == 0 || (t.eq(v).to(dtype::int64).sum().item<int64_t>() == t.numel());
}

// One collective over buffers of n elements: run() issues it, check() says whether the last
// run's result is right after fill() reset the inputs.
struct collective {
  std::function<void()> fill, run;
  std::function<bool()> check;
};

collective make(const std::string& op, int64_t n, int rank, int world) {
  const double mine = rank + 1, sum = world * (world + 1) / 2.0;
  const int64_t part = n / world;
  auto x = std::make_shared<tensor>(empty({n}));
  collective c;
  c.fill = [x, mine] { x->fill_(mine); };
  if (op == "all_reduce") {
    c.run = [x] { dist::all_reduce(*x); };
    c.check = [x, sum] { return all_equal(*x, sum); };
  } else if (op == "broadcast") {
    c.run = [x] { dist::broadcast(*x, 0); };
    c.check = [x] { return all_equal(*x, 1); };
  } else if (op == "reduce") {
    c.run = [x] { dist::reduce(*x, 0); };
    c.check = [x, sum, rank] { return rank != 0 || all_equal(*x, sum); };
  } else if (op == "all_gather") {
    auto outs = std::make_shared<std::vector<tensor>>();
    for (int r = 0; r < world; ++r)
      outs->push_back(empty({part}));
    c.run = [x, outs, part] { dist::all_gather(*outs, x->narrow(0, 0, part)); };
    c.check = [outs] {
      for (size_t r = 0; r < outs->size(); ++r)
        if (!all_equal((*outs)[r], double(r + 1)))
          return false;
      return true;
    };
  } else if (op == "reduce_scatter") {
    auto out = std::make_shared<tensor>(empty({part}));
    auto ins = std::make_shared<std::vector<tensor>>();
    for (int r = 0; r < world; ++r)
      ins->push_back(x->narrow(0, r * part, part));
    c.run = [out, ins] { dist::reduce_scatter(*out, *ins); };
    c.check = [out, sum] { return all_equal(*out, sum); };
  } else if (op == "all_to_all") {
    // Chunk r of rank q holds q * world + r + 1; rank r receives chunk r of every q.
    auto out = std::make_shared<tensor>(empty({n}));
    auto ins = std::make_shared<std::vector<tensor>>(),
         outs = std::make_shared<std::vector<tensor>>();
    for (int r = 0; r < world; ++r) {
      ins->push_back(x->narrow(0, r * part, part));
      outs->push_back(out->narrow(0, r * part, part));
    }
    c.fill = [ins, rank, world] {
      for (int r = 0; r < world; ++r)
        (*ins)[size_t(r)].fill_(double(rank * world + r + 1));
    };
    c.run = [ins, outs] { dist::all_to_all(*outs, *ins); };
    c.check = [outs, rank, world] {
      for (int q = 0; q < world; ++q)
        if (!all_equal((*outs)[size_t(q)], double(q * world + rank + 1)))
          return false;
      return true;
    };
  } else { // send_recv: a ring, each rank sending to the next and receiving from the one before
    auto in = std::make_shared<tensor>(empty({n}));
    const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
    c.run = [x, in, next, prev] {
      dist::work s = dist::isend(*x, next);
      dist::work r = dist::irecv(*in, prev);
      s.wait();
      r.wait();
    };
    c.check = [in, prev] { return all_equal(*in, prev + 1); };
  }
  return c;
}

void run_rank(const collectives_options& opts, std::ostream& out) {
  dist::init_process_group({.backend = opts.backend, .timeout = std::chrono::seconds(120)});
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const std::vector<std::string>& ops = opts.ops.empty() ? kOps : opts.ops;
  std::vector<int64_t> sizes;
  for (int64_t s = 8; s < (int64_t(64) << 20) && s <= opts.max_bytes; s *= 4)
    sizes.push_back(s);
  if (opts.max_bytes >= (int64_t(64) << 20))
    sizes.push_back(int64_t(64) << 20);
  std::string failed;
  for (int64_t size : sizes) {
    const int64_t n = std::max<int64_t>(world, size / 4 / world * world);
    for (const std::string& op : ops) {
      collective c = make(op, n, rank, world);
      c.fill();
      for (int i = 0; i < 3; ++i)
        c.run();
      const int iters = size >= (int64_t(16) << 20) ? 5 : 20;
      std::vector<double> ts;
      for (int i = 0; i < iters; ++i) {
        dist::barrier();
        const auto t0 = std::chrono::steady_clock::now();
        c.run();
        ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(ts.begin(), ts.end());
      c.fill();
      c.run();
      // Every rank's verdict: the minimum of the ranks' 1 (right) or 0 (wrong).
      tensor ok = full({1}, c.check() ? int64_t(1) : int64_t(0), {.dtype = dtype::int64});
      dist::all_reduce(ok, dist::reduce_op::min);
      const bool right = ok.item<int64_t>() == 1;
      if (!right && failed.empty())
        failed = op + " of " + std::to_string(n * 4) + " bytes";
      if (rank == 0) {
        const double med = ts[ts.size() / 2], alg = double(n * 4) / med / 1e9;
        out << "coll op=" << op << " backend=actorch"
            << (opts.backend == "gloo" ? "" : "-" + opts.backend) << " world=" << world
            << " bytes=" << n * 4 << std::fixed << std::setprecision(1) << " time_us=" << med * 1e6
            << " p99_us=" << ts.back() * 1e6 << std::setprecision(3) << " algbw_GBps=" << alg
            << " busbw_GBps=" << alg * bus_factor(op, world) << " check=" << (right ? "ok" : "FAIL")
            << std::endl;
        out.unsetf(std::ios::floatfield);
      }
    }
  }
  dist::barrier();
  dist::destroy_process_group();
  ACTORCH_CHECK(failed.empty(), "bench collectives: a wrong result: ", failed);
}

} // namespace

void run_collectives(const collectives_options& opts, std::ostream& out) {
  for (const std::string& op : opts.ops)
    ACTORCH_CHECK(std::find(kOps.begin(), kOps.end(), op) != kOps.end(),
                  "bench collectives: unknown op ", op);
  run_as_ranks(opts.world, [&] { run_rank(opts, out); });
}

} // namespace actorch::bench
