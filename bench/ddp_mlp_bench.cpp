// `actorch bench ddp-mlp`: the training step of WORKLOADS.md's ddp-mlp model, forward,
// cross-entropy, backward and an SGD step on a fixed random batch per replica.
// - mode=single: one replica on the calling thread (world 1), the limit the data-parallel
//   modes are measured against;
// - mode=actors: `world` trainer actors in this process (gradients summed in shared memory);
// - mode=process: `world` processes (forked through the launcher's spawn), one trainer actor
//   each, exchanging gradients through the comm actor over Gloo;
// - mode=dp: one model wrapped in nn::data_parallel with `world` replicas (torch's
//   DataParallel), fed the `world` replicas' batches concatenated: the same samples per step;
// - mode=independent: `world` processes each running mode=single, no communication: the
//   floor that sharing the machine's caches and memory bus puts under the modes above.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <sstream>

#include <unistd.h>

#include "actors/data_parallel.hpp"
#include "actors/trainer.hpp"
#include "bench/bench.hpp"
#include "comm/distributed.hpp"
#include "comm/launch/launcher.hpp"
#include "core/core.hpp"
#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "core/optim/sgd.hpp"

namespace actorch::bench {

namespace {

std::shared_ptr<nn::sequential> mlp(const ddp_mlp_options& o, generator& gen) {
  auto m = std::make_shared<nn::sequential>(std::initializer_list<std::shared_ptr<nn::module>>{
      std::make_shared<nn::linear>(784, o.hidden, true, &gen), std::make_shared<nn::relu>()});
  for (int64_t l = 0; l < o.depth; ++l) {
    m->push_back(std::make_shared<nn::linear>(o.hidden, o.hidden, true, &gen));
    m->push_back(std::make_shared<nn::relu>());
  }
  m->push_back(std::make_shared<nn::linear>(o.hidden, 10, true, &gen));
  return m;
}

void print_line(const ddp_mlp_options& o, double seconds_per_step, double loss, std::ostream& out) {
  out << "ddp-mlp mode=" << o.mode << " world=" << o.world << " batch=" << o.batch;
  if (o.device != "cpu")
    out << " device=" << o.device;
  if (o.hidden != 1024 || o.depth != 1)
    out << " hidden=" << o.hidden << " depth=" << o.depth;
  if (o.bucket_cap_mb != 25 || !o.adaptive_buckets)
    out << " bucket_cap_mb=" << o.bucket_cap_mb << " adaptive_buckets=" << o.adaptive_buckets;
  if ((o.mode == "actors" || o.mode == "process") && !o.zero_redundancy)
    out << " zero_redundancy=0";
  out << " ms_per_step=" << seconds_per_step * 1e3
      << " samples_per_s=" << double(o.batch * o.world) / seconds_per_step << " loss=" << loss
      << std::endl;
}

// The step of one model on the calling thread (`forward` gives its output for x), timed after
// the warm-up steps; prints the line.
void run_on_this_thread(const ddp_mlp_options& o, nn::module& model,
                        const std::function<tensor(const tensor&)>& forward, const tensor& x,
                        const tensor& y, std::ostream& out) {
  optim::sgd opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  // As PyTorch's peers: the loss is read once, after the timed steps (on a GPU, reading it
  // waits for the queued steps to finish, so the clock stops after the last one ran).
  tensor loss;
  auto step = [&] {
    opt.zero_grad();
    loss = nn::functional::cross_entropy(forward(x), y);
    loss.backward();
    opt.step();
  };
  for (int64_t i = 0; i < o.warmup; ++i)
    step();
  if (loss.defined())
    (void)loss.item<double>();
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < o.steps; ++i)
    step();
  const double last_loss = loss.item<double>();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                   double(o.steps);
  print_line(o, s, last_loss, out);
}

void run_single(const ddp_mlp_options& o, std::ostream& out) {
  generator gen(0);
  auto model = mlp(o, gen);
  const device dev(o.device);
  model->to(dev);
  const tensor x = randn({o.batch, 784}, {.device = dev}, &gen);
  const tensor y = randint(0, 10, {o.batch}, {.device = dev}, &gen);
  run_on_this_thread(
      o, *model, [&](const tensor& in) { return (*model)(in); }, x, y, out);
}

// `world` processes, each the single mode's step on its own with no communication at all:
// what running that many replicas at once costs on this machine (caches, memory bandwidth),
// the floor under every data-parallel mode's step. Rank 0 prints.
void run_independent(const ddp_mlp_options& o, std::ostream& out) {
  out.flush();
  dist::spawn(
      [&](int rank) {
        std::ostringstream mine;
        run_single(o, mine);
        if (rank == 0)
          out << mine.str() << std::flush;
      },
      int(o.world));
}

void run_dp(const ddp_mlp_options& o, std::ostream& out) {
  generator gen(0);
  auto model = mlp(o, gen);
  std::vector<int> ids;
  std::vector<tensor> xs, ys;
  for (int64_t r = 0; r < o.world; ++r) { // the other modes' per-replica batches, as one
    ids.push_back(int(r));
    generator g{uint64_t(r)};
    xs.push_back(randn({o.batch, 784}, {}, &g));
    ys.push_back(randint(0, 10, {o.batch}, {}, &g));
  }
  const tensor x = cat(xs, 0), y = cat(ys, 0);
  nn::data_parallel dp(model, ids);
  run_on_this_thread(
      o, *model, [&](const tensor& in) { return dp(in); }, x, y, out);
}

// The spec both data-parallel modes run: fixed inputs per replica (seeded by its rank), the
// timed steps following the warm-up ones in one epoch.
actors::trainer_spec spec_of(const ddp_mlp_options& o, double* last_loss) {
  actors::trainer_spec s;
  s.make_model = [o](const actors::replica_info&) {
    generator gen(0);
    return mlp(o, gen);
  };
  s.ddp.bucket_cap_mb = o.bucket_cap_mb;
  s.ddp.adaptive_buckets = o.adaptive_buckets;
  if (!o.zero_redundancy)
    s.zero_redundancy = false;
  s.make_optimizer = [](nn::module& m) {
    return std::make_unique<optim::sgd>(m.parameters(),
                                        optim::sgd_options{.lr = 0.01, .momentum = 0.9});
  };
  s.forward = [last_loss](dist::distributed_data_parallel& m, const data::sample& b) {
    const tensor loss = nn::functional::cross_entropy(m(b[0].as_tensor()), b[1].as_tensor());
    if (m.group().rank() == 0)
      *last_loss = loss.item<double>();
    return actors::step_result{loss, b[0].as_tensor().size(0), -1};
  };
  // Each replica's fixed batch, made up front (replica r's from seed r).
  std::vector<data::sample> fixed;
  for (int64_t r = 0; r < o.world; ++r) {
    generator g{uint64_t(r)};
    const tensor x = randn({o.batch, 784}, {}, &g);
    fixed.push_back(data::sample::make_tuple(
        {data::sample(x), data::sample(randint(0, 10, {o.batch}, {}, &g))}));
  }
  s.batch_fn = [fixed](const actors::replica_info& r, int64_t) { return fixed.at(size_t(r.rank)); };
  s.steps_per_epoch = o.warmup + o.steps;
  s.device = device(o.device);
  return s;
}

// Seconds per timed step from local replica 0's step end times.
double timed_step(const ddp_mlp_options& o, const actors::job_report& r) {
  const auto& t = r.step_end_times;
  ACTORCH_CHECK(int64_t(t.size()) == o.warmup + o.steps, "ddp-mlp: expected ", o.warmup + o.steps,
                " steps but replica 0 ran ", t.size());
  const auto begin = o.warmup > 0 ? t[size_t(o.warmup - 1)] : t.front();
  const int64_t n = o.warmup > 0 ? o.steps : o.steps - 1;
  return std::chrono::duration<double>(t.back() - begin).count() / double(std::max<int64_t>(n, 1));
}

void run_actors(const ddp_mlp_options& o, std::ostream& out) {
  double loss = 0;
  const auto r =
      actors::train_data_parallel(spec_of(o, &loss), {.num_local = int(o.world), .trace = o.trace});
  print_line(o, timed_step(o, r), loss, out);
}

void run_process(const ddp_mlp_options& o, std::ostream& out) {
  const auto store = std::filesystem::temp_directory_path() /
                     ("actorch-ddp-mlp-" + std::to_string(::getpid()) + ".store");
  std::filesystem::remove(store);
  out.flush();
  dist::spawn(
      [&](int rank) {
        dist::init_process_group({.backend = device(o.device).is_cuda() ? "nccl" : "gloo",
                                  .init_method = "file://" + store.string(),
                                  .world_size = int(o.world),
                                  .rank = rank,
                                  .timeout = std::chrono::milliseconds(60000)});
        double loss = 0;
        actors::trainer_spec spec = spec_of(o, &loss);
        if (spec.device.is_cuda()) // each process's replica on its NCCL group's GPU
          spec.device = dist::world()->collective_device();
        const auto r =
            actors::train_data_parallel(spec, {.process_group = dist::world(), .trace = o.trace});
        if (rank == 0)
          print_line(o, timed_step(o, r), loss, out);
        dist::destroy_process_group();
      },
      int(o.world));
  std::filesystem::remove(store);
}

} // namespace

void run_ddp_mlp(const ddp_mlp_options& o, std::ostream& out) {
  ACTORCH_CHECK(o.mode != "single" || o.world == 1, "ddp-mlp: mode=single runs world 1, not ",
                o.world);
  if (o.mode == "single")
    run_single(o, out);
  else if (o.mode == "independent")
    run_independent(o, out);
  else if (o.mode == "actors")
    run_actors(o, out);
  else if (o.mode == "process")
    run_process(o, out);
  else if (o.mode == "dp")
    run_dp(o, out);
  else
    ACTORCH_FAIL("ddp-mlp: unknown mode '", o.mode,
                 "' (single, independent, actors, process or dp)");
}

} // namespace actorch::bench
