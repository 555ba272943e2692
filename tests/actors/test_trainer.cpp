// Data-parallel training on trainer actors (actors/trainer.hpp): determinism across world
// sizes (2 actors in one process, 2 processes), checkpoint and mid-epoch resume, a failing
// replica, and a rank killed mid-training.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "actors/trainer.hpp"
#include "comm/distributed.hpp"
#include "comm/launch/launcher.hpp"
#include "core/core.hpp"
#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "core/optim/sgd.hpp"
#include "core/serialize/safetensors.hpp"
#include "tests/actors/toy_job.hpp"
#include "tests/core/files.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::actors;
using namespace std::chrono_literals;
using Catch::Contains;
using test::kSamples;
using test::toy_dataset;
using test::toy_spec;

namespace {

std::map<std::string, std::vector<double>> model_of(const std::string& checkpoint) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& [n, t] : load_safetensors(checkpoint).tensors)
    if (n.rfind("model.", 0) == 0)
      out[n] = test::values_of(t);
  return out;
}

void require_close(const std::map<std::string, std::vector<double>>& a,
                   const std::map<std::string, std::vector<double>>& b, double tol) {
  REQUIRE(a.size() == b.size());
  REQUIRE_FALSE(a.empty());
  for (const auto& [name, v] : a) {
    INFO(name);
    const auto& w = b.at(name);
    REQUIRE(v.size() == w.size());
    for (size_t i = 0; i < v.size(); ++i)
      REQUIRE(v[i] == Approx(w[i]).margin(tol));
  }
}

std::string scratch(const std::string& name) {
  return (test::scratch_dir("trainer") / name).string();
}

} // namespace

TEST_CASE("trainer actors: 2 actors of batch 32 in one process end where 1 of batch 64 does") {
  const std::string one = scratch("world1.safetensors"), two = scratch("actors2.safetensors");
  const job_report r1 = train_data_parallel(toy_spec(64, one), {.num_local = 1});
  int64_t steps = 0;
  const job_report r2 = train_data_parallel(
      toy_spec(32, two), {.num_local = 2, .on_progress = [&](const train_progress&) { ++steps; }});
  REQUIRE(steps == 2 * 2 * kSamples / 64); // 2 replicas x 2 epochs x 4 steps
  REQUIRE(r1.epochs.size() == 2);
  REQUIRE(r2.epochs.size() == 2);
  for (size_t e = 0; e < 2; ++e) {
    CHECK(r2.epochs[e].samples == kSamples);
    CHECK(r2.epochs[e].loss == Approx(r1.epochs[e].loss).epsilon(1e-5));
    CHECK(r2.epochs[e].accuracy == Approx(r1.epochs[e].accuracy));
  }
  require_close(model_of(one), model_of(two), 1e-5);
}

TEST_CASE("trainer actors: with sync_batchnorm, 2 actors of batch 32 with BatchNorm end where 1 "
          "of batch 64 does") {
  const auto with_bn = [](int64_t batch, const std::string& checkpoint) {
    trainer_spec s = toy_spec(batch, checkpoint);
    s.make_model = [](const replica_info& r) {
      generator g(100 + uint64_t(r.rank));
      return std::make_shared<nn::sequential>(std::initializer_list<std::shared_ptr<nn::module>>{
          std::make_shared<nn::linear>(8, 16, true, &g), std::make_shared<nn::batch_norm1d>(16),
          std::make_shared<nn::relu>(), std::make_shared<nn::linear>(16, 4, true, &g)});
    };
    s.sync_batchnorm = true;
    return s;
  };
  const std::string one = scratch("bn_world1.safetensors"), two = scratch("bn_actors2.safetensors");
  const job_report r1 = train_data_parallel(with_bn(64, one), {.num_local = 1});
  const job_report r2 = train_data_parallel(with_bn(32, two), {.num_local = 2});
  for (size_t e = 0; e < 2; ++e)
    CHECK(r2.epochs[e].loss == Approx(r1.epochs[e].loss).epsilon(1e-5));
  const auto m1 = model_of(one), m2 = model_of(two);
  REQUIRE(m2.count("model.1.running_mean")); // the statistics of the whole batch, not a half's
  require_close(m1, m2, 1e-5);
}

