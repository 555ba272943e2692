// The `images` workload of ../shared/bench/WORKLOADS.md: an ImageFolder tree of JPEGs through
// RandomResizedCrop(224), RandomHorizontalFlip, ToTensor and Normalize (ImageNet's mean and
// std), batch 64, shuffled, W workers, best of 2 passes, measured as the peer
// (../shared/bench/peer/torch_images.py) measures it. With --step-ms S a third pass feeds a
// consumer that spends S ms on each batch and prints the loader's starvation figure.
#include <chrono>
#include <iomanip>
#include <thread>

#include <sys/resource.h>

#include "actors/data_loader.hpp"
#include "bench/bench.hpp"
#include "core/data/vision/image_folder.hpp"
#include "core/trace.hpp"

namespace actorch::bench {

namespace {

double cpu_seconds() {
  double s = 0;
  for (const int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage u{};
    getrusage(who, &u);
    s += double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  }
  return s;
}

double peak_rss_mb() {
  rusage self{}, children{};
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &children);
  return double(self.ru_maxrss + children.ru_maxrss) / 1024.0;
}

} // namespace

void run_images(const images_options& o, std::ostream& out) {
  namespace vs = data::vision;
  vs::image_dataset_options io;
  io.transform = {vs::random_resized_crop{224}, vs::random_horizontal_flip{}, vs::to_tensor{},
                  vs::normalize{{0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}}};
  io.fuse = o.fuse;
  auto ds = std::make_shared<vs::image_folder>(o.root, std::move(io));
  data::data_loader loader(ds, {.batch_size = 64,
                                .shuffle = true,
                                .num_workers = o.workers,
                                .multiprocessing_context = o.multiprocessing_context});
  using clock = std::chrono::steady_clock;
  if (!o.trace.empty())
    trace::enable();
  const double cpu0 = cpu_seconds();
  double best = 0, first = -1;
  for (int pass = 0; pass < 2; ++pass) {
    const auto t0 = clock::now();
    int64_t k = 0;
    for (const auto& batch : loader) {
      if (first < 0)
        first = std::chrono::duration<double>(clock::now() - t0).count();
      k += batch[1].as_tensor().size(0);
    }
    best = std::max(best, double(k) / std::chrono::duration<double>(clock::now() - t0).count());
  }
  const double cpu_per_image = (cpu_seconds() - cpu0) / double(2 * ds->size());
  if (!o.trace.empty()) {
    trace::write_chrome_json(o.trace, 0, "actorch bench images");
    trace::enable(false);
  }
  out << "images which=actorch workers=" << o.workers << " images=" << ds->size()
      << " rate=" << std::fixed << std::setprecision(1) << best
      << " first_batch_s=" << std::setprecision(3) << first
      << " cpu_s_per_image=" << std::setprecision(5) << cpu_per_image
      << " rss_mb=" << std::setprecision(0) << peak_rss_mb() << (o.fuse ? "" : " fused=0")
      << std::defaultfloat << std::endl;
  if (o.step_ms > 0) {
    for (auto it = loader.begin(); it != loader.end(); ++it)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.step_ms));
    const data::loader_timing t = loader.timing();
    out << "images-starvation which=actorch workers=" << o.workers << " step_ms=" << o.step_ms
        << " batches=" << t.batches << std::fixed << std::setprecision(3) << " wait_s=" << t.wait_s
        << " work_s=" << t.work_s << " starvation=" << t.starvation() << std::defaultfloat
        << std::endl;
  }
}

} // namespace actorch::bench
