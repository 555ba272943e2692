#include "actors/trainer/replica_run.hpp"

#include <map>
#include <mutex>
#include <optional>

#include "actors/trainer/checkpoint.hpp"
#include "core/autograd/grad_mode.hpp"
#include "core/cuda/stream.hpp"
#include "core/data/distributed_sampler.hpp"
#include "core/ops/factory.hpp"

namespace actorch::actors {

namespace {

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

} // namespace

// Note [Resuming at another world size]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A checkpoint written mid-epoch records, beside the loader's state, the job's world size and
// the epoch order's positions its steps covered (consumed(): every rank takes its batch k from
// the positions [k B W, (k+1) B W), Note [Elastic data position]). Resumed by a job of the same
// world size, the loader's state gives the rest of the epoch exactly, batch for batch. Resumed
// by a job of another (restarted on fewer or more nodes, or by hand with --resume), the rest of
// the epoch is the order's positions from there on divided among the new world as an elastic
// job's survivors divide it (start_segment), so that every sample of the epoch is taken once
// apart from DistributedSampler's padding; from the next epoch on the loader is the new world's
// DistributedSampler, whose orders (seed + epoch) are those of a job that ran at that size
// throughout. A checkpoint written during such a segment resumes the same way at any size.
// One this code did not write (no "world_size" metadata) resumes the loader's state as it is.
replica_report replica_run::run() {
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
  resume_point from;
  if (!spec_.resume.empty())
    from = load_training_checkpoint(spec_.resume, *model_, *opt_, spec_.dataset != nullptr);
  int64_t epoch = from.epoch, step = from.step, total = from.total_steps;
  // The first epoch's position in its order (Note [Elastic data position]): where a
  // checkpoint written mid-epoch left it, or where a replacement joins the survivors.
  int64_t offset = step > 0 ? from.data.position : 0;
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
    shard_optimizer();
  }
  // See Note [Resuming at another world size].
  bool across = false;
  if (spec_.dataset && !link_.elastic()) {
    make_loader();
    across = from.loader && offset > 0 &&
             (from.data.segment || from.data.world_size != info_.world_size);
    if (from.loader && !across)
      loader_->load_state(*from.loader);
  }
  total_ = total;
  for (; epoch < spec_.epochs && !limit_reached(); ++epoch) {
    epoch_ = epoch;
    if (spec_.dataset && (link_.elastic() || across)) {
      start_segment(epoch, offset);
    } else if (spec_.dataset) { // the loader's own DistributedSampler's share, for the counts
      plan_segment(epoch, 0);
      segment_steps_ = step;
    }
    run_epoch(epoch, step, report);
    if (across && epoch_step_ >= steps_per_epoch()) { // the next epochs are the new world's
      across = false;
      make_loader();
      data::loader_state next = *from.loader;
      next.epoch = epoch + 1;
      next.delivered.clear();
      loader_->load_state(next);
    }
    step = 0;
    offset = 0;
    if (epoch_ > epoch) { // healing took a survivor's place in the next epoch (sync_state)
      step = epoch_step_;
      offset = resume_at_;
    }
  }
  report.sharded = sharded_ != nullptr;
  return report;
}

void replica_run::shard_optimizer() {
  sharded_step* const sharded = link_.sharded();
  if (sharded == nullptr)
    return;
  // Every replica decides alike: the same model and optimizer code.
  const std::vector<tensor> params = model_->parameters();
  const std::vector<tensor>& over = opt_->params();
  bool fits = over.size() == params.size();
  for (size_t k = 0; fits && k < params.size(); ++k)
    fits = over[k].is_same(params[k]) && params[k].is_contiguous() &&
           (params[k].dtype() == dtype::float32 || params[k].dtype() == dtype::float64);
  ACTORCH_CHECK(fits || !spec_.zero_redundancy.value_or(false),
                "train_data_parallel: zero_redundancy = true needs an optimizer over the model's "
                "parameters, in order, all contiguous float32 or float64");
  if (!fits)
    return;
  // The plain optimizer's state (a resumed checkpoint's) goes to the shards.
  const optim::optimizer_state resumed = opt_->state_dict();
  auto shard_opt = sharded->join(info_.local_rank, *model_, spec_.make_optimizer);
  if (!sharded->active()) { // processes without memory they all map, or of several dtypes
    ACTORCH_CHECK(!spec_.zero_redundancy.value_or(false),
                  "train_data_parallel: zero_redundancy = true shards the step across processes "
                  "through memory they all map, which needs every process on one host, the Gloo "
                  "backend and parameters of one dtype");
    return;
  }
  opt_ = std::move(shard_opt);
  sharded->load_state_dict(info_.local_rank, resumed);
  sharded_ = sharded;
}

