// An elastic job's healing (Note [Elastic healing] in process_link.cpp) and its data position
// (Note [Elastic data position] in core/data/sampler.cpp), replica_run's part.
#include "actors/trainer/replica_run.hpp"

#include "core/data/distributed_sampler.hpp"
#include "core/data/sampler.hpp"
#include "core/ops/factory.hpp"

namespace actorch::actors {

void replica_run::heal(const std::string& why) {
  const int64_t done_here = consumed(); // counted in the old world's steps
  group_ = link_.regroup(info_, why);
  lane_ = "trainer " + std::to_string(info_.rank);
  sync_state(done_here);
}

void replica_run::prime_optimizer() {
  for (tensor p : opt_->params())
    p.set_grad(zeros_like(p));
  opt_->step();
  opt_->zero_grad();
}

void replica_run::sync_state(int64_t done_here) {
  // The furthest: most steps, then the later epoch (a member that finished an epoch's end
  // before the others lost the rank in it is at the next one's start).
  const double progress = total_ < 0 ? -1.0 : double(total_) * 1e6 + double(epoch_);
  std::vector<tensor> state;
  for (auto& [name, t] : model_->named_parameters())
    state.push_back(t.detach());
  for (auto& [name, t] : model_->named_buffers())
    state.push_back(t);
  const optim::optimizer_state os = opt_->state_dict();
  // One max gives the furthest progress and both ends of the optimizers' state counts.
  const auto count = double(os.tensors.size());
  tensor most = as_tensor(std::vector<double>{progress, count, -count}, {3}, {});
  group_->all_reduce(most, dist::reduce_op::max).wait();
  const double* m = most.data_ptr<double>();
  ACTORCH_CHECK(m[1] == -m[2], "train_data_parallel: cannot heal: the members' optimizers hold "
                               "different state (one has not stepped yet)");
  tensor lowest =
      as_tensor(std::vector<double>{progress == m[0] ? double(info_.rank) : 1e18}, {1}, {});
  group_->all_reduce(lowest, dist::reduce_op::min).wait();
  const int src = int(lowest.data_ptr<double>()[0]);
  tensor position = as_tensor(
      std::vector<double>{double(total_), double(done_here), double(epoch_step_), double(epoch_)},
      {4}, {});
  state.insert(state.begin(), position);
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
  tensor ends = as_tensor(std::vector<double>{sum, -sum}, {2}, {});
  group_->all_reduce(ends, dist::reduce_op::max).wait();
  const double* e = ends.data_ptr<double>();
  ACTORCH_CHECK(e[0] == -e[1], "train_data_parallel: after healing, the members' states differ ",
                "(sums ", -e[1], " and ", e[0], ")");
  wrap_model();
}

void replica_run::plan_segment(int64_t epoch, int64_t offset) {
  const data::distributed_sampler whole(spec_.dataset->size(), 1, 0, spec_.loader.shuffle,
                                        spec_.seed, spec_.loader.drop_last);
  order_size_ = spec_.dataset->size();
  shard_ = data::remaining_shard(whole.epoch_order(epoch), offset, info_.world_size, info_.rank,
                                 spec_.loader.drop_last);
  segment_offset_ = offset;
  segment_steps_ = 0;
}

void replica_run::start_segment(int64_t epoch, int64_t offset) {
  loader_.reset();
  plan_segment(epoch, offset);
  new_loader(std::make_shared<data::list_sampler>(shard_),
             std::make_shared<generator>(spec_.seed + uint64_t(epoch)));
  segment_loader_ = true;
}

int64_t replica_run::consumed() const {
  const int64_t batch = spec_.loader.batch_size.value_or(1); // None: a sample a step
  const int64_t done = std::min<int64_t>(segment_steps_ * batch, int64_t(shard_.size()));
  return std::min(order_size_, segment_offset_ + done * info_.world_size);
}

std::vector<int64_t> replica_run::batch_indices(int64_t k) const {
  const auto b = size_t(spec_.loader.batch_size.value_or(1));
  const size_t first = std::min(size_t(k) * b, shard_.size());
  return std::vector<int64_t>(shard_.begin() + ptrdiff_t(first),
                              shard_.begin() + ptrdiff_t(std::min(first + b, shard_.size())));
}

} // namespace actorch::actors