namespace {

// Trains toy_spec(batch) in 2 forked processes with `num_local` trainer actors each, and
// returns rank 0's final checkpoint. Call it first in a test, while this process has no
// threads (spawn's precondition).
std::string train_in_2_processes(const std::string& name, int64_t batch, int num_local) {
  const std::string out = scratch(name + ".safetensors");
  const std::string store = scratch(name + ".store");
  std::filesystem::remove(store);
  dist::spawn(
      [&](int rank) {
        dist::init_process_group(
            {.init_method = "file://" + store, .world_size = 2, .rank = rank, .timeout = 20000ms});
        train_data_parallel(toy_spec(batch, out),
                            {.num_local = num_local, .process_group = dist::world()});
        dist::destroy_process_group();
      },
      2);
  return out;
}

} // namespace

TEST_CASE("trainer actors: 2 processes of batch 32 end where 1 of batch 64 does") {
  const std::string two = train_in_2_processes("process2", 32, 1);
  const std::string one = scratch("process1.safetensors");
  train_data_parallel(toy_spec(64, one), {.num_local = 1});
  require_close(model_of(one), model_of(two), 1e-5);
}

TEST_CASE("trainer actors: 2 processes x 2 actors of batch 16 end where 1 of batch 64 does") {
  // Both levels at once: each process sums its 2 actors' buckets in shared memory, then its
  // comm actor all-reduces the sums across the processes over Gloo.
  const std::string four = train_in_2_processes("both4", 16, 2);
  const std::string one = scratch("both1.safetensors");
  train_data_parallel(toy_spec(64, one), {.num_local = 1});
  require_close(model_of(one), model_of(four), 1e-5);
}

TEST_CASE("trainer actors: a run resumed mid-epoch ends with the same numbers") {
  const std::string full = scratch("full.safetensors"), part = scratch("part.safetensors");
  auto spec = toy_spec(32, full);
  spec.loader.num_workers = 2;
  train_data_parallel(spec, {.num_local = 2});
  // Stop after 6 of 8 steps per replica... i.e. in the middle of epoch 1 (4 steps per epoch),
  // with a checkpoint every 3 steps.
  auto first = toy_spec(32, part);
  first.loader.num_workers = 2;
  first.max_steps = 6;
  first.checkpoint_every = 3;
  train_data_parallel(first, {.num_local = 2});
  auto second = toy_spec(32, part);
  second.loader.num_workers = 2;
  second.resume = part;
  const job_report r = train_data_parallel(second, {.num_local = 2});
  REQUIRE(r.epochs.size() == 1); // only epoch 1 is left, resumed at its step 2
  require_close(model_of(full), model_of(part), 0);
}

TEST_CASE("trainer actors: a run resumed from an epoch-end checkpoint ends the same") {
  const std::string full = scratch("full_e.safetensors"), part = scratch("part_e.safetensors");
  auto spec = toy_spec(32, full);
  spec.loader.num_workers = 1;
  spec.epochs = 3;
  train_data_parallel(spec, {.num_local = 2});
  auto first = toy_spec(32, part);
  first.loader.num_workers = 1;
  first.epochs = 3;
  first.max_steps = 4; // exactly epoch 0: its end-of-epoch checkpoint is the last one
  train_data_parallel(first, {.num_local = 2});
  auto second = toy_spec(32, part);
  second.loader.num_workers = 1;
  second.epochs = 3;
  second.resume = part;
  const job_report r = train_data_parallel(second, {.num_local = 2});
  REQUIRE(r.epochs.size() == 2);
  require_close(model_of(full), model_of(part), 0);
}

TEST_CASE("trainer actors: a job a launcher restarted resumes from its checkpoint on its own") {
  const std::string full = scratch("full_r.safetensors"), part = scratch("part_r.safetensors");
  auto spec = toy_spec(32, full);
  spec.epochs = 3;
  train_data_parallel(spec, {.num_local = 2});
  auto first = toy_spec(32, part);
  first.epochs = 3;
  first.max_steps = 4; // epoch 0 and its checkpoint, then "the job dies"
  train_data_parallel(first, {.num_local = 2});
  auto again = toy_spec(32, part); // the same spec, no resume given: the restarted program
  again.epochs = 3;
  ::setenv("TORCHELASTIC_RESTART_COUNT", "1", 1);
  const job_report r = train_data_parallel(again, {.num_local = 2});
  ::unsetenv("TORCHELASTIC_RESTART_COUNT");
  REQUIRE(r.epochs.size() == 2); // epochs 1 and 2 only
  require_close(model_of(full), model_of(part), 0);
}

