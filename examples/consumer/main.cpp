// A program of a user's own, built against the installed package (find_package(actorch)): a
// data-source actor of its own (two Gaussian blobs, drawn per sample from the task's seed)
// feeds data-parallel training on two trainer actors, each replica reading its own loader over
// the source. Prints the loss per epoch and the accuracy on fresh samples; exits 1 below 95%.
#include <cstdio>
#include <memory>
#include <optional>
#include <vector>

#include <actorch/actors/source_loader.hpp>
#include <actorch/actors/trainer.hpp>
#include <actorch/core/core.hpp>
#include <actorch/core/nn/functional.hpp>
#include <actorch/core/nn/layers.hpp>
#include <actorch/core/optim/sgd.hpp>

using namespace actorch;

namespace {

constexpr int64_t kSamples = 1024;

/// Sample i: features [2] around (+2, +2) for label 1 and (-2, -2) for label 0, noise drawn
/// from a generator seeded by the sample's index (the same sample whoever loads it).
data::sample blob(int64_t i) {
  generator g(1000 + uint64_t(i));
  const int64_t label = i % 2;
  tensor x = randn({2}, {}, &g).add(label ? 2.0 : -2.0);
  return data::sample::make_tuple({x, label});
}

/// The source actor: answers each task with its samples, uncollated (the loader collates).
/// Stateful, as actorch's own sources are: CAF 0.17's stateless typed function actors trip
/// UndefinedBehaviorSanitizer in CAF's own headers.
struct blobs_state {};
actors::source_actor::behavior_type
blobs_source(actors::source_actor::stateful_pointer<blobs_state> /*self*/) {
  return {
      [](actors::load_atom, const actors::index_batch& task) {
        actors::loaded_batch out;
        out.run_id = task.run_id; // the source contract: echo the run and the batch
        out.seq = task.seq;
        out.collated = false;
        data::sample::tuple samples;
        for (int64_t i : task.indices)
          samples.push_back(blob(i));
        out.data = data::sample(std::move(samples));
        return out;
      },
  };
}

} // namespace

int main() try {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  const actors::source_actor source = sys.spawn<caf::detached>(blobs_source);

  // One loader per replica over the source, shuffled by the replica's own generator.
  constexpr int kReplicas = 2;
  constexpr int64_t kBatch = 32;
  struct replica_feed {
    std::unique_ptr<data::data_loader> loader;
    std::optional<data::data_loader::iterator> it;
  };
  std::vector<replica_feed> feeds(kReplicas);
  for (int r = 0; r < kReplicas; ++r)
    feeds[size_t(r)].loader = std::make_unique<data::data_loader>(data::make_source_loader(
        sys, source, kSamples,
        {.batch_size = kBatch, .shuffle = true, .generator = std::make_shared<generator>(r)}));

  actors::trainer_spec spec;
  spec.make_model = [](const actors::replica_info&) {
    generator g(7);
    return std::make_shared<nn::sequential>(std::initializer_list<std::shared_ptr<nn::module>>{
        std::make_shared<nn::linear>(2, 16, true, &g), std::make_shared<nn::relu>(),
        std::make_shared<nn::linear>(16, 2, true, &g)});
  };
  spec.make_optimizer = [](nn::module& m) {
    return std::make_unique<optim::sgd>(m.parameters(), optim::sgd_options{.lr = 0.1});
  };
  spec.forward = [](dist::distributed_data_parallel& model, const data::sample& b) {
    const tensor x = b[0].as_tensor(), y = b[1].as_tensor();
    const tensor out = model(x);
    return actors::step_result{nn::functional::cross_entropy(out, y), x.size(0),
                               out.argmax(1).eq(y).sum().item<int64_t>()};
  };
  // Each trainer actor calls this on its own thread, for its own replica only.
  spec.batch_fn = [&feeds](const actors::replica_info& r, int64_t) {
    replica_feed& f = feeds[size_t(r.rank)];
    if (f.it)
      ++*f.it;
    if (!f.it || *f.it == f.loader->end())
      f.it = f.loader->begin(); // the next epoch of this replica's loader
    return **f.it;
  };
  spec.steps_per_epoch = kSamples / (kBatch * kReplicas);
  spec.epochs = 3;
  const actors::job_report report = actors::train_data_parallel(spec, {.num_local = kReplicas});
  for (size_t e = 0; e < report.epochs.size(); ++e)
    std::printf("consumer: epoch %zu loss %.4f accuracy %.4f\n", e + 1, report.epochs[e].loss,
                report.epochs[e].accuracy);
  const double accuracy = report.epochs.back().accuracy;
  std::printf("consumer: %s\n", accuracy >= 0.95 ? "trained" : "did not train");
  return accuracy >= 0.95 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "consumer: %s\n", e.what());
  return 1;
}
