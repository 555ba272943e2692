// The data-parallel digits job (digits_training.hpp).
#include "examples/digits_training.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>

#include <unistd.h>

#include "base/parse.hpp"
#include "comm/ddp/comm_hooks.hpp"
#include "comm/distributed.hpp"
#include "core/core.hpp"
#include "core/data/digits_dataset.hpp"
#include "core/data/transforms.hpp"
#include "core/nn/functional.hpp"
#include "core/nn/layers.hpp"
#include "core/optim/sgd.hpp"
#include "core/serialize/atomic_write.hpp"
#include "core/serialize/checkpoint.hpp"
#include "core/serialize/safetensors.hpp"

using namespace actorch;

namespace digits {

namespace {

void print_usage(const char* program, const options& o) {
  std::cout
      << "usage: " << program << " [--option value ...]\n"
      << "Trains a classifier on the UCI digits with data-parallel replicas (under a launcher,\n"
      << "one per process) and writes a checkpoint, metrics.csv and curves.png.\n"
      << "  --data PATH         the digits CSV, gzip (default " << o.data << ")\n"
      << "  --out DIR           where outputs go (default " << o.out << ")\n"
      << "  --epochs N          (default " << o.epochs << ")\n"
      << "  --batch-size N      per replica (default " << o.batch_size << ")\n"
      << "  --num-workers N     dataset worker actors per replica (default " << o.num_workers
      << ")\n"
      << "  --actors N          trainer actors per process (default " << o.actors << ")\n"
      << "  --lr X              SGD learning rate (default " << o.lr << ")\n"
      << "  --model mlp|cnn     (default " << o.model << ")\n"
      << "  --comm-hook NAME    allreduce, fp16, bf16 or powersgd (default: DDP's average)\n"
      << "  --device DEV        cpu, cuda or cuda:N (default cpu)\n"
      << "  --resume PATH       continue from a checkpoint (of a job of any world size)\n"
      << "  --checkpoint-every N  also checkpoint every N steps (default: at epoch ends)\n"
      << "  --max-steps N       stop after N steps in all (default: no limit)\n"
      << "  --trace PATH        write a Chrome trace of the run\n"
      << "  --plot 0|1          draw curves.png with gnuplot (default 1)\n"
      << "  --sample-log PATH   each step's samples, per rank (tests)\n";
}

} // namespace

options parse(int argc, char** argv, const char* program) {
  options o;
  o.data = ACTORCH_DIGITS_CSV;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      print_usage(program, o);
      std::exit(0);
    }
    ACTORCH_CHECK(i + 1 < argc, program, ": option ", a, " needs a value");
    const std::string v = argv[++i];
    const std::string what = std::string(program) + ": " + a;
    auto number = [&](int64_t lo) { return parse_int(v, what, lo); };
    if (a == "--data")
      o.data = v;
    else if (a == "--out")
      o.out = v;
    else if (a == "--epochs")
      o.epochs = number(1);
    else if (a == "--batch-size")
      o.batch_size = number(1);
    else if (a == "--num-workers")
      o.num_workers = number(0);
    else if (a == "--actors")
      o.actors = int(number(1));
    else if (a == "--lr")
      o.lr = parse_double(v, what);
    else if (a == "--trace")
      o.trace = v;
    else if (a == "--resume")
      o.resume = v;
    else if (a == "--checkpoint-every")
      o.checkpoint_every = number(0);
    else if (a == "--max-steps")
      o.max_steps = number(1);
    else if (a == "--device")
      o.device = device(v);
    else if (a == "--plot")
      o.plot = number(0) != 0;
    else if (a == "--model")
      o.model = v;
    else if (a == "--comm-hook")
      o.comm_hook = v;
    else if (a == "--sample-log")
      o.sample_log = v;
    else
      ACTORCH_FAIL(
          program, ": unknown option ", a,
          " (known: --data --out --epochs --batch-size --num-workers --actors --lr "
          "--trace --resume --checkpoint-every --max-steps --device --plot --model --comm-hook "
          "--sample-log)");
  }
  ACTORCH_CHECK(o.comm_hook.empty() || o.comm_hook == "allreduce" || o.comm_hook == "fp16" ||
                    o.comm_hook == "bf16" || o.comm_hook == "powersgd",
                program, ": --comm-hook must be allreduce, fp16, bf16 or powersgd, not ",
                o.comm_hook);
  ACTORCH_CHECK(o.model == "mlp" || o.model == "cnn", program, ": --model must be mlp or cnn, not ",
                o.model);
  return o;
}

