// The trainer actors and train_data_parallel (trainer.hpp). Each trainer actor is detached:
// forward, backward and the optimizer step block its own thread, which is the replica's one
// compute thread. The job's monitor is a scoped actor on the caller's thread.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "actors/process_link.hpp"
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
  replica_run(const trainer_spec& spec, replica_info info, process_link& link,
              caf::event_based_actor* self, caf::actor monitor)
      : spec_(spec), info_(info), link_(link), group_(link.replica(info.local_rank)), self_(self),
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
    int64_t offset = 0; // an elastic job's position in the first epoch's order
    if (link_.replacement()) {
      // A replacement for a lost rank: the others' live state and position, as a survivor
      // takes them after healing (Note [Elastic healing]).
      prime_optimizer();
      total_ = -1; // the furthest survivor's state wins
      sync_state(0);
      epoch = epoch_;
      step = epoch_step_;
      total = total_;
      offset = resume_at_;
    } else {
      wrap_model();
    }
    if (spec_.dataset && link_.elastic()) {
      // Each epoch's loader is made by start_segment (Note [Elastic healing]).
    } else if (spec_.dataset) {
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
      epoch_ = epoch;
      if (spec_.dataset && link_.elastic())
        start_segment(epoch, offset);
      run_epoch(epoch, step, report);
      step = 0;
      offset = 0;
    }
    return report;
  }

