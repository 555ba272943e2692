// Trainer actors and the comm actor spawned by hand: the graph train_data_parallel (actors/
// trainer.hpp) builds for you, with its messages in view.
//
//   ./build/release/examples/trainer_actors            one process, two trainer actors
//   ./build/release/tools/actorch launch --nproc-per-node 2 ./build/release/examples/trainer_actors
//
// Each process spawns its comm actor and two trainer actors (blocking actors: a thread each).
// A trainer holds a model replica, a loader over its shard of the digits and DDP over its
// replica handle. In backward, the replicas of a process sum each gradient bucket in shared
// memory (local_replicas); the last to add its part hands the sum to the comm actor, which
// all-reduces it across processes and completes the bucket. Each trainer sends the monitor (the
// caller's scoped actor) an epoch_atom message per epoch and a done_atom message at the end:
//
//   trainer k ──(epoch_atom, rank, epoch, loss)──> monitor
//   trainer k ──(done_atom, rank, accuracy, checksum)──> monitor
//   trainer k's DDP ──bucket sums──> local_replicas ──submit──> comm actor ──> all_reduce
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "actors/comm_actor.hpp"
#include "actors/data_loader.hpp"
#include "caf/all.hpp"
#include "comm/ddp/distributed_data_parallel.hpp"
#include "comm/distributed.hpp"
#include "core/core.hpp"
#include "core/data/digits_dataset.hpp"
#include "core/data/distributed_sampler.hpp"
#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "core/optim/sgd.hpp"

using namespace actorch;

using epoch_atom = caf::atom_constant<caf::atom("epoch")>;
using done_atom = caf::atom_constant<caf::atom("done")>;

constexpr int kTrainersPerProcess = 2;
constexpr int64_t kEpochs = 20;

namespace {

// A trainer actor: its whole life is the training loop, on its own thread.
void trainer(caf::blocking_actor* self, caf::actor monitor,
             std::shared_ptr<dist::replica_group> replica, data::dataset_ptr dataset) {
  const int rank = replica->rank(); // process rank x trainers per process + local index
  auto model = std::make_shared<nn::sequential>(std::initializer_list<std::shared_ptr<nn::module>>{
      std::make_shared<nn::linear>(64, 64), std::make_shared<nn::relu>(),
      std::make_shared<nn::linear>(64, 10)});
  dist::distributed_data_parallel ddp(model, replica); // every replica: rank 0's parameters
  optim::sgd opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  auto sampler = std::make_shared<data::distributed_sampler>(dataset->size(), replica->size(),
                                                             rank); // this trainer's shard
  data::data_loader loader(dataset, {.batch_size = 32, .sampler = sampler, .num_workers = 1});
  for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
    sampler->set_epoch(epoch);
    double total = 0;
    int64_t batches = 0;
    for (const data::sample& batch : loader) {
      const tensor x = batch[0].as_tensor().reshape({-1, 64}).div(16.0);
      opt.zero_grad();
      const tensor loss = nn::functional::cross_entropy(ddp(x), batch[1].as_tensor());
      loss.backward(); // the buckets go through local_replicas and the comm actor
      opt.step();
      total += loss.item<double>();
      ++batches;
    }
    self->send(monitor, epoch_atom::value, rank, epoch, total / double(batches));
  }
  no_grad guard;
  int64_t correct = 0;
  for (int64_t i = 0; i < dataset->size(); ++i) {
    const data::sample s = dataset->get(i);
    correct += (*model)(s[0].as_tensor().reshape({1, 64}).div(16.0)).argmax(1).item<int64_t>() ==
               s[1].as_int();
  }
  double checksum = 0;
  for (const tensor& p : model->parameters())
    checksum += p.to(dtype::float64).abs().sum().item<double>();
  self->send(monitor, done_atom::value, rank, double(correct) / double(dataset->size()), checksum);
}

} // namespace

int main() try {
  std::shared_ptr<dist::process_group> pg; // across processes; none in a job of one process
  if (std::getenv("WORLD_SIZE") != nullptr) {
    dist::init_process_group({.backend = "gloo"});
    pg = dist::world();
  }
  manual_seed(0);
  auto dataset = std::make_shared<data::digits_dataset>(ACTORCH_DIGITS_CSV);

  caf::actor_system_config cfg;
  { // the actors' scope: they end before the process group
    caf::actor_system sys{cfg};
    dist::local_replicas replicas(kTrainersPerProcess, actors::spawn_comm_actor(sys, pg));
    caf::scoped_actor monitor{sys};
    for (int i = 0; i < kTrainersPerProcess; ++i)
      sys.spawn(trainer, caf::actor{monitor}, replicas.replica(i), data::dataset_ptr(dataset));

    for (int done = 0; done < kTrainersPerProcess;) {
      monitor->receive(
          [](epoch_atom, int rank, int64_t epoch, double loss) {
            std::printf("trainer %d, epoch %lld: loss %.6f\n", rank, static_cast<long long>(epoch),
                        loss);
            std::fflush(stdout);
          },
          [&](done_atom, int rank, double accuracy, double checksum) {
            std::printf("trainer %d accuracy %.4f, parameters checksum %.9g\n", rank, accuracy,
                        checksum);
            std::fflush(stdout);
            ++done;
          });
    }
  } // the monitor goes, then the replicas (which stops the comm actor), then the actor
    // system, which waits for the trainers' threads to end
  if (pg)
    dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "trainer_actors: %s\n", e.what());
  return 1;
}