namespace {

// The fixed 80/20 split of examples/digits_mlp: the first 80% of a seeded permutation train.
struct split {
  std::vector<int64_t> train, test;
};

split split_of(int64_t n) {
  generator g(0);
  const tensor order = randperm(n, {}, &g);
  const auto* p = order.data_ptr<int64_t>();
  const int64_t n_train = n * 8 / 10;
  return {std::vector<int64_t>(p, p + n_train), std::vector<int64_t>(p + n_train, p + n)};
}

// The per-sample transform the dataset workers apply: pixels to [0, 1], Normalize with the
// file's pixel mean and std (as MNIST's (0.1307,), (0.3081,)), flattened for the MLP and kept
// a 1x8x8 image for the CNN.
data::transforms::transform pixel_transform(bool flat) {
  using namespace data::transforms;
  std::vector<transform> steps{lambda_([](const tensor& img) {
                                 return img.div(16.0).view({1, 8, 8});
                               }),
                               normalize({0.3053}, {0.3760})};
  if (flat)
    steps.push_back(lambda_([](const tensor& img) { return img.reshape({64}); }));
  return compose(steps);
}

} // namespace

std::shared_ptr<nn::sequential> cnn_layers(generator* gen) {
  return std::make_shared<nn::sequential>(std::initializer_list<std::shared_ptr<nn::module>>{
      std::make_shared<nn::conv2d>(1, 16, 3, 1, 1, 1, 1, true, "zeros", gen),
      std::make_shared<nn::relu>(),
      std::make_shared<nn::conv2d>(16, 32, 3, 1, 1, 1, 1, true, "zeros", gen),
      std::make_shared<nn::relu>(), std::make_shared<nn::max_pool2d>(2),
      std::make_shared<nn::dropout2d>(0.25), std::make_shared<nn::flatten>(),
      std::make_shared<nn::linear>(512, 128, true, gen), std::make_shared<nn::relu>(),
      std::make_shared<nn::dropout>(0.5), std::make_shared<nn::linear>(128, 10, true, gen)});
}

actors::trainer_spec make_spec(const options& o, std::vector<int64_t>* test_indices) {
  auto digits = std::make_shared<data::digits_dataset>(o.data);
  const split s = split_of(digits->size());
  if (test_indices)
    *test_indices = s.test;
  const auto transform = pixel_transform(o.model == "mlp");
  auto train = std::make_shared<data::transforms::transformed_dataset>(
      std::make_shared<data::subset>(digits, s.train), transform);

  // The test split as two tensors, transformed once, for evaluation on rank 0.
  std::vector<tensor> xs;
  for (int64_t i : s.test)
    xs.push_back(transform(digits->images().select(0, i)));
  const tensor test_idx = as_tensor(s.test, {int64_t(s.test.size())}, {});
  const tensor test_x = stack(xs, 0), test_y = digits->labels().index_select(0, test_idx);

  actors::trainer_spec spec;
  spec.make_model = [cnn = o.model == "cnn"](const actors::replica_info&) {
    generator g(42);
    if (cnn)
      return cnn_layers(&g);
    return std::make_shared<nn::sequential>(std::initializer_list<std::shared_ptr<nn::module>>{
        std::make_shared<nn::linear>(64, 128, true, &g), std::make_shared<nn::relu>(),
        std::make_shared<nn::linear>(128, 10, true, &g)});
  };
  const double lr = o.lr;
  spec.make_optimizer = [lr](nn::module& m) {
    return std::make_unique<optim::sgd>(m.parameters(),
                                        optim::sgd_options{.lr = lr, .momentum = 0.9});
  };
  spec.forward = [](dist::distributed_data_parallel& m, const data::sample& b) {
    const tensor x = b[0].as_tensor(), y = b[1].as_tensor().to(dtype::int64);
    const tensor out = m(x);
    return actors::step_result{nn::functional::cross_entropy(out, y), x.size(0),
                               out.argmax(1).eq(y).sum().item<int64_t>()};
  };
  spec.evaluate = [test_x, test_y](nn::module& m) {
    const device on = m.parameters().front().device();
    const double acc =
        m(test_x.to(on)).argmax(1).eq(test_y.to(on)).to(dtype::float64).mean().item<double>();
    return std::map<std::string, double>{{"test_accuracy", acc}};
  };
  if (o.comm_hook == "allreduce")
    spec.comm_hook = dist::hooks::allreduce_hook;
  else if (o.comm_hook == "fp16")
    spec.comm_hook = dist::hooks::fp16_compress_hook;
  else if (o.comm_hook == "bf16")
    spec.comm_hook = dist::hooks::bf16_compress_hook;
  else if (o.comm_hook == "powersgd")
    spec.comm_hook = [] {
      return dist::hooks::powersgd_hook(std::make_shared<dist::hooks::powersgd_state>(
          dist::hooks::powersgd_options{.start_powersgd_iter = 10}));
    };
  if (!o.sample_log.empty()) {
    const char* launch_rank = std::getenv("RANK");
    // Appended to: a replacement for a lost rank writes where that rank wrote.
    auto log = std::make_shared<std::ofstream>(
        o.sample_log + "." + (launch_rank ? launch_rank : std::string("0")), std::ios::app);
    ACTORCH_CHECK(*log, "digits: cannot write the sample log ", o.sample_log);
    spec.on_step_samples = [log, pid = ::getpid()](const actors::replica_info&,
                                                   const actors::step_samples& st) {
      *log << pid << ' ' << st.epoch << ' ' << st.membership << ' ' << st.step << ' '
           << (st.done ? "done" : "taken") << ' ';
      for (size_t i = 0; i < st.indices.size(); ++i)
        *log << (i ? "," : "") << st.indices[i];
      *log << std::endl; // flushed: the process may be killed at any moment
    };
  }
  spec.dataset = train;
  spec.loader.batch_size = o.batch_size;
  spec.loader.shuffle = true;
  spec.loader.num_workers = o.num_workers;
  spec.epochs = o.epochs;
  spec.seed = 1;
  spec.checkpoint = (std::filesystem::path(o.out) / "digits_ddp.safetensors").string();
  spec.resume = o.resume;
  spec.checkpoint_every = o.checkpoint_every;
  spec.max_steps = o.max_steps;
  spec.device = o.device;
  return spec;
}

