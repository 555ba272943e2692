// The data loader fed by a user's actor: samples live in an SQLite table, an actor reads them
// (examples/sqlite_source.cpp), and the loader shuffles, batches and prefetches as usual.
// Usage: sqlite_loader [DB path]   (writes a 1000-row example table there first)
#include <iostream>

#include "actors/source_loader.hpp"
#include "caf/all.hpp"
#include "examples/sqlite_source.hpp"

using namespace actorch;

int main(int argc, char** argv) try {
  const std::string path = argc > 1 ? argv[1] : "/tmp/actorch_samples.db";
  // 1000 samples of 16 features; sample i is all i / 1000, label i % 10.
  std::vector<std::vector<float>> features;
  std::vector<int64_t> labels;
  for (int i = 0; i < 1000; ++i) {
    features.emplace_back(16, float(i) / 1000);
    labels.push_back(i % 10);
  }
  examples::write_sqlite_samples(path, features, labels);

  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto source = examples::spawn_sqlite_source(sys, path);
  {
    auto loader = data::make_source_loader(sys, source, examples::sqlite_sample_count(path),
                                           {.batch_size = 64, .shuffle = true});
    for (int epoch = 0; epoch < 2; ++epoch) {
      int64_t samples = 0;
      double label_sum = 0;
      for (const data::sample& batch : loader) {
        samples += batch[0].as_tensor().size(0);
        label_sum += batch[1].as_tensor().sum().item<double>();
      }
      std::cout << "epoch " << epoch << ": " << samples << " samples, mean label "
                << label_sum / double(samples) << '\n';
    }
  }
  caf::anon_send_exit(source, caf::exit_reason::user_shutdown); // ~actor_system waits for it
} catch (const std::exception& e) {
  std::cerr << "sqlite_loader: " << e.what() << "\n";
  return 1;
}