private:
  bool limit_reached() const { return spec_.max_steps >= 0 && total_ >= spec_.max_steps; }

  void wrap_model() {
    ddp_.reset(); // the old reducer's pending buckets fail with its group
    ddp_ = std::make_unique<dist::distributed_data_parallel>(model_, group_, spec_.ddp);
    if (spec_.comm_hook)
      ddp_->register_comm_hook(spec_.comm_hook());
    trace_buckets(ddp_->reducer(), info_.rank);
  }

  // Runs `f`, a part of the job with collectives; in an elastic job a failure of one of them
  // heals the job (Note [Elastic healing]) and returns false, for the caller to take up its
  // part again from where the survivors stand.
  template <class F> bool healing(F&& f) {
    if (!link_.elastic()) {
      f();
      return true;
    }
    try {
      f();
      return true;
    } catch (const std::exception& e) {
      heal(e.what());
      return false;
    }
  }

  // Steps 2 and 3 of Note [Elastic healing]: the survivors' group, then the furthest state.
  void heal(const std::string& why) {
    const int64_t done_here = consumed(); // counted in the old world's steps
    group_ = link_.regroup(info_, why);
    lane_ = "trainer " + std::to_string(info_.rank);
    sync_state(done_here);
  }

  // A replacement's optimizer makes its state (SGD's momentum, Adam's moments) with a step
  // over zero gradients, so that it has the entries the survivors broadcast into; the step's
  // changes are overwritten with the rest.
  void prime_optimizer() {
    for (tensor p : opt_->params())
      p.set_grad(zeros_like(p));
    opt_->step();
    opt_->zero_grad();
  }

  // Every member of the new group, survivors and replacements, in the same collectives: the
  // most steps done and the lowest rank that did them, whose position (`done_here` its epoch
  // order positions), parameters, buffers and optimizer state everyone takes, checked equal;
  // then DDP over the new group.
  void sync_state(int64_t done_here) {
    tensor most = as_tensor(std::vector<double>{double(total_)}, {1}, {});
    group_->all_reduce(most, dist::reduce_op::max).wait();
    const double furthest = most.data_ptr<double>()[0];
    tensor lowest = as_tensor(
        std::vector<double>{double(total_) == furthest ? double(info_.rank) : 1e18}, {1}, {});
    group_->all_reduce(lowest, dist::reduce_op::min).wait();
    const int src = int(lowest.data_ptr<double>()[0]);
    tensor position = as_tensor(
        std::vector<double>{double(total_), double(done_here), double(epoch_step_), double(epoch_)},
        {4}, {});
    std::vector<tensor> state{position};
    for (auto& [name, t] : model_->named_parameters())
      state.push_back(t.detach());
    for (auto& [name, t] : model_->named_buffers())
      state.push_back(t);
    const optim::optimizer_state os = opt_->state_dict();
    tensor count = as_tensor(std::vector<double>{double(os.tensors.size())}, {1}, {});
    tensor fewest = count.clone();
    group_->all_reduce(count, dist::reduce_op::max).wait();
    group_->all_reduce(fewest, dist::reduce_op::min).wait();
    ACTORCH_CHECK(count.data_ptr<double>()[0] == fewest.data_ptr<double>()[0],
                  "train_data_parallel: cannot heal: the members' optimizers hold different "
                  "state (one has not stepped yet)");
    for (const auto& [name, t] : os.tensors)
      state.push_back(t);
    dist::broadcast_from(*group_, state, src);
    const double* p = position.data_ptr<double>();
    total_ = int64_t(p[0]);
    resume_at_ = int64_t(p[1]);
    epoch_step_ = int64_t(p[2]);
    epoch_ = int64_t(p[3]);
    // Check: every member now holds the same numbers.
    double sum = 0;
    for (size_t i = 1; i < state.size(); ++i)
      sum += state[i].to(dtype::float64).sum().item<double>();
    tensor hi = as_tensor(std::vector<double>{sum}, {1}, {}), lo = hi.clone();
    group_->all_reduce(hi, dist::reduce_op::max).wait();
    group_->all_reduce(lo, dist::reduce_op::min).wait();
    ACTORCH_CHECK(hi.data_ptr<double>()[0] == lo.data_ptr<double>()[0],
                  "train_data_parallel: after healing, the members' states differ (sums ",
                  lo.data_ptr<double>()[0], " and ", hi.data_ptr<double>()[0], ")");
    wrap_model();
  }

  // Elastic jobs: this epoch's loader over this rank's share of the order from `offset` on
  // (Note [Elastic data position]).
  void start_segment(int64_t epoch, int64_t offset) {
    loader_.reset();
    const data::distributed_sampler whole(spec_.dataset->size(), 1, 0, spec_.loader.shuffle,
                                          spec_.seed, spec_.loader.drop_last);
    order_size_ = spec_.dataset->size();
    shard_ = data::remaining_shard(whole.epoch_order(epoch), offset, info_.world_size, info_.rank,
                                   spec_.loader.drop_last);
    segment_offset_ = offset;
    segment_steps_ = 0;
    data::loader_options lo = spec_.loader;
    lo.sampler = std::make_shared<data::list_sampler>(shard_);
    lo.shuffle = false;
    lo.generator = std::make_shared<generator>(spec_.seed + uint64_t(epoch));
    loader_ = std::make_unique<data::data_loader>(spec_.dataset, lo);
    if (lo.num_workers > 0)
      loader_->set_actor_system(self_->system());
  }

  // Elastic jobs: the epoch order's positions the completed steps covered.
  int64_t consumed() const {
    const int64_t batch = spec_.loader.batch_size.value_or(1); // None: a sample a step
    const int64_t done = std::min<int64_t>(segment_steps_ * batch, int64_t(shard_.size()));
    return std::min(order_size_, segment_offset_ + done * info_.world_size);
  }

  // Elastic jobs: this replica's batch of the segment's step `k`, as dataset indices.
  std::vector<int64_t> batch_indices(int64_t k) const {
    const auto b = size_t(spec_.loader.batch_size.value_or(1));
    const size_t first = std::min(size_t(k) * b, shard_.size());
    return std::vector<int64_t>(shard_.begin() + ptrdiff_t(first),
                                shard_.begin() + ptrdiff_t(std::min(first + b, shard_.size())));
  }

  int64_t steps_per_epoch() const {
    if (!spec_.dataset)
      return spec_.steps_per_epoch;
    // An elastic job's loader covers the rest of the epoch from where its segment began.
    return link_.elastic() ? epoch_step_ - segment_steps_ + loader_->size() : loader_->size();
  }

  void run_epoch(int64_t epoch, int64_t first_step, replica_report& report) {
    const auto begin = trace::clock::now();
    // Job-wide epoch numbers: loss x samples, samples, correct; reduced at the epoch's end.
    double loss_sum = 0;
    int64_t samples = 0, correct = 0;
    bool counted = true;
    epoch_step_ = first_step;
    auto train_step = [&](const data::sample& batch) {
      if (gpu_steps_)
        gpu_steps_->begin("step " + std::to_string(epoch_step_));
      if (spec_.on_step_samples)
        spec_.on_step_samples(info_, step_samples{epoch, link_.membership(), segment_steps_, false,
                                                  batch_indices(segment_steps_)});
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
      if (spec_.on_step_samples) // the gradients are reduced: the step's samples are in it
        spec_.on_step_samples(info_,
                              step_samples{epoch, link_.membership(), segment_steps_, true, {}});
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
                  train_progress{info_.rank, epoch, epoch_step_, steps_per_epoch(), loss, r.samples,
                                 r.correct, now});
      ++epoch_step_;
      ++segment_steps_;
      ++total_;
      if (spec_.checkpoint_every > 0 && total_ % spec_.checkpoint_every == 0 &&
          epoch_step_ < steps_per_epoch())
        save(epoch, epoch_step_);
    };
    if (spec_.dataset) {
      // A resumed loader starts where the checkpoint left it; otherwise at `epoch`. In an
      // elastic job a healed step is taken up again by a loader over the survivors' shares.
      for (bool healed = true; healed;) {
        healed = false;
        {
          auto it = loader_->begin();
          while (!(it == loader_->end()) && !limit_reached()) {
            if (!healing([&] { train_step(*it); })) {
              healed = true;
              break;
            }
            trace::span s(lane_, "next batch");
            ++it;
          }
        } // the iterator goes before its loader
        if (healed)
          start_segment(epoch, resume_at_);
      }
    } else {
      while (epoch_step_ < spec_.steps_per_epoch && !limit_reached()) {
        data::sample batch = spec_.batch_fn(info_, epoch_step_);
        batch.for_each_tensor([&](tensor& t) { t = t.to(device_); });
        healing([&] { train_step(batch); });
      }
    }
    if (limit_reached() && epoch_step_ < steps_per_epoch())
      return; // a partial epoch: no summary
    // The epoch's numbers over every replica, its evaluation and checkpoint: done again
    // whole by the survivors when a rank is lost during them.
    epoch_summary sum;
    while (!healing([&] {
      // One small collective every replica issues.
      tensor sums = zeros({3}, {.dtype = dtype::float64});
      auto* p = sums.data_ptr<double>();
      p[0] = loss_sum;
      p[1] = double(samples);
      p[2] = counted ? double(correct) : -1e18;
      dist::work w = group_->all_reduce(sums.to(group_->collective_device()), dist::reduce_op::sum);
      w.wait();
      const tensor reduced = w.result().at(0).cpu();
      const double* q = reduced.data_ptr<double>();
      sum = epoch_summary{};
      sum.epoch = epoch;
      sum.samples = int64_t(q[1]);
      sum.loss = q[1] > 0 ? q[0] / q[1] : 0;
      sum.accuracy = q[2] >= 0 && q[1] > 0 ? q[2] / q[1] : -1;
      sum.seconds = std::chrono::duration<double>(trace::clock::now() - begin).count();
      sum.process_rank = info_.process_rank;
      if (info_.rank == 0 && spec_.evaluate) {
        trace::span s(lane_, "evaluate");
        no_grad guard;
        model_->eval();
        sum.eval = spec_.evaluate(*model_);
        model_->train();
      }
      save(epoch + 1, 0);
    }))
      ;
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
  process_link& link_;
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
  int64_t epoch_ = 0;      // the epoch under way
  int64_t epoch_step_ = 0; // steps of this epoch done, counted from 0
  // Elastic jobs (Note [Elastic data position]): this segment of the epoch's order (from
  // segment_offset_ on, divided among the current members), this rank's share of it, the
  // steps done over it, and where the survivors take up the epoch after healing.
  int64_t order_size_ = 0, segment_offset_ = 0, segment_steps_ = 0, resume_at_ = 0;
  std::vector<int64_t> shard_;
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
                            replica_info info, process_link* link, caf::actor monitor) {
  return {
      [=](train_atom) {
        replica_report report;
        try {
          report = replica_run(*spec, info, *link, self, monitor).run();
        } catch (const std::exception& e) {
          report.error = e.what();
        }
        report.rank = info.rank;
        report.local_rank = info.local_rank;
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
  process_link link(sys, opts.process_group, opts.num_local,
                    replica_devices(spec.device, opts.num_local));
  if (link.elastic()) {
    ACTORCH_CHECK(opts.num_local == 1 && !spec.device.is_cuda() && spec.dataset != nullptr,
                  "train_data_parallel: an elastic job (actorch launch --elastic) heals one CPU "
                  "trainer actor per process over a dataset; ",
                  opts.num_local, " actors per process on ", spec.device,
                  " cannot regroup yet (Note [Elastic healing])");
    ACTORCH_CHECK(spec.resume.empty(),
                  "train_data_parallel: an elastic job starts afresh: it "
                  "does not resume from a checkpoint (",
                  spec.resume, ") yet");
  }
  ACTORCH_CHECK(!spec.on_step_samples || link.elastic(),
                "train_data_parallel: on_step_samples reports an elastic job's samples; this job "
                "is not elastic (start it with actorch launch --elastic)");
  if (resumes_on_its_own && link.process_rank() == 0)
    std::printf("train_data_parallel: restart %lld of the job: resuming from %s\n",
                static_cast<long long>(restart), spec.resume.c_str());
  caf::scoped_actor monitor{sys};
  std::vector<caf::actor> trainers;
  for (int i = 0; i < opts.num_local; ++i) {
    replica_info info;
    info.local_rank = i;
    info.num_local = opts.num_local;
    info.process_rank = link.process_rank();
    info.num_processes = link.num_processes();
    info.rank = info.process_rank * opts.num_local + i;
    info.world_size = opts.num_local * info.num_processes;
    auto t = sys.spawn<caf::detached>(trainer_actor, &spec, info, &link,
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
      link.abort(std::make_exception_ptr(error(msg)));
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
          reported[size_t(r.local_rank)] = 1;
          if (!r.error.empty())
            fail("train_data_parallel: replica " + std::to_string(r.rank) + " failed: " + r.error);
          if (r.local_rank == 0)
            out.step_end_times = std::move(r.step_end_times);
        },
        [&](const caf::down_msg& d) {
          ++down;
          for (size_t i = 0; i < trainers.size(); ++i)
            if (trainers[i].address() == d.source && !reported[i])
              fail("train_data_parallel: the trainer actor of replica " +
                   std::to_string(link.process_rank() * opts.num_local + int(i)) +
                   " stopped without finishing (" + sys.render(d.reason) + ")");
        });
  }
  ACTORCH_CHECK(failure.empty(), failure);
  out.process_rank = link.process_rank();
  out.num_processes = link.num_processes();
  if (!opts.trace.empty())
    write_trace(opts.trace, link.group().get());
  return out;
}

} // namespace actorch::actors
