// The distributed SGD of PyTorch's "Writing Distributed Applications" tutorial (the seeds'
// 分布式训练 section), as written there: a Partition of the dataset, a DataPartitioner that
// shuffles the indices with seed 1234 and cuts one part per rank, a DataLoader over this rank's
// part with batch 128 / world size, the tutorial's Net, SGD(lr=0.01, momentum=0.5), and
// average_gradients: an all_reduce(SUM) of every gradient divided by the world size. The UCI
// digits (8x8, in the repository) stand in for MNIST, so the Net's convolutions pad by 1 and its
// first Linear takes 20 * 2 * 2 features. Start it with the launcher:
//   ./build/release/tools/actorch launch --nproc-per-node 2
//   ./build/release/examples/distributed_sgd
// Each rank prints its loss per epoch, as the tutorial does, then its accuracy on the whole set
// and a checksum of its parameters: averaged gradients keep every replica's parameters equal.
#include <cstdio>
#include <string>

#include "actors/data_loader.hpp"
#include "base/parse.hpp"
#include "comm/distributed.hpp"
#include "core/core.hpp"
#include "core/data/digits_dataset.hpp"
#include "core/data/transforms.hpp"
#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "core/optim/sgd.hpp"

using namespace actorch;
namespace F = actorch::nn::functional;

namespace {

/// Dataset partitioning helper: the samples of `data` at `index`.
class partition : public data::dataset {
public:
  partition(data::dataset_ptr data, std::vector<int64_t> index)
      : data_(std::move(data)), index_(std::move(index)) {}
  int64_t size() const override { return int64_t(index_.size()); }
  data::sample get(int64_t i) const override { return data_->get(index_[size_t(i)]); }

private:
  data::dataset_ptr data_;
  std::vector<int64_t> index_;
};

/// The indices shuffled once with `seed`, then cut into parts of the given fractions.
class data_partitioner {
public:
  data_partitioner(data::dataset_ptr data, const std::vector<double>& sizes, uint64_t seed = 1234)
      : data_(std::move(data)) {
    generator rng(seed);
    const tensor shuffled = randperm(data_->size(), {}, &rng);
    const int64_t* indexes = shuffled.data_ptr<int64_t>();
    int64_t at = 0;
    for (double frac : sizes) {
      const auto part_len = int64_t(frac * double(data_->size()));
      partitions_.emplace_back(indexes + at, indexes + at + part_len);
      at += part_len;
    }
  }
  std::shared_ptr<partition> use(int rank) const {
    return std::make_shared<partition>(data_, partitions_.at(size_t(rank)));
  }

private:
  data::dataset_ptr data_;
  std::vector<std::vector<int64_t>> partitions_;
};

/// The tutorial's Net, sized for 8x8 images.
class net : public nn::module {
public:
  net() {
    conv1_ = register_module("conv1", std::make_shared<nn::conv2d>(1, 10, 3, 1, 1));
    conv2_ = register_module("conv2", std::make_shared<nn::conv2d>(10, 20, 3, 1, 1));
    conv2_drop_ = register_module("conv2_drop", std::make_shared<nn::dropout2d>());
    fc1_ = register_module("fc1", std::make_shared<nn::linear>(80, 50));
    fc2_ = register_module("fc2", std::make_shared<nn::linear>(50, 10));
  }
  tensor forward(const tensor& input) override {
    tensor x = F::relu(max_pool2d((*conv1_)(input), 2));
    x = F::relu(max_pool2d((*conv2_drop_)((*conv2_)(x)), 2));
    x = x.view({-1, 80});
    x = F::relu((*fc1_)(x));
    x = F::dropout(x, 0.5, is_training());
    return (*fc2_)(x).log_softmax(1);
  }

private:
  std::shared_ptr<nn::conv2d> conv1_, conv2_;
  std::shared_ptr<nn::dropout2d> conv2_drop_;
  std::shared_ptr<nn::linear> fc1_, fc2_;
};

// The digits as ToTensor and Normalize leave MNIST: pixels in [0, 1], normalized.
data::dataset_ptr digits_dataset(const std::string& path) {
  using namespace data::transforms;
  return std::make_shared<transformed_dataset>(std::make_shared<data::digits_dataset>(path),
                                               compose({lambda_([](const tensor& img) {
                                                          return img.div(16.0).view({1, 8, 8});
                                                        }),
                                                        normalize({0.3053}, {0.3760})}));
}

/// Partitioning the digits: one part per rank, batch 128 / world size.
std::pair<data::data_loader, int64_t> partition_dataset(const data::dataset_ptr& dataset) {
  const int size = dist::get_world_size();
  const int64_t bsz = 128 / size;
  const std::vector<double> partition_sizes(size_t(size), 1.0 / size);
  const data_partitioner partitioner(dataset, partition_sizes);
  data::loader_options opts;
  opts.batch_size = bsz;
  opts.shuffle = true;
  return {data::data_loader(partitioner.use(dist::get_rank()), opts), bsz};
}

/// Gradient averaging.
void average_gradients(nn::module& model) {
  const double size = dist::get_world_size();
  for (tensor& param : model.parameters()) {
    tensor grad = param.grad();
    dist::all_reduce(grad, dist::reduce_op::sum);
    grad.div_(size);
  }
}

void run(int rank, int64_t epochs, const std::string& data) {
  manual_seed(1234);
  const data::dataset_ptr dataset = digits_dataset(data);
  auto [train_set, bsz] = partition_dataset(dataset);
  net model;
  optim::sgd optimizer(model.parameters(), {.lr = 0.01, .momentum = 0.5});
  const int64_t num_batches = train_set.size();
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    double epoch_loss = 0.0;
    for (const data::sample& batch : train_set) {
      const tensor input = batch[0].as_tensor(), target = batch[1].as_tensor().to(dtype::int64);
      optimizer.zero_grad();
      const tensor output = model(input);
      const tensor loss = F::nll_loss(output, target);
      epoch_loss += loss.item<double>();
      loss.backward();
      average_gradients(model);
      optimizer.step();
    }
    std::printf("Rank %d, epoch %lld: %.6f\n", rank, static_cast<long long>(epoch),
                epoch_loss / double(num_batches));
  }
  // Not in the tutorial: what the run reached, and that the replicas stayed equal.
  no_grad guard;
  model.eval();
  int64_t correct = 0;
  for (int64_t i = 0; i < dataset->size(); ++i) {
    const data::sample s = dataset->get(i);
    correct += model(s[0].as_tensor().unsqueeze(0)).argmax(1).item<int64_t>() == s[1].as_int();
  }
  double checksum = 0;
  for (const tensor& p : model.parameters())
    checksum += p.to(dtype::float64).abs().sum().item<double>();
  std::printf("Rank %d accuracy %.4f on all %lld digits, parameters checksum %.9g\n", rank,
              double(correct) / double(dataset->size()), static_cast<long long>(dataset->size()),
              checksum);
}

} // namespace

int main(int argc, char** argv) try {
  int64_t epochs = 10;
  std::string data = ACTORCH_DIGITS_CSV;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--epochs")
      epochs = parse_int(argv[i + 1], "distributed_sgd: --epochs", 1);
    else if (a == "--data")
      data = argv[i + 1];
    else
      ACTORCH_FAIL("distributed_sgd: unknown option ", a, " (known: --epochs --data)");
  }
  ACTORCH_CHECK(argc % 2 == 1, "distributed_sgd: option ", argv[argc - 1], " needs a value");
  dist::init_process_group({.backend = "gloo"});
  run(dist::get_rank(), epochs, data);
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "distributed_sgd: %s\n", e.what());
  return 1;
}