namespace {

std::string bar(double fraction, int width = 24) {
  const int full = int(fraction * width + 0.5);
  return "[" + std::string(size_t(full), '#') + std::string(size_t(width - full), '-') + "]";
}

// The live display of process 0: a bar per epoch fed by its local replicas' steps (redrawn
// in place on a terminal), and one line per epoch with the job-wide numbers.
class progress_display {
public:
  progress_display(int64_t epochs, int num_processes)
      : epochs_(epochs), num_processes_(num_processes), tty_(::isatty(STDOUT_FILENO) != 0),
        start_(std::chrono::steady_clock::now()) {}

  void step(const actors::train_progress& p) {
    if (p.epoch != epoch_) {
      epoch_ = p.epoch;
      loss_ = 0;
      samples_ = correct_ = 0;
      epoch_start_ = p.time;
    }
    loss_ += p.loss * double(p.samples);
    samples_ += p.samples;
    correct_ += std::max<int64_t>(p.correct, 0);
    if (!tty_ || p.rank != 0)
      return;
    const double secs = std::chrono::duration<double>(p.time - epoch_start_).count();
    std::printf("\repoch %3lld/%lld %s loss %.4f  acc %5.1f%%  %7.0f samples/s ",
                static_cast<long long>(p.epoch + 1), static_cast<long long>(epochs_),
                bar(double(p.step + 1) / double(p.steps_per_epoch)).c_str(),
                loss_ / double(samples_), 100.0 * double(correct_) / double(samples_),
                secs > 0 ? double(samples_) * num_processes_ / secs : 0.0);
    std::fflush(stdout);
  }

  void epoch(const actors::epoch_summary& s) {
    const auto it = s.eval.find("test_accuracy");
    std::printf("%sepoch %3lld/%lld %s loss %.4f  train acc %5.1f%%  test acc %5.1f%%  %7.0f "
                "samples/s\n",
                tty_ ? "\r" : "", static_cast<long long>(s.epoch + 1),
                static_cast<long long>(epochs_), bar(double(s.epoch + 1) / double(epochs_)).c_str(),
                s.loss, 100.0 * s.accuracy, it == s.eval.end() ? -1.0 : 100.0 * it->second,
                double(s.samples) / s.seconds);
    std::fflush(stdout);
  }

  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

private:
  int64_t epochs_;
  int num_processes_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point epoch_start_{};
  int64_t epoch_ = -1;
  double loss_ = 0;
  int64_t samples_ = 0, correct_ = 0;
};

std::string metrics_csv(const std::vector<actors::epoch_summary>& epochs) {
  std::ostringstream os;
  os << "epoch,loss,train_accuracy,test_accuracy,samples_per_s,seconds\n";
  for (const auto& s : epochs) {
    const auto it = s.eval.find("test_accuracy");
    os << s.epoch + 1 << ',' << s.loss << ',' << s.accuracy << ','
       << (it == s.eval.end() ? -1.0 : it->second) << ',' << double(s.samples) / s.seconds << ','
       << s.seconds << '\n';
  }
  return os.str();
}

// curves.png: the loss and the two accuracies per epoch, drawn by gnuplot from metrics.csv.
void plot(const std::filesystem::path& dir, const std::string& model) {
  const auto script = dir / "curves.gp";
  write_file_atomically(script.string(),
                        "set datafile separator ','\n"
                        "set terminal png size 1000,420\n"
                        "set output '" +
                            (dir / "curves.png").string() +
                            "'\n"
                            "set multiplot layout 1,2 title 'digits " +
                            (model == "cnn" ? std::string("CNN") : std::string("MLP")) +
                            ", data-parallel'\n"
                            "set xlabel 'epoch'\nset grid\n"
                            "set ylabel 'loss'\n"
                            "plot '" +
                            (dir / "metrics.csv").string() +
                            "' every ::1 using 1:2 with linespoints title 'train loss'\n"
                            "set ylabel 'accuracy'\nset yrange [0:1]\nset key bottom right\n"
                            "plot '" +
                            (dir / "metrics.csv").string() +
                            "' every ::1 using 1:3 with linespoints title 'train', '' every ::1 "
                            "using 1:4 with linespoints title 'test'\n"
                            "unset multiplot\n");
  const std::string cmd = "gnuplot '" + script.string() + "'";
  const int rc = std::system(cmd.c_str());
  ACTORCH_CHECK(rc == 0, "digits: `", cmd, "` failed with status ", rc,
                " (is gnuplot installed? scripts/setup.sh installs gnuplot-nox)");
}

} // namespace

