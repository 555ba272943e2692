// The trainer actors and train_data_parallel (trainer.hpp). Each trainer actor is detached:
// forward, backward and the optimizer step block its own thread, which is the replica's one
// compute thread. The job's monitor is a scoped actor on the caller's thread.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "actors/comm_actor.hpp"
#include "actors/trainer.hpp"
#include "actors/trainer_messages.hpp"
#include "base/parse.hpp"
#include "core/autograd/grad_mode.hpp"
#include "core/cuda/stream.hpp"
#include "core/cuda/timeline.hpp"
#include "core/cuda_memory.hpp"
#include "core/data/distributed_sampler.hpp"
#include "core/ops/factory.hpp"
#include "core/serialize/checkpoint.hpp"

namespace actorch::actors {

namespace {

// The loader position in checkpoint metadata: "epoch;b0,b1,...;seed:offset;seed:offset|-".
std::string encode_loader_state(const data::loader_state& s) {
  std::ostringstream os;
  os << s.epoch << ';';
  for (size_t i = 0; i < s.delivered.size(); ++i)
    os << (i ? "," : "") << s.delivered[i];
  os << ';' << s.loader_generator.seed << ':' << s.loader_generator.offset << ';';
  if (s.sampler_generator)
    os << s.sampler_generator->seed << ':' << s.sampler_generator->offset;
  else
    os << '-';
  return os.str();
}

data::loader_state decode_loader_state(const std::string& text, const std::string& path) {
  const std::string what = "train_data_parallel: " + path + ": the \"loader\" metadata \"" + text +
                           "\" (epoch;indices;seed:offset;seed:offset|-)";
  auto split = [](std::string_view s, char sep) {
    std::vector<std::string_view> out;
    for (size_t pos = 0;;) {
      const size_t at = s.find(sep, pos);
      out.push_back(s.substr(pos, at == std::string_view::npos ? s.npos : at - pos));
      if (at == std::string_view::npos)
        return out;
      pos = at + 1;
    }
  };
  const auto parts = split(text, ';');
  ACTORCH_CHECK(parts.size() == 4, what, " has ", parts.size(), " fields, not 4");
  auto gen_state = [&](std::string_view p, const char* field) {
    const auto seed_offset = split(p, ':');
    ACTORCH_CHECK(seed_offset.size() == 2, what, ": the ", field, " is not seed:offset");
    return generator::state{parse_uint(seed_offset[0], what + ", " + field + " seed"),
                            parse_uint(seed_offset[1], what + ", " + field + " offset")};
  };
  data::loader_state s;
  s.epoch = parse_int(parts[0], what + ", epoch", 0);
  if (!parts[1].empty())
    for (std::string_view item : split(parts[1], ','))
      s.delivered.push_back(parse_int(item, what + ", a delivered index", 0));
  s.loader_generator = gen_state(parts[2], "loader generator");
  if (parts[3] != "-")
    s.sampler_generator = gen_state(parts[3], "sampler generator");
  return s;
}

int64_t meta_int(const std::map<std::string, std::string>& meta, const char* key,
                 const std::string& path) {
  const auto it = meta.find(key);
  ACTORCH_CHECK(it != meta.end(), "train_data_parallel: ", path, " has no \"", key,
                "\" metadata (not a checkpoint written by train_data_parallel)");
  return parse_int(it->second,
                   "train_data_parallel: " + path + ": metadata \"" + std::string(key) + "\"", 0);
}

void check_spec(const trainer_spec& spec, const job_options& opts) {
  ACTORCH_CHECK(spec.make_model && spec.make_optimizer && spec.forward,
                "train_data_parallel: the spec needs make_model, make_optimizer and forward");
  ACTORCH_CHECK((spec.dataset != nullptr) != bool(spec.batch_fn),
                "train_data_parallel: give the spec either a dataset or a batch_fn (not both)");
  ACTORCH_CHECK(!spec.batch_fn || spec.steps_per_epoch > 0,
                "train_data_parallel: batch_fn needs steps_per_epoch > 0 but got ",
                spec.steps_per_epoch);
  ACTORCH_CHECK(spec.loader.sampler == nullptr && spec.loader.batch_sampler == nullptr,
                "train_data_parallel: loader.sampler and loader.batch_sampler must be unset: each "
                "replica samples its shard through a DistributedSampler (set loader.shuffle)");
  ACTORCH_CHECK(spec.loader.generator == nullptr,
                "train_data_parallel: loader.generator must be unset: each replica seeds its own "
                "from spec.seed (one generator shared by replicas would make runs differ)");
  ACTORCH_CHECK(spec.epochs >= 0, "train_data_parallel: epochs must be >= 0 but got ", spec.epochs);
  ACTORCH_CHECK(spec.checkpoint_every >= 0,
                "train_data_parallel: checkpoint_every must be >= 0 but got ",
                spec.checkpoint_every);
  ACTORCH_CHECK(opts.num_local >= 1, "train_data_parallel: num_local must be >= 1 but got ",
                opts.num_local);
  if (spec.device.is_cuda()) {
    ACTORCH_CHECK(!opts.process_group || opts.process_group->collective_device().is_cuda(),
                  "train_data_parallel: replicas on ", spec.device,
                  " need an nccl process group, but the job's is ", opts.process_group->backend());
    const std::string problem = cuda_device_problem(spec.device.index);
    ACTORCH_CHECK(problem.empty(), "train_data_parallel: replicas on ", spec.device,
                  " need that GPU: ", problem);
    ACTORCH_CHECK(!opts.process_group || opts.process_group->collective_device() == spec.device,
                  "train_data_parallel: this process's replica 0 trains on ", spec.device,
                  " but its nccl process group runs on ", opts.process_group->collective_device(),
                  "; make the group on ", spec.device);
  }
}

// trainer_spec::device: local replica i on cuda:((index + i) mod the GPU count).
std::vector<device> replica_devices(const device& d, int num_local) {
  std::vector<device> out(size_t(num_local), d);
  if (d.is_cuda())
    for (int i = 0; i < num_local; ++i)
      out[size_t(i)].index = (d.index + i) % cuda::device_count();
  return out;
}

// Bucket spans for the trace: a bucket's ready time, kept until it is reduced.
void trace_buckets(dist::reducer& r, int rank) {
  if (!trace::enabled())
    return;
  struct pending {
    std::mutex mu;
    std::map<std::pair<int64_t, size_t>, trace::clock::time_point> ready;
  };
  auto p = std::make_shared<pending>();
  const std::string lane = "buckets " + std::to_string(rank);
  r.set_observer([p, lane](const dist::bucket_event& e) {
    std::lock_guard lock(p->mu);
    const auto key = std::make_pair(e.iteration, e.bucket);
    if (e.kind == dist::bucket_event::ready) {
      p->ready[key] = e.time;
      return;
    }
    const auto it = p->ready.find(key);
    if (it == p->ready.end())
      return;
    trace::record(lane, "bucket " + std::to_string(e.bucket), it->second, e.time,
                  "\"iteration\": " + std::to_string(e.iteration) +
                      ", \"bytes\": " + std::to_string(e.bytes));
    p->ready.erase(it);
  });
}

// One replica's whole run, on its trainer actor's thread.
class replica_run {
public:
  replica_run(const trainer_spec& spec, replica_info info,
              std::shared_ptr<dist::replica_group> group, caf::event_based_actor* self,
              caf::actor monitor)
      : spec_(spec), info_(info), group_(std::move(group)), self_(self),
        monitor_(std::move(monitor)), lane_("trainer " + std::to_string(info.rank)),
        device_(group_->collective_device()) {} // where train_data_parallel placed it

