// Train an MLP on the UCI digits (examples/data/digits.csv.gz), checkpoint, resume.
//
//   digits_mlp [--data FILE] [--epochs 30] [--checkpoint FILE] [--stop-after E] [--resume FILE]
//
// Pixels normalized (transforms::normalize), a fixed 80/20 split (seeded permutation),
// Linear(64,128) ReLU Linear(128,10), SGD with momentum, batch 32. Each epoch's shuffle comes
// from a generator seeded with the epoch number, so a run resumed from a checkpoint (model,
// optimizer and epoch) continues with exactly the batches, and so the weights, of an
// uninterrupted run.
#include <cstdio>
#include <iostream>
#include <string>

#include "base/parse.hpp"
#include "core/core.hpp"
#include "core/data/digits_dataset.hpp"
#include "core/data/transforms.hpp"
#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "core/optim/sgd.hpp"
#include "core/serialize/checkpoint.hpp"

using namespace actorch;

namespace {

struct options {
  std::string data = ACTORCH_DIGITS_CSV;
  int64_t epochs = 30;
  std::string checkpoint = "digits.safetensors";
  int64_t stop_after = -1;
  std::string resume;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    ACTORCH_CHECK(i + 1 < argc, "digits_mlp: option ", a, " needs a value");
    const std::string v = argv[++i];
    if (a == "--data")
      o.data = v;
    else if (a == "--epochs")
      o.epochs = parse_int(v, "--epochs", 1);
    else if (a == "--checkpoint")
      o.checkpoint = v;
    else if (a == "--stop-after")
      o.stop_after = parse_int(v, "--stop-after", 0);
    else if (a == "--resume")
      o.resume = v;
    else
      ACTORCH_FAIL("digits_mlp: unknown option ", a);
  }
  return o;
}

double accuracy(nn::module& model, const tensor& x, const tensor& y) {
  no_grad guard;
  model.eval();
  const tensor pred = model(x).argmax(1);
  model.train();
  return pred.eq(y).to(dtype::float64).mean().item<double>();
}

// The checkpoint (core/serialize/checkpoint.hpp) holds the model, the optimizer and the
// number of finished epochs.
int64_t load_epoch(const std::string& path, nn::module& model, optim::optimizer& opt) {
  const auto meta = load_checkpoint(path, model, opt);
  ACTORCH_CHECK(meta.count("epoch"), "digits_mlp: ", path, " has no \"epoch\" metadata");
  return parse_int(meta.at("epoch"), path + ": metadata \"epoch\"", 0);
}

} // namespace

int main(int argc, char** argv) try {
  const options o = parse(argc, argv);

  // Data: pixels scaled to [0, 1], then normalized as torchvision's Normalize does (the mean
  // and std of every pixel of the file, as MNIST's (0.1307,), (0.3081,)), a fixed 80/20 split.
  const data::digits_dataset digits(o.data);
  const tensor images =
      data::transforms::normalize(digits.images().view({digits.size(), 1, 8, 8}).div(16.0),
                                  {0.3053}, {0.3760})
          .view({digits.size(), 64});
  generator split_gen(0);
  const tensor order = randperm(digits.size(), {}, &split_gen);
  const int64_t n_train = digits.size() * 8 / 10;
  const tensor train_x = images.index_select(0, order.narrow(0, 0, n_train));
  const tensor train_y = digits.labels().index_select(0, order.narrow(0, 0, n_train));
  const tensor test_x = images.index_select(0, order.narrow(0, n_train, digits.size() - n_train));
  const tensor test_y =
      digits.labels().index_select(0, order.narrow(0, n_train, digits.size() - n_train));
  std::cout << "digits: " << n_train << " train, " << digits.size() - n_train << " test samples\n";

  // Model and optimizer.
  generator init_gen(42);
  nn::sequential model{std::make_shared<nn::linear>(64, 128, true, &init_gen),
                       std::make_shared<nn::relu>(),
                       std::make_shared<nn::linear>(128, 10, true, &init_gen)};
  optim::sgd opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  int64_t start = 0;
  if (!o.resume.empty()) {
    start = load_epoch(o.resume, model, opt);
    std::cout << "resumed from " << o.resume << " after epoch " << start << '\n';
  }

  const int64_t batch = 32;
  for (int64_t epoch = start; epoch < o.epochs; ++epoch) {
    generator shuffle(1000 + uint64_t(epoch));
    const tensor perm = randperm(n_train, {}, &shuffle);
    double total = 0;
    int64_t batches = 0;
    for (int64_t b = 0; b < n_train; b += batch) {
      const tensor idx = perm.narrow(0, b, std::min(batch, n_train - b));
      opt.zero_grad();
      const tensor loss = nn::functional::cross_entropy(model(train_x.index_select(0, idx)),
                                                        train_y.index_select(0, idx));
      loss.backward();
      opt.step();
      total += loss.item<double>();
      ++batches;
    }
    std::printf("epoch %3lld  loss %.4f  train acc %.4f  test acc %.4f\n",
                static_cast<long long>(epoch + 1), total / double(batches),
                accuracy(model, train_x, train_y), accuracy(model, test_x, test_y));
    if (epoch + 1 == o.stop_after || epoch + 1 == o.epochs) {
      save_checkpoint(o.checkpoint, model, opt, {{"epoch", std::to_string(epoch + 1)}});
      std::cout << "saved " << o.checkpoint << " after epoch " << epoch + 1 << '\n';
      if (epoch + 1 == o.stop_after)
        return 0;
    }
  }
  std::printf("test accuracy %.4f\n", accuracy(model, test_x, test_y));
  return 0;
} catch (const std::exception& e) {
  std::cerr << "digits_mlp: " << e.what() << '\n';
  return 1;
}