TEST_CASE("trainer actors: a checkpoint whose numbers are not whole numbers is refused") {
  const std::string part = scratch("part_strict.safetensors");
  auto first = toy_spec(32, part);
  first.max_steps = 3;
  first.checkpoint_every = 3;
  train_data_parallel(first, {.num_local = 2});
  const safetensors_file saved = load_safetensors(part);
  auto resume_with = [&](const std::string& key, const std::string& value) {
    auto meta = saved.metadata;
    REQUIRE(meta.count(key));
    meta[key] = value;
    const std::string bad = scratch("bad_" + key + ".safetensors");
    save_safetensors(bad, saved.tensors, meta);
    auto second = toy_spec(32, "");
    second.resume = bad;
    try {
      train_data_parallel(second, {.num_local = 2});
    } catch (const actorch::error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // std::stoll read "2x1" as 2 and resumed at epoch 2.
  CHECK_THAT(resume_with("epoch", "2x1"),
             Contains("metadata \"epoch\" must be an integer, but got '2x1'"));
  CHECK_THAT(resume_with("step", " 3"), Contains("metadata \"step\" must be an integer"));
  CHECK_THAT(resume_with("total_steps", "-3"),
             Contains("metadata \"total_steps\" must not be negative, but got '-3'"));
  const std::string loader = saved.metadata.at("loader");
  CHECK_THAT(
      resume_with("loader", "0x" + loader),
      Contains("epoch must be an integer, but got '0x" + loader.substr(0, loader.find(';')) + "'"));
  CHECK_THAT(resume_with("loader", loader + ";"), Contains("has 5 fields, not 4"));
}

TEST_CASE("trainer actors: a failing replica stops the job with its error, no hang") {
  auto spec = toy_spec(32, "");
  auto forward = spec.forward;
  spec.forward = [forward](dist::distributed_data_parallel& m, const data::sample& b) {
    if (m.group().rank() == 1)
      throw error("bad sample in the batch");
    return forward(m, b);
  };
  CHECK_THROWS_WITH(train_data_parallel(spec, {.num_local = 2}),
                    Contains("replica 1 failed: bad sample in the batch"));
}

TEST_CASE("trainer actors: bad specs are clear errors") {
  auto spec = toy_spec(32, "");
  spec.loader.sampler = std::make_shared<data::sequential_sampler>(kSamples);
  CHECK_THROWS_WITH(train_data_parallel(spec), Contains("loader.sampler"));
  spec = toy_spec(32, "");
  spec.resume = scratch("does-not-exist.safetensors");
  CHECK_THROWS_WITH(train_data_parallel(spec, {.num_local = 2}),
                    Contains("does-not-exist.safetensors"));
  spec = toy_spec(32, "");
  spec.batch_fn = [](const replica_info&, int64_t) { return data::sample{}; };
  CHECK_THROWS_WITH(train_data_parallel(spec), Contains("either a dataset or a batch_fn"));
}

TEST_CASE("trainer actors: a rank killed mid-training stops the job, naming the rank") {
  const std::string store = scratch("killed.store");
  const std::string seen = scratch("killed.rank0");
  std::filesystem::remove(store);
  std::filesystem::remove(seen);
  const auto t0 = std::chrono::steady_clock::now();
  std::string error_text;
  try {
    dist::spawn(
        [&](int rank) {
          // Rank 0 ignores the launcher's SIGTERM, so that it must notice rank 1's death by
          // itself; only the SIGKILL after the 20 s grace period could stop it otherwise.
          if (rank == 0)
            std::signal(SIGTERM, SIG_IGN);
          dist::init_process_group(
              {.init_method = "file://" + store, .world_size = 2, .rank = rank, .timeout = 5000ms});
          auto spec = toy_spec(32, "");
          spec.epochs = 50;
          auto forward = spec.forward;
          int64_t steps = 0;
          spec.forward = [&, forward](dist::distributed_data_parallel& m, const data::sample& b) {
            if (rank == 1 && ++steps == 5)
              ::kill(::getpid(), SIGKILL);
            return forward(m, b);
          };
          try {
            train_data_parallel(spec, {.process_group = dist::world()});
          } catch (const std::exception& e) {
            std::ofstream(seen) << e.what();
            throw;
          }
        },
        2, {.grace = 20000ms});
  } catch (const std::exception& e) {
    error_text = e.what();
  }
  CHECK_THAT(error_text, Contains("rank 1 was killed by signal 9"));
  // Rank 0 noticed on its own, well before the launcher's grace period, and named rank 1.
  CHECK(std::chrono::steady_clock::now() - t0 < 15s);
  CHECK_THAT(test::read_file(seen), Contains("rank 1"));
}