  replica_report run() {
    replica_report report;
    report.rank = info_.rank;
    if (device_.is_cuda()) {
      cuda::set_device(device_.index); // this trainer thread's kernels go to its GPU
      if (trace::enabled())
        gpu_steps_.emplace(cuda::current_stream(device_.index), lane_ + " (" + device_.str() + ")");
    }
    model_ = spec_.make_model(info_);
    ACTORCH_CHECK(model_ != nullptr, "train_data_parallel: make_model returned null");
    model_->to(device_);
    if (spec_.sync_batchnorm)
      dist::convert_sync_batchnorm(*model_, group_);
    opt_ = spec_.make_optimizer(*model_);
    ACTORCH_CHECK(opt_ != nullptr, "train_data_parallel: make_optimizer returned null");
    int64_t epoch = 0, step = 0, total = 0;
    std::optional<data::loader_state> resume_state;
    if (!spec_.resume.empty()) {
      const auto meta = load_checkpoint(spec_.resume, *model_, *opt_);
      epoch = meta_int(meta, "epoch", spec_.resume);
      step = meta_int(meta, "step", spec_.resume);
      total = meta_int(meta, "total_steps", spec_.resume);
      if (spec_.dataset) {
        ACTORCH_CHECK(meta.count("loader"), "train_data_parallel: ", spec_.resume,
                      " has no \"loader\" metadata");
        resume_state = decode_loader_state(meta.at("loader"), spec_.resume);
      }
    }
    ddp_ = std::make_unique<dist::distributed_data_parallel>(model_, group_, spec_.ddp);
    if (spec_.comm_hook)
      ddp_->register_comm_hook(spec_.comm_hook());
    trace_buckets(ddp_->reducer(), info_.rank);
    if (spec_.dataset) {
      data::loader_options lo = spec_.loader;
      lo.sampler = std::make_shared<data::distributed_sampler>(
          spec_.dataset->size(), info_.world_size, info_.rank, spec_.loader.shuffle, spec_.seed,
          spec_.loader.drop_last);
      lo.shuffle = false;
      lo.generator = std::make_shared<generator>(spec_.seed);
      if (device_.is_cuda()) { // Note [Device prefetch]
        lo.device = device_;
        lo.pin_memory = true;
      }
      loader_ = std::make_unique<data::data_loader>(spec_.dataset, lo);
      if (lo.num_workers > 0)
        loader_->set_actor_system(self_->system()); // the job's system, not one per replica
      if (resume_state)
        loader_->load_state(*resume_state);
    }
    total_ = total;
    for (; epoch < spec_.epochs && !limit_reached(); ++epoch) {
      run_epoch(epoch, step, report);
      step = 0;
    }
    return report;
  }

private:
  bool limit_reached() const { return spec_.max_steps >= 0 && total_ >= spec_.max_steps; }