void replica_run::wrap_model() {
  ddp_.reset(); // the old reducer's pending buckets fail with its group
  ddp_ = std::make_unique<dist::distributed_data_parallel>(model_, group_, spec_.ddp);
  if (spec_.comm_hook)
    ddp_->register_comm_hook(spec_.comm_hook());
  trace_buckets(ddp_->reducer(), info_.rank);
}

void replica_run::make_loader() {
  new_loader(std::make_shared<data::distributed_sampler>(spec_.dataset->size(), info_.world_size,
                                                         info_.rank, spec_.loader.shuffle,
                                                         spec_.seed, spec_.loader.drop_last),
             std::make_shared<generator>(spec_.seed));
  segment_loader_ = false;
}

void replica_run::new_loader(data::sampler_ptr sampler, std::shared_ptr<generator> gen) {
  loader_.reset();
  data::loader_options lo = spec_.loader;
  lo.sampler = std::move(sampler);
  lo.shuffle = false;
  lo.generator = std::move(gen);
  if (device_.is_cuda()) { // Note [Device prefetch]
    lo.device = device_;
    lo.pin_memory = true;
  }
  loader_ = std::make_unique<data::data_loader>(spec_.dataset, lo);
  if (lo.num_workers > 0)
    loader_->set_actor_system(self_->system()); // the job's system, not one per replica
}

int64_t replica_run::steps_per_epoch() const {
  if (!spec_.dataset)
    return spec_.steps_per_epoch;
  // A segment's loader covers the rest of the epoch from where the segment began.
  return segment_loader_ ? epoch_step_ - segment_steps_ + loader_->size() : loader_->size();
}

void replica_run::run_epoch(int64_t epoch, int64_t first_step, replica_report& report) {
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
    if (sharded_)
      zero_grads(model_->parameters()); // every gradient, not only the shard's
    else
      opt_->zero_grad();
    step_result r;
    {
      trace::span s(lane_, "forward");
      std::optional<dist::distributed_data_parallel::no_sync_guard> local;
      if (sharded_) // Note [Sharded step]: the gradients stay where backward leaves them
        local.emplace(*ddp_);
      r = spec_.forward(*ddp_, batch);
    }
    {
      trace::span s(lane_, "backward");
      r.loss.backward();
    }
    if (sharded_) {
      trace::span s(lane_, "shard's gradients");
      sharded_->average_shard(info_.local_rank);
    }
    if (spec_.on_step_samples) // the gradients are reduced: the step's samples are in it
      spec_.on_step_samples(info_,
                            step_samples{epoch, link_.membership(), segment_steps_, true, {}});
    {
      trace::span s(lane_, "optimizer step");
      if (opt_)
        opt_->step();
      if (sharded_)
        sharded_->stepped(info_.local_rank);
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
  // whole by the survivors when a rank is lost during them, unless one of them had already
  // done them all and gone on to the next epoch, whose place the others take.
  epoch_summary sum;
  bool passed = false;
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
  })) {
    if ((passed = epoch_ > epoch))
      break;
  }
  if (info_.local_rank == 0 && !passed)
    self_->send(monitor_, epoch_end_atom::value, std::move(sum));
}

void replica_run::save(int64_t epoch, int64_t step) {
  if (spec_.checkpoint.empty())
    return;
  // Across processes every shard's state goes to rank 0 (a collective).
  std::optional<optim::optimizer_state> gathered;
  if (sharded_ && sharded_->across_processes())
    gathered = sharded_->state_dict(group_.get());
  if (info_.rank == 0) {
    trace::span s(lane_, "checkpoint");
    save_training_checkpoint(spec_.checkpoint, *model_,
                             gathered   ? *gathered
                             : sharded_ ? sharded_->state_dict()
                                        : opt_->state_dict(),
                             epoch, step, total_, loader_.get(),
                             {info_.world_size, consumed(), segment_loader_});
  }
  tensor token = zeros({1}, {.device = group_->collective_device()});
  group_->all_reduce(token, dist::reduce_op::sum).synchronize(); // a barrier: the host waits
}

} // namespace actorch::actors
