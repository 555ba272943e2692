// The sharded optimizer step of trainer actors (trainer_spec::zero_redundancy, Note [Sharded
// step]): the same bits as DDP's all-reduce and a whole step per actor, in the model and in the
// optimizer state a checkpoint holds, with SGD's momentum and Adam, at 2, 3 and 5 actors (5:
// more actors than the toy model has parameters, so some shards are empty); checkpoints that
// cross between the two; and the errors where it cannot apply. Then the same across forked
// processes of one actor each (Note [Sharded step across processes]), and the replicas of one
// process sharing the averaging (Note [Shared averaging]).
#include <catch2/catch.hpp>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "actors/trainer.hpp"
#include "actors/trainer/sharded_step.hpp"
#include "comm/ddp/comm_hooks.hpp"
#include "comm/distributed.hpp"
#include "comm/launch/launcher.hpp"
#include "core/autograd/node.hpp"
#include "core/nn/functional.hpp"
#include "core/optim/sgd.hpp"
#include "core/serialize/safetensors.hpp"
#include "tests/actors/toy_job.hpp"
#include "tests/core/files.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::actors;
using Catch::Contains;
using test::toy_spec;

namespace {

std::string scratch(const std::string& name) {
  return (test::scratch_dir("sharded_step") / name).string();
}

// Every tensor of a checkpoint (model.* and optim.*) by name, and its optimizer metadata.
struct saved {
  std::map<std::string, std::vector<double>> tensors;
  std::map<std::string, std::string> optim_metadata;
};

saved saved_in(const std::string& path) {
  saved s;
  const safetensors_file f = load_safetensors(path);
  for (const auto& [n, t] : f.tensors)
    s.tensors[n] = test::values_of(t);
  for (const auto& [k, v] : f.metadata)
    if (k.rfind("optim.", 0) == 0)
      s.optim_metadata[k] = v;
  return s;
}

// The two checkpoints hold the same tensors, bit for bit, with every parameter's optimizer
// state (the toy model's 4; Adam's 3 entries each, SGD's momentum) and the same metadata.
void check_equal_checkpoints(const std::string& plain, const std::string& sharded, bool adam) {
  const saved x = saved_in(plain), y = saved_in(sharded);
  REQUIRE(x.tensors.size() == y.tensors.size());
  size_t optim_entries = 0;
  for (const auto& [name, values] : x.tensors) {
    INFO(name);
    REQUIRE(y.tensors.count(name));
    CHECK(y.tensors.at(name) == values); // exactly
    optim_entries += name.rfind("optim.", 0) == 0;
  }
  CHECK(optim_entries == (adam ? 4u * 3u : 4u)); // every parameter's state, from every shard
  CHECK(x.optim_metadata == y.optim_metadata);
}

trainer_spec with_adam(trainer_spec s) {
  s.make_optimizer = [](nn::module& m) {
    return std::make_unique<optim::adam>(m.parameters(), optim::adam_options{.lr = 0.01});
  };
  return s;
}

// Runs spec() in `world` forked processes of one trainer actor each (rendezvous through a file
// store under `name`) and requires every process's job_report::zero_redundancy to be `sharded`.
// Rank 0 writes the spec's checkpoint. A process's error text goes to `name`.error. Call it
// while this process has no threads (spawn's precondition).
void in_processes(const std::string& name, int world, const std::function<trainer_spec()>& spec,
                  bool sharded, const std::function<void()>& before = {},
                  const std::function<void()>& after = {}) {
  const std::string store = scratch(name + ".store"), error_file = scratch(name + ".error");
  std::filesystem::remove(store);
  for (int rank = 0; rank < world; ++rank) // an earlier run's
    std::filesystem::remove(error_file + "." + std::to_string(rank));
  dist::spawn(
      [&](int rank) {
        if (before)
          before();
        try {
          dist::init_process_group({.init_method = "file://" + store,
                                    .world_size = world,
                                    .rank = rank,
                                    .timeout = std::chrono::milliseconds(20000)});
          const job_report r = train_data_parallel(spec(), {.process_group = dist::world()});
          ACTORCH_CHECK(r.zero_redundancy == sharded, "rank ", rank, ": zero_redundancy ",
                        r.zero_redundancy, ", expected ", sharded);
          dist::destroy_process_group();
          if (after)
            after();
        } catch (const std::exception& e) {
          std::ofstream(error_file + "." + std::to_string(rank)) << e.what();
          throw;
        }
      },
      world);
}

// The error text rank `rank` of in_processes(name, ...) wrote.
std::string error_of_rank(const std::string& name, int rank) {
  std::ifstream in(scratch(name + ".error." + std::to_string(rank)));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

} // namespace

TEST_CASE("trainer processes: the sharded step across processes ends bit for bit where DDP's "
          "all-reduce does, model and optimizer state") {
  const int world = GENERATE(2, 3);
  const bool adam = GENERATE(false, true);
  INFO(world << " processes, " << (adam ? "Adam" : "SGD with momentum"));
  const std::string tag = "p" + std::to_string(world) + (adam ? "_adam" : "_sgd");
  const std::string plain = scratch("plain_" + tag + ".safetensors"),
                    sharded = scratch("sharded_" + tag + ".safetensors");
  auto spec_of = [&](const std::string& path, std::optional<bool> zero) {
    return [=] {
      trainer_spec s = toy_spec(24, path);
      s.zero_redundancy = zero;
      return adam ? with_adam(s) : s;
    };
  };
  in_processes("plain_" + tag, world, spec_of(plain, false), false);
  in_processes("sharded_" + tag, world, spec_of(sharded, std::nullopt), true); // the default
  check_equal_checkpoints(plain, sharded, adam);
}

TEST_CASE("trainer processes: a model that outlives a sharded job gets its gradients in .grad, "
          "as a model that never joined one") {
  // Each process keeps the model its make_model made; after the job, backward on it must
  // neither write into the job's shared gradient block nor run the job's publishing hook
  // (whose step object is gone), and must give the gradients of a plain copy of the model.
  static std::shared_ptr<nn::module> kept;
  const auto spec = [] {
    trainer_spec s = toy_spec(32, "");
    const auto make = s.make_model;
    s.make_model = [make](const replica_info& r) { return kept = make(r); };
    return s;
  };
  const auto after = [] {
    generator g(11);
    const tensor x = randn({16, 8}, {}, &g);
    const tensor y = randint(0, 4, {16}, {}, &g);
    const std::vector<tensor> params = kept->parameters();
    std::vector<tensor> copies;
    for (const tensor& p : params) {
      ACTORCH_CHECK(!autograd::grad_destination(p).defined(),
                    "a parameter still has the job's gradient destination");
      copies.push_back(p.detach().clone().requires_grad_());
    }
    kept->zero_grad();
    nn::functional::cross_entropy((*kept)(x), y).backward();
    // The same MLP by hand over the copies: linear, relu, linear.
    const tensor h = nn::functional::relu(nn::functional::linear(x, copies[0], copies[1]));
    nn::functional::cross_entropy(nn::functional::linear(h, copies[2], copies[3]), y).backward();
    for (size_t k = 0; k < params.size(); ++k)
      ACTORCH_CHECK(test::values_of(params[k].grad()) == test::values_of(copies[k].grad()),
                    "parameter ", k, "'s gradient differs from a plain copy's");
    kept.reset();
  };
  in_processes("outlives", 2, spec, true, {}, after);
  for (int rank = 0; rank < 2; ++rank)
    CHECK(error_of_rank("outlives", rank).empty());
}

TEST_CASE("trainer processes: a checkpoint of the sharded step across processes resumes "
          "unsharded and in trainer actors, and the other way round, ending where one run "
          "does") {
  const std::string full = scratch("pcross_full.safetensors");
  in_processes(
      "pcross_full", 2,
      [&] {
        trainer_spec s = toy_spec(32, full);
        s.zero_redundancy = false;
        return s;
      },
      false);
  for (const bool first_sharded : {false, true}) { // the one in this process last (spawn)
    INFO("first part sharded across processes: " << first_sharded);
    const std::string part =
        scratch(std::string("pcross_part_") + (first_sharded ? "s" : "p") + ".safetensors");
    in_processes(
        "pcross_first", 2,
        [&] {
          trainer_spec s = toy_spec(32, part);
          s.max_steps = 6; // mid-epoch 1, with a checkpoint every 3 steps
          s.checkpoint_every = 3;
          s.zero_redundancy = first_sharded;
          return s;
        },
        first_sharded);
    trainer_spec second = toy_spec(32, part);
    second.resume = part;
    if (first_sharded) { // in 2 trainer actors of one process, unsharded
      second.zero_redundancy = false;
      CHECK_FALSE(train_data_parallel(second, {.num_local = 2}).zero_redundancy);
    } else { // sharded across processes again
      in_processes(
          "pcross_second", 2, [&] { return second; }, true);
    }
    CHECK(saved_in(part).tensors == saved_in(full).tensors);
  }
}

TEST_CASE("trainer processes: a sharded job's checkpoint at 3 processes resumes sharded at 2, "
          "ending where the unsharded pair of runs does") {
  // The checkpoint holds the whole state in the unsharded layout, so the shards of another
  // world size take their runs of it.
  std::map<bool, saved> ends;
  for (const bool sharded : {false, true}) {
    INFO("sharded: " << sharded);
    const std::string path =
        scratch(std::string("pworlds_") + (sharded ? "s" : "p") + ".safetensors");
    const auto spec = [&](int epochs, bool resume) {
      return [=] {
        trainer_spec s = with_adam(toy_spec(24, path));
        s.epochs = epochs;
        s.zero_redundancy = sharded;
        if (resume)
          s.resume = path;
        return s;
      };
    };
    in_processes("pworlds_3", 3, spec(1, false), sharded);
    in_processes("pworlds_2", 2, spec(2, true), sharded);
    ends[sharded] = saved_in(path);
  }
  CHECK(ends[true].tensors == ends[false].tensors);
  CHECK(ends[true].optim_metadata == ends[false].optim_metadata);
}

TEST_CASE("trainer processes: without memory the processes all map, unset falls back to DDP's "
          "all-reduce and zero_redundancy = true is an error naming why") {
  const auto no_shm = [] { ::setenv("ACTORCH_GLOO_SHM", "0", 1); };
  in_processes(
      "pnone_auto", 2, [] { return toy_spec(32, ""); }, false, no_shm);
  const std::string why = "zero_redundancy = true shards the step across processes through "
                          "memory they all map, which needs every process on one host";
  std::string spawned;
  try {
    in_processes(
        "pnone_required", 2,
        [] {
          trainer_spec s = toy_spec(32, "");
          s.zero_redundancy = true;
          return s;
        },
        true, no_shm);
  } catch (const std::exception& e) {
    spawned = e.what();
  }
  CHECK_THAT(spawned, Contains("exited with status 1"));
  // spawn stops the other rank once one fails: it may be gone before its own check, having
  // written nothing (an ASan run of CI met that). Every rank that got there says why.
  int wrote = 0;
  for (int rank = 0; rank < 2; ++rank)
    if (const std::string e = error_of_rank("pnone_required", rank); !e.empty()) {
      ++wrote;
      CHECK_THAT(e, Contains(why));
    }
  CHECK(wrote >= 1);
}

TEST_CASE("trainer actors: the sharded step ends bit for bit where DDP's all-reduce does, model "
          "and optimizer state") {
  const int actors = GENERATE(2, 3, 5);
  const bool adam = GENERATE(false, true);
  INFO(actors << " actors, " << (adam ? "Adam" : "SGD with momentum"));
  const std::string tag = std::to_string(actors) + (adam ? "_adam" : "_sgd");
  const std::string plain = scratch("plain_" + tag + ".safetensors"),
                    sharded = scratch("sharded_" + tag + ".safetensors");
  auto spec_of = [&](const std::string& path) {
    trainer_spec s = toy_spec(24, path);
    return adam ? with_adam(s) : s;
  };
  trainer_spec off = spec_of(plain);
  off.zero_redundancy = false;
  const job_report a = train_data_parallel(off, {.num_local = actors});
  const job_report b = train_data_parallel(spec_of(sharded), {.num_local = actors}); // default
  CHECK_FALSE(a.zero_redundancy);
  CHECK(b.zero_redundancy);
  check_equal_checkpoints(plain, sharded, adam);
  for (size_t e = 0; e < a.epochs.size(); ++e)
    CHECK(a.epochs[e].loss == b.epochs[e].loss);
}

TEST_CASE("trainer actors: a sharded job's checkpoint resumes unsharded, and the other way round, "
          "ending where one run does") {
  const std::string full = scratch("cross_full.safetensors");
  trainer_spec whole = toy_spec(32, full);
  whole.zero_redundancy = false;
  train_data_parallel(whole, {.num_local = 2});
  for (const bool first_sharded : {true, false}) {
    INFO("first part sharded: " << first_sharded);
    const std::string part =
        scratch(std::string("cross_part_") + (first_sharded ? "s" : "p") + ".safetensors");
    trainer_spec first = toy_spec(32, part);
    first.max_steps = 6; // mid-epoch 1, with a checkpoint every 3 steps
    first.checkpoint_every = 3;
    first.zero_redundancy = first_sharded;
    CHECK(train_data_parallel(first, {.num_local = 2}).zero_redundancy == first_sharded);
    trainer_spec second = toy_spec(32, part);
    second.resume = part;
    second.zero_redundancy = !first_sharded;
    CHECK(train_data_parallel(second, {.num_local = 2}).zero_redundancy == !first_sharded);
    CHECK(saved_in(part).tensors == saved_in(full).tensors);
  }
}

TEST_CASE("trainer actors: zero_redundancy = true where the step cannot be sharded is an error, "
          "unset, the job falls back to DDP's all-reduce") {
  trainer_spec s = toy_spec(32, "");
  s.zero_redundancy = true;
  CHECK_THROWS_WITH(train_data_parallel(s, {.num_local = 1}),
                    Contains("zero_redundancy = true shards the step over the trainer actors of a "
                             "job of one process, or over processes of one actor each, on the "
                             "CPU, without a comm_hook; this job has 1 actors per process"));
  s.comm_hook = [] { return dist::hooks::fp16_compress_hook(); };
  CHECK_THROWS_WITH(train_data_parallel(s, {.num_local = 2}), Contains(", a comm_hook"));
  s = toy_spec(32, "");
  s.zero_redundancy = true;
  s.make_optimizer = [](nn::module& m) { // an optimizer over part of the model only
    std::vector<tensor> ps = m.parameters();
    ps.pop_back();
    return std::make_unique<optim::sgd>(ps, optim::sgd_options{.lr = 0.1});
  };
  CHECK_THROWS_WITH(train_data_parallel(s, {.num_local = 2}),
                    Contains("zero_redundancy = true needs an optimizer over the model's "
                             "parameters, in order"));
  s.zero_redundancy.reset(); // unset: the same job runs with DDP's all-reduce
  CHECK_FALSE(train_data_parallel(s, {.num_local = 2}).zero_redundancy);
  s = toy_spec(32, "");
  s.comm_hook = [] { return dist::hooks::fp16_compress_hook(); };
  CHECK_FALSE(train_data_parallel(s, {.num_local = 2}).zero_redundancy);
}

namespace {

// Two linear layers; forward(x, false) stops after the first (the second's parameters unused).
class two_layers : public nn::module {
public:
  two_layers() {
    generator g(11);
    a_ = register_module("a", std::make_shared<nn::linear>(64, 256, true, &g));
    b_ = register_module("b", std::make_shared<nn::linear>(256, 64, true, &g));
  }
  tensor forward(const tensor& x) override { return forward(x, true); }
  tensor forward(const tensor& x, bool whole) {
    const tensor h = (*a_)(x).relu();
    return whole ? (*b_)(h) : h;
  }

private:
  std::shared_ptr<nn::linear> a_, b_;
};

// Note [Shared averaging]'s job: two replicas of two_layers for kSteps of SGD with momentum;
// with `unused`, replica 1 leaves the last layer out of step 1. Replica 1's shard holds the
// whole last layer (its weight and bias, an item each).
struct shared_averaging_job {
  static constexpr int kSteps = 3;
  bool unused = false;
  std::vector<tensor> xs, ys;