  int64_t steps_per_epoch() const {
    return spec_.dataset ? loader_->size() : spec_.steps_per_epoch;
  }

  void run_epoch(int64_t epoch, int64_t first_step, replica_report& report) {
    const auto begin = trace::clock::now();
    // Job-wide epoch numbers: loss x samples, samples, correct; reduced at the epoch's end.
    double loss_sum = 0;
    int64_t samples = 0, correct = 0;
    bool counted = true;
    int64_t step = first_step;
    auto train_step = [&](const data::sample& batch) {
      if (gpu_steps_)
        gpu_steps_->begin("step " + std::to_string(step));
      opt_->zero_grad();
      step_result r;
      {
        trace::span s(lane_, "forward");
        r = spec_.forward(*ddp_, batch);
      }
      {
        trace::span s(lane_, "backward");
        r.loss.backward();
      }
      {
        trace::span s(lane_, "optimizer step");
        opt_->step();
      }
      if (gpu_steps_)
        gpu_steps_->end();
      const double loss = r.loss.item<double>();
      if (gpu_steps_)
        gpu_steps_->flush();
      loss_sum += loss * double(r.samples);
      samples += r.samples;
      counted = counted && r.correct >= 0;
      correct += std::max<int64_t>(r.correct, 0);
      const auto now = trace::clock::now();
      if (info_.local_rank == 0)
        report.step_end_times.push_back(now);
      self_->send(monitor_, progress_atom::value,
                  train_progress{info_.rank, epoch, step, steps_per_epoch(), loss, r.samples,
                                 r.correct, now});
      ++step;
      ++total_;
      if (spec_.checkpoint_every > 0 && total_ % spec_.checkpoint_every == 0 &&
          step < steps_per_epoch())
        save(epoch, step);
    };
    if (spec_.dataset) {
      // A resumed loader starts where the checkpoint left it; otherwise at `epoch`.
      auto it = loader_->begin();
      while (!(it == loader_->end()) && !limit_reached()) {
        train_step(*it);
        trace::span s(lane_, "next batch");
        ++it;
      }
    } else {
      while (step < spec_.steps_per_epoch && !limit_reached()) {
        data::sample batch = spec_.batch_fn(info_, step);
        batch.for_each_tensor([&](tensor& t) { t = t.to(device_); });
        train_step(batch);
      }
    }
    if (limit_reached() && step < steps_per_epoch())
      return; // a partial epoch: no summary
    // The epoch's numbers over every replica: one small collective every replica issues.
    tensor sums = zeros({3}, {.dtype = dtype::float64});
    auto* p = sums.data_ptr<double>();
    p[0] = loss_sum;
    p[1] = double(samples);
    p[2] = counted ? double(correct) : -1e18;
    dist::work w = group_->all_reduce(sums.to(group_->collective_device()), dist::reduce_op::sum);
    w.wait();
    const tensor reduced = w.result().at(0).cpu();
    const double* q = reduced.data_ptr<double>();
    epoch_summary sum;
    sum.epoch = epoch;
    sum.samples = int64_t(q[1]);
    sum.loss = q[1] > 0 ? q[0] / q[1] : 0;
    sum.accuracy = q[2] >= 0 && q[1] > 0 ? q[2] / q[1] : -1;
    sum.seconds = std::chrono::duration<double>(trace::clock::now() - begin).count();
    if (info_.rank == 0 && spec_.evaluate) {
      trace::span s(lane_, "evaluate");
      no_grad guard;
      model_->eval();
      sum.eval = spec_.evaluate(*model_);
      model_->train();
    }
    save(epoch + 1, 0);
    if (info_.local_rank == 0)
      self_->send(monitor_, epoch_end_atom::value, std::move(sum));
  }

