// The sharded optimizer step of trainer actors (trainer_spec::zero_redundancy, Note [Sharded
// step]): the same bits as DDP's all-reduce and a whole step per actor, in the model and in the
// optimizer state a checkpoint holds, with SGD's momentum and Adam, at 2, 3 and 5 actors (5:
// more actors than the toy model has parameters, so some shards are empty); checkpoints that
// cross between the two; and the errors where it cannot apply.
#include <catch2/catch.hpp>

#include "actors/trainer.hpp"
#include "comm/ddp/comm_hooks.hpp"
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

trainer_spec with_adam(trainer_spec s) {
  s.make_optimizer = [](nn::module& m) {
    return std::make_unique<optim::adam>(m.parameters(), optim::adam_options{.lr = 0.01});
  };
  return s;
}

} // namespace

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
                             "job of one process, on the CPU, without a comm_hook; this job has 1 "
                             "actors per process"));
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