  explicit shared_averaging_job(bool unused_last_layer) : unused(unused_last_layer) {
    generator g(12);
    for (int r = 0; r < 2 * kSteps; ++r) {
      xs.push_back(randn({16, 64}, {}, &g));
      ys.push_back(randn({16, 64}, {}, &g));
    }
  }
  static std::unique_ptr<optim::optimizer> make_sgd(nn::module& m) {
    return std::make_unique<optim::sgd>(m.parameters(),
                                        optim::sgd_options{.lr = 0.1, .momentum = 0.9});
  }
  // Replica r's loss in step s.
  tensor loss(two_layers& m, int r, int s) const {
    const tensor x = xs[size_t(s * 2 + r)], y = ys[size_t(s * 2 + r)];
    if (unused && r == 1 && s == 1)
      return m.forward(x, false).mean();
    return nn::functional::mse_loss(m(x), y);
  }
  // The parameters after every step: each replica's gradients on a whole copy (zeros where it
  // has none, as DDP reduces them), averaged as the all-reduce does ((g0 + g1) / 2), one
  // unsharded SGD step.
  std::vector<std::vector<double>> reference() const {
    two_layers ref;
    std::vector<two_layers> copies(2);
    auto opt = make_sgd(ref);
    for (int s = 0; s < kSteps; ++s) {
      std::vector<std::vector<tensor>> grads;
      for (int r = 0; r < 2; ++r) {
        const auto params = copies[size_t(r)].parameters();
        {
          no_grad guard;
          for (size_t k = 0; k < params.size(); ++k)
            tensor(params[k]).copy_(ref.parameters()[k]);
        }
        zero_grads(params);
        loss(copies[size_t(r)], r, s).backward();
        std::vector<tensor> mine;
        for (const tensor& p : params)
          mine.push_back(p.grad().defined() ? p.grad().clone() : zeros(p.sizes()));
        grads.push_back(std::move(mine));
      }
      const auto params = ref.parameters();
      for (size_t k = 0; k < params.size(); ++k)
        tensor(params[k]).set_grad(grads[0][k].add(grads[1][k]).div(2.0));
      opt->step();
    }
    std::vector<std::vector<double>> out;
    for (const tensor& p : ref.parameters())
      out.push_back(test::values_of(p));
    return out;
  }
  // Replica r's steps with `step`: replica 1 sleeps in its backward once its last layer's
  // gradients are marked (its hooks run after the step's own), or, with `exit_in_step` >= 0,
  // exits there in that step (a process killed mid-backward).
  void run(actors::sharded_step& step, two_layers& model, int i, int r,
           int exit_in_step = -1) const {
    auto opt = step.join(i, model, make_sgd);
    const auto params = model.parameters();
    auto marked = std::make_shared<std::atomic<int>>(0);
    auto at = std::make_shared<int>(0);
    if (r == 1)
      for (size_t k : {size_t(2), size_t(3)})
        tensor(params[k]).register_post_accumulate_grad_hook(
            [marked, at, exit_in_step](const tensor&) {
              if (++*marked % 2 != 0)
                return;
              if (*at == exit_in_step)
                ::_exit(3);
              std::this_thread::sleep_for(std::chrono::milliseconds(300));
            });
    for (int s = 0; s < kSteps; ++s) {
      *at = s;
      zero_grads(params);
      loss(model, r, s).backward();
      step.average_shard(i);
      if (opt)
        opt->step();
      step.stepped(i);
    }
  }
};

std::vector<std::vector<double>> values_of_parameters(nn::module& m) {
  std::vector<std::vector<double>> out;
  for (const tensor& p : m.parameters())
    out.push_back(test::values_of(p));
  return out;
}

} // namespace

TEST_CASE("trainer actors: the replica whose backward ends first averages the others' pieces "
          "meanwhile, and the step's bits stay the all-reduce's") {
  // Note [Shared averaging]
  // ~~~~~~~~~~~~~~~~~~~~~~~
  // While replica 1 sleeps in its backward, replica 0, done, averages
  // the last layer's items (replica 1's shard) before replica 1 reaches them. With `unused`,
  // replica 1's pieces of the last layer get the average of replica 0's gradient and zeros,
  // in a spare, in step 1.
  const bool unused = GENERATE(false, true);
  INFO((unused ? "replica 1 leaves the last layer unused in step 1" : "every parameter used"));
  const shared_averaging_job job(unused);
  std::vector<two_layers> models(2);
  auto step = std::make_shared<actors::sharded_step>(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        job.run(*step, models[size_t(r)], r, r);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
        step->abort(std::current_exception());
      }
    });
  for (auto& t : threads)
    t.join();
  CHECK(errors[0].empty());
  CHECK(errors[1].empty());
  CHECK(step->averaged_for_others(0) >= 2 * (unused ? job.kSteps - 1 : job.kSteps));
  INFO("replica 1 averaged " << step->averaged_for_others(1) << " of replica 0's items");
  CHECK(values_of_parameters(models[0]) == job.reference()); // exactly
}