  // Rank 0 writes the checkpoint, then every replica waits for it (a barrier through the
  // replica group), so a resume never sees a half-written file.
  void save(int64_t epoch, int64_t step) {
    if (spec_.checkpoint.empty())
      return;
    if (info_.rank == 0) {
      trace::span s(lane_, "checkpoint");
      std::map<std::string, std::string> meta{{"epoch", std::to_string(epoch)},
                                              {"step", std::to_string(step)},
                                              {"total_steps", std::to_string(total_)}};
      if (loader_) {
        data::loader_state ls = loader_->state();
        if (step == 0) { // the next epoch from its start
          ls.epoch = epoch;
          ls.delivered.clear();
        }
        meta["loader"] = encode_loader_state(ls);
      }
      save_checkpoint(spec_.checkpoint, *model_, *opt_, meta);
    }
    tensor token = zeros({1}, {.device = group_->collective_device()});
    group_->all_reduce(token, dist::reduce_op::sum).synchronize(); // a barrier: the host waits
  }

  const trainer_spec& spec_;
  replica_info info_;
  std::shared_ptr<dist::replica_group> group_;
  caf::event_based_actor* self_;
  caf::actor monitor_;
  std::string lane_;
  device device_; // where this replica trains
  std::shared_ptr<nn::module> model_;
  std::unique_ptr<optim::optimizer> opt_;
  std::unique_ptr<dist::distributed_data_parallel> ddp_;
  std::unique_ptr<data::data_loader> loader_;
  // On a GPU while tracing: each step as its stream ran it, next to the loader's copies.
  std::optional<cuda::stream_timeline> gpu_steps_;
  int64_t total_ = 0;
};

// Each process writes its part; process 0 merges them once all are written (same host: the
// parts sit next to the target).
void write_trace(const std::string& path, dist::process_group* pg) {
  trace::enable(false);
  const int rank = pg ? pg->rank() : 0;
  const std::string part = pg ? path + ".part" + std::to_string(rank) : path;
  trace::write_chrome_json(part, rank, "process " + std::to_string(rank));
  if (!pg)
    return;
  pg->barrier().wait();
  if (rank == 0) {
    std::vector<std::string> parts;
    for (int r = 0; r < pg->size(); ++r)
      parts.push_back(path + ".part" + std::to_string(r));
    trace::merge_chrome_json(parts, path);
    for (const auto& p : parts)
      std::remove(p.c_str());
  }
  pg->barrier().wait();
}

caf::behavior trainer_actor(caf::event_based_actor* self, const trainer_spec* spec,
                            replica_info info, std::shared_ptr<dist::replica_group> group,
                            caf::actor monitor) {
  return {
      [=](train_atom) {
        replica_report report;
        try {
          report = replica_run(*spec, info, group, self, monitor).run();
        } catch (const std::exception& e) {
          report.error = e.what();
        }
        report.rank = info.rank;
        self->send(monitor, done_atom::value, std::move(report));
        self->quit();
      },
  };
}

} // namespace

job_report train_data_parallel(const trainer_spec& given, const job_options& opts) {
  check_spec(given, opts);
  trainer_spec spec = given;
  const char* restart_env = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const int64_t restart =
      restart_env != nullptr ? parse_int(restart_env, "TORCHELASTIC_RESTART_COUNT", 0) : 0;
  const bool resumes_on_its_own = restart > 0 && spec.resume.empty() && !spec.checkpoint.empty() &&
                                  std::filesystem::exists(spec.checkpoint);
  if (resumes_on_its_own)
    spec.resume = spec.checkpoint; // see trainer_spec::resume
  if (!opts.trace.empty()) {
    trace::clear();
    trace::enable();
  }
  caf::actor_system_config cfg;
  // The trainers are detached (their own threads); the scheduler runs only the comm actor and
  // the loaders' sampler. The sharing policy's workers sleep on a condition variable, where the
  // default work-stealing workers poll for a while after each message and take CPU time
  // from the trainers' compute threads.
  cfg.set("scheduler.max-threads", size_t(2));
  cfg.set("scheduler.policy", caf::atom("sharing"));
  caf::actor_system sys{cfg};
  auto exchange = spawn_comm_actor(sys, opts.process_group);
  if (resumes_on_its_own && exchange->process_rank() == 0)
    std::printf("train_data_parallel: restart %lld of the job: resuming from %s\n",
                static_cast<long long>(restart), spec.resume.c_str());
  // The replicas meet in local_replicas, whose comm actor crosses processes, on the CPU or on
  // GPUs (Note [Replicas on GPUs] in comm/ddp/replica_group.cpp). One GPU replica per process
  // instead goes straight to the job's NCCL group, whose collectives order themselves after
  // the trainer's stream (Note [NCCL stream order]) without the host waiting.
  std::shared_ptr<dist::local_replicas> locals;
  std::shared_ptr<dist::replica_group> gpu_group;
  if (spec.device.is_cuda() && opts.num_local == 1 && opts.process_group)
    gpu_group = dist::process_replicas(opts.process_group);
  else
    locals = std::make_shared<dist::local_replicas>(opts.num_local, exchange,
                                                    replica_devices(spec.device, opts.num_local));
  caf::scoped_actor monitor{sys};
  std::vector<caf::actor> trainers;
  for (int i = 0; i < opts.num_local; ++i) {
    replica_info info;
    info.local_rank = i;
    info.num_local = opts.num_local;
    info.process_rank = exchange->process_rank();
    info.num_processes = exchange->num_processes();
    info.rank = info.process_rank * opts.num_local + i;
    info.world_size = opts.num_local * info.num_processes;
    auto t = sys.spawn<caf::detached>(trainer_actor, &spec, info,
                                      locals ? locals->replica(i) : gpu_group,
                                      caf::actor_cast<caf::actor>(monitor));
    monitor->monitor(t);
    monitor->send(t, train_atom::value);
    trainers.push_back(std::move(t));
  }
  job_report out;
  std::string failure;
  auto fail = [&](const std::string& msg) {
    if (failure.empty()) {
      failure = msg;
      // The other local replicas may be waiting for this one's part of a collective.
      if (locals)
        locals->abort(std::make_exception_ptr(error(msg)));
    }
  };
  size_t down = 0;
  std::vector<char> reported(size_t(opts.num_local), 0);
  while (down < trainers.size()) {
    monitor->receive(
        [&](progress_atom, const train_progress& p) {
          if (opts.on_progress)
            opts.on_progress(p);
        },
        [&](epoch_end_atom, const epoch_summary& s) {
          out.epochs.push_back(s);
          if (opts.on_epoch)
            opts.on_epoch(s);
        },
        [&](done_atom, replica_report& r) {
          reported[size_t(r.rank - exchange->process_rank() * opts.num_local)] = 1;
          if (!r.error.empty())
            fail("train_data_parallel: replica " + std::to_string(r.rank) + " failed: " + r.error);
          if (r.rank == exchange->process_rank() * opts.num_local)
            out.step_end_times = std::move(r.step_end_times);
        },
        [&](const caf::down_msg& d) {
          ++down;
          for (size_t i = 0; i < trainers.size(); ++i)
            if (trainers[i].address() == d.source && !reported[i])
              fail("train_data_parallel: the trainer actor of replica " +
                   std::to_string(exchange->process_rank() * opts.num_local + int(i)) +
                   " stopped without finishing (" + sys.render(d.reason) + ")");
        });
  }
  ACTORCH_CHECK(failure.empty(), failure);
  if (!opts.trace.empty())
    write_trace(opts.trace, opts.process_group.get());
  return out;
}

} // namespace actorch::actors
