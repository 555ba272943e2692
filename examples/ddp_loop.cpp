// PyTorch's DistributedDataParallel loop in C++, top to bottom, as a torchrun script reads: join
// the process group, shard the data with a DistributedSampler, feed it through the loader's
// worker actors, wrap the model in DDP (which all-reduces its gradient buckets while backward
// runs) and train. The UCI digits (8x8, in the repository) stand in for MNIST.
//
//   ./build/release/tools/actorch launch --nproc-per-node 2 ./build/release/examples/ddp_loop
//
// Each rank prints its loss per epoch, then its accuracy on every digit and a checksum of its
// parameters: DDP keeps the replicas equal. (train_data_parallel, in actors/trainer.hpp, runs
// this loop for you in trainer actors, with checkpoints, resume and healing.)
#include <cstdio>
#include <memory>
#include <string>

#include "actors/data_loader.hpp"
#include "base/parse.hpp"
#include "comm/ddp/distributed_data_parallel.hpp"
#include "comm/distributed.hpp"
#include "core/core.hpp"
#include "core/data/digits_dataset.hpp"
#include "core/data/distributed_sampler.hpp"
#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "core/optim/sgd.hpp"

using namespace actorch;

int main(int argc, char** argv) try {
  const int64_t epochs = argc > 2 && std::string(argv[1]) == "--epochs"
                             ? parse_int(argv[2], "ddp_loop: --epochs", 1)
                             : 10;
  dist::init_process_group({.backend = "gloo"}); // env://: RANK, WORLD_SIZE, MASTER_ADDR, ...
  const int rank = dist::get_rank();
  manual_seed(0);

  auto dataset = std::make_shared<data::digits_dataset>(ACTORCH_DIGITS_CSV);
  auto sampler = std::make_shared<data::distributed_sampler>(dataset->size()); // the group's
  data::data_loader loader(dataset, {.batch_size = 32, .sampler = sampler, .num_workers = 2});

  auto model = std::make_shared<nn::sequential>(std::initializer_list<std::shared_ptr<nn::module>>{
      std::make_shared<nn::linear>(64, 64), std::make_shared<nn::relu>(),
      std::make_shared<nn::linear>(64, 10)});
  dist::distributed_data_parallel ddp(model, dist::process_replicas(dist::world()));
  optim::sgd opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});

  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    sampler->set_epoch(epoch); // a new shuffle each epoch, the same on every rank
    double total = 0;
    int64_t batches = 0;
    for (const data::sample& batch : loader) {
      const tensor x = batch[0].as_tensor().reshape({-1, 64}).div(16.0), y = batch[1].as_tensor();
      opt.zero_grad();
      const tensor loss = nn::functional::cross_entropy(ddp(x), y);
      loss.backward(); // returns with every rank's gradients averaged
      opt.step();
      total += loss.item<double>();
      ++batches;
    }
    std::printf("Rank %d, epoch %lld: %.6f\n", rank, static_cast<long long>(epoch),
                total / double(batches));
  }

  no_grad guard;
  int64_t correct = 0;
  for (int64_t i = 0; i < dataset->size(); ++i) {
    const data::sample s = dataset->get(i);
    const tensor x = s[0].as_tensor().reshape({1, 64}).div(16.0);
    correct += (*model)(x).argmax(1).item<int64_t>() == s[1].as_int();
  }
  double checksum = 0;
  for (const tensor& p : model->parameters())
    checksum += p.to(dtype::float64).abs().sum().item<double>();
  std::printf("Rank %d accuracy %.4f on all %lld digits, parameters checksum %.9g\n", rank,
              double(correct) / double(dataset->size()), static_cast<long long>(dataset->size()),
              checksum);
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ddp_loop: %s\n", e.what());
  return 1;
}