double run(const options& o, std::shared_ptr<dist::process_group> pg) {
  const int rank = pg ? pg->rank() : 0;
  const int nproc = pg ? pg->size() : 1;
  std::filesystem::create_directories(o.out);
  std::vector<int64_t> test_indices;
  const actors::trainer_spec spec = make_spec(o, &test_indices);
  if (rank == 0)
    std::printf("digits: %s, %lld train samples, %d process(es) x %d trainer actor(s), batch "
                "%lld per replica, %lld epochs\n",
                o.model == "cnn" ? "CNN" : "MLP", static_cast<long long>(spec.dataset->size()),
                nproc, o.actors, static_cast<long long>(o.batch_size),
                static_cast<long long>(o.epochs));
  progress_display display(o.epochs, nproc);
  const std::filesystem::path dir(o.out);
  std::vector<actors::epoch_summary> done;
  actors::job_options jo;
  jo.num_local = o.actors;
  jo.process_group = pg;
  jo.trace = o.trace;
  // Every process listens, and the one that is rank 0 at an epoch's end reports it: an elastic
  // job that lost rank 0 goes on with another.
  jo.on_progress = [&](const actors::train_progress& p) {
    if (p.rank / o.actors == 0) // a replica of process 0
      display.step(p);
  };
  jo.on_epoch = [&](const actors::epoch_summary& s) {
    if (s.process_rank != 0)
      return;
    display.epoch(s);
    done.push_back(s);
    write_file_atomically((dir / "metrics.csv").string(), metrics_csv(done), "digits");
  };
  const actors::job_report report = actors::train_data_parallel(spec, jo);
  if (report.process_rank != 0)
    return 0;
  if (done.empty() && o.max_steps > 0) { // stopped in the middle of the first epoch it ran
    std::printf("stopped after --max-steps %lld; %s resumes it\n",
                static_cast<long long>(o.max_steps), spec.checkpoint.c_str());
    return 0;
  }
  if (done.empty()) {
    std::printf("nothing to train: the checkpoint is already at epoch %lld\n",
                static_cast<long long>(o.epochs));
    return -1;
  }
  if (o.plot)
    plot(dir, o.model);
  // For PyTorch: the model alone, keyed as torch.nn.Sequential's state_dict() names it, so
  // `model.load_state_dict(load_file("model.safetensors"))` takes it as it is; and the test
  // split's indices into the digits file, to evaluate it on the same samples.
  save_safetensors((dir / "model.safetensors").string(), checkpoint_model_state(spec.checkpoint));
  save_npy((dir / "test_indices.npy").string(),
           as_tensor(test_indices, {int64_t(test_indices.size())}, {}));
  const auto& last = done.back().eval;
  const double acc = last.count("test_accuracy") ? last.at("test_accuracy") : -1;
  std::printf("test accuracy %.4f after %lld epochs in %.1f s%s\n", acc,
              static_cast<long long>(done.back().epoch + 1), display.seconds(),
              report.zero_redundancy ? " (optimizer step sharded over the replicas)" : "");
  std::printf("wrote %s, %s, %s, %s, %s%s%s\n", spec.checkpoint.c_str(),
              (dir / "model.safetensors").c_str(), (dir / "test_indices.npy").c_str(),
              (dir / "metrics.csv").c_str(), o.plot ? (dir / "curves.png").c_str() : "(no plot)",
              o.trace.empty() ? "" : ", ", o.trace.c_str());
  return acc;
}

} // namespace digits