namespace {

// shared_averaging_job in two forked processes of one replica each over a file store, each
// process's outcome (its error, or what it checked) in `name`.rank.
void shared_averaging_in_processes(const std::string& name, bool unused, int exit_in_step) {
  const std::string store = scratch(name + ".store");
  std::filesystem::remove(store);
  for (int rank = 0; rank < 2; ++rank) // an earlier run's
    std::filesystem::remove(scratch(name + "." + std::to_string(rank)));
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::string outcome = "ok";
      try {
        dist::init_process_group({.init_method = "file://" + store,
                                  .world_size = 2,
                                  .rank = rank,
                                  .timeout = std::chrono::milliseconds(20000)});
        const shared_averaging_job job(unused);
        two_layers model;
        auto step = std::make_shared<actors::sharded_step>(dist::world());
        job.run(*step, model, 0, rank, exit_in_step);
        ACTORCH_CHECK(step->active(), "the step was not sharded");
        const int slept = unused ? job.kSteps - 1 : job.kSteps; // steps rank 1 slept in
        ACTORCH_CHECK(rank != 0 || step->averaged_for_others(0) >= 2 * slept, "rank 0 averaged ",
                      step->averaged_for_others(0), " of rank 1's items, expected at least ",
                      2 * slept);
        ACTORCH_CHECK(values_of_parameters(model) == job.reference(),
                      "the parameters differ from the all-reduce's");
        dist::destroy_process_group();
      } catch (const std::exception& e) {
        outcome = e.what();
      }
      std::ofstream(scratch(name + "." + std::to_string(rank))) << outcome;
      ::_exit(outcome == "ok" ? 0 : 1);
    }
    pids.push_back(pid);
  }
  for (const pid_t pid : pids) { // each within 60 s: a wait that hangs fails the test
    int status = 0;
    for (int tick = 0; ::waitpid(pid, &status, WNOHANG) == 0; ++tick) {
      if (tick == 6000) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        FAIL("a process of " << name << " had not ended after 60 s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

std::string outcome_of(const std::string& name, int rank) {
  std::ifstream in(scratch(name + "." + std::to_string(rank)));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

} // namespace

TEST_CASE("trainer processes: the process whose backward ends first averages the others' "
          "pieces meanwhile, the bits the all-reduce's, and a peer that exits mid-backward "
          "fails it at once") {
  // Note [Shared averaging] across processes, through the memory both map.
  SECTION("both finish") {
    const bool unused = GENERATE(false, true);
    INFO((unused ? "rank 1 leaves the last layer unused in step 1" : "every parameter used"));
    shared_averaging_in_processes("shared_averaging", unused, -1);
    CHECK(outcome_of("shared_averaging", 0) == "ok");
    CHECK(outcome_of("shared_averaging", 1) == "ok");
  }
  SECTION("rank 1 exits in its backward of step 1") {
    const auto t0 = std::chrono::steady_clock::now();
    shared_averaging_in_processes("shared_averaging_exit", false, 1);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(15)); // not the timeout
    CHECK_THAT(outcome_of("shared_averaging_exit", 0),
               Contains("rank 1 (pid") && Contains("has exited"));
  }
}
