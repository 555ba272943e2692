// The index samplers: sequential, random, subset-random, weighted; and BatchSampler and
// DistributedSampler, whose logic is the same few lines of index arithmetic.
#include "core/data/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>

#include "base/error.hpp"
#include "core/data/batch_sampler.hpp"
#include "core/data/distributed_sampler.hpp"
#include "core/ops/factory.hpp"

namespace actorch::data {

uint64_t random_u64(generator& gen) {
  const generator::state r = gen.reserve(1); // seed and counter under one lock
  const auto block = generator::philox(r.seed, r.offset);
  return uint64_t(block[0]) << 32 | block[1];
}

double random_double(generator& gen) {
  return double(random_u64(gen) >> 11) * 0x1.0p-53; // 53 random bits in [0, 1)
}

std::shared_ptr<generator> seeded_from_default() {
  return std::make_shared<generator>(random_u64(default_generator()));
}

std::vector<int64_t> random_permutation(int64_t n, generator& gen) {
  return randperm_indices(n, &gen);
}

sequential_sampler::sequential_sampler(int64_t n) : n_(n) {
  ACTORCH_CHECK(n >= 0, "SequentialSampler: negative size ", n);
}

std::vector<int64_t> sequential_sampler::indices() {
  std::vector<int64_t> out(static_cast<size_t>(n_));
  std::iota(out.begin(), out.end(), int64_t(0));
  return out;
}

random_sampler::random_sampler(int64_t n, bool replacement, int64_t num_samples,
                               std::shared_ptr<generator> gen)
    : n_(n), replacement_(replacement), num_samples_(num_samples < 0 ? n : num_samples),
      gen_(gen ? std::move(gen) : seeded_from_default()) {
  ACTORCH_CHECK(n >= 0, "RandomSampler: negative dataset size ", n);
  ACTORCH_CHECK(num_samples != 0 && (num_samples > 0 || n > 0),
                "RandomSampler: num_samples should be a positive integer value, but got "
                "num_samples=",
                num_samples_);
}

std::vector<int64_t> random_sampler::indices() {
  if (!replacement_ && num_samples_ == n_)
    return random_permutation(n_, *gen_); // the usual case, without a copy
  std::vector<int64_t> out;
  out.reserve(size_t(num_samples_));
  if (replacement_) {
    ACTORCH_CHECK(n_ > 0, "RandomSampler: cannot draw with replacement from an empty dataset");
    const tensor r = randint(0, n_, {num_samples_}, {}, gen_.get());
    const int64_t* d = r.data_ptr<int64_t>();
    out.assign(d, d + num_samples_);
    return out;
  }
  // As PyTorch: whole permutations while num_samples exceeds n, then a prefix of one more.
  for (int64_t left = num_samples_; left > 0; left -= n_) {
    auto perm = random_permutation(n_, *gen_);
    out.insert(out.end(), perm.begin(), perm.begin() + std::min(left, n_));
  }
  return out;
}

subset_random_sampler::subset_random_sampler(std::vector<int64_t> indices,
                                             std::shared_ptr<generator> gen)
    : indices_(std::move(indices)), gen_(gen ? std::move(gen) : seeded_from_default()) {}

std::vector<int64_t> subset_random_sampler::indices() {
  const auto perm = random_permutation(int64_t(indices_.size()), *gen_);
  std::vector<int64_t> out;
  out.reserve(perm.size());
  for (int64_t p : perm)
    out.push_back(indices_[size_t(p)]);
  return out;
}

weighted_random_sampler::weighted_random_sampler(std::vector<double> weights, int64_t num_samples,
                                                 bool replacement, std::shared_ptr<generator> gen)
    : weights_(std::move(weights)), num_samples_(num_samples), replacement_(replacement),
      gen_(gen ? std::move(gen) : seeded_from_default()) {
  ACTORCH_CHECK(num_samples > 0,
                "WeightedRandomSampler: num_samples should be a positive integer value, but got "
                "num_samples=",
                num_samples);
  double sum = 0;
  int64_t nonzero = 0;
  for (size_t i = 0; i < weights_.size(); ++i) {
    ACTORCH_CHECK(std::isfinite(weights_[i]) && weights_[i] >= 0, "WeightedRandomSampler: weight ",
                  i, " is ", weights_[i], "; weights must be finite and non-negative");
    sum += weights_[i];
    nonzero += weights_[i] > 0;
    cumulative_.push_back(sum);
  }
  ACTORCH_CHECK(sum > 0, "WeightedRandomSampler: weights sum to zero");
  ACTORCH_CHECK(replacement || num_samples <= nonzero, "WeightedRandomSampler: cannot draw ",
                num_samples, " samples without replacement from ", nonzero, " non-zero weights");
}

std::vector<int64_t> weighted_random_sampler::indices() {
  std::vector<int64_t> out;
  out.reserve(size_t(num_samples_));
  if (replacement_) {
    // Inverse CDF: the first index whose cumulative weight exceeds u * total.
    const double total = cumulative_.back();
    for (int64_t k = 0; k < num_samples_; ++k) {
      const double u = random_double(*gen_) * total;
      auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
      if (it == cumulative_.end())
        --it;
      while (weights_[size_t(it - cumulative_.begin())] == 0)
        --it; // never land on weight 0
      out.push_back(int64_t(it - cumulative_.begin()));
    }
    return out;
  }
  // Without replacement: Efraimidis-Spirakis keys u^(1/w); the num_samples largest keys are
  // distributed as successive draws each proportional to the remaining weights.
  std::vector<std::pair<double, int64_t>> keys;
  for (size_t i = 0; i < weights_.size(); ++i) {
    const double u = random_double(*gen_);
    if (weights_[i] > 0)
      keys.emplace_back(std::log(u + 1e-300) / weights_[i], int64_t(i));
  }
  std::partial_sort(keys.begin(), keys.begin() + num_samples_, keys.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first; });
  for (int64_t k = 0; k < num_samples_; ++k)
    out.push_back(keys[size_t(k)].second);
  return out;
}

// BatchSampler. --------------------------------------------------------------------------------

batch_sampler::batch_sampler(sampler_ptr base, int64_t batch_size, bool drop_last)
    : sampler_(std::move(base)), batch_size_(batch_size), drop_last_(drop_last) {
  ACTORCH_CHECK(sampler_ != nullptr, "BatchSampler: null sampler");
  ACTORCH_CHECK(batch_size > 0,
                "BatchSampler: batch_size should be a positive integer value, but got batch_size=",
                batch_size);
}

std::vector<std::vector<int64_t>> batch_sampler::batches() {
  const auto idx = sampler_->indices();
  std::vector<std::vector<int64_t>> out;
  for (size_t i = 0; i < idx.size(); i += size_t(batch_size_)) {
    const size_t end = std::min(idx.size(), i + size_t(batch_size_));
    if (drop_last_ && end - i < size_t(batch_size_))
      break;
    out.emplace_back(idx.begin() + int64_t(i), idx.begin() + int64_t(end));
  }
  return out;
}

int64_t batch_sampler::size() const {
  const int64_t n = sampler_->size();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

void batch_sampler::loader_epoch(int64_t epoch) {
  if (sampler_)
    sampler_->loader_epoch(epoch);
}

generator* batch_sampler::rng() {
  return sampler_ ? sampler_->rng() : nullptr;
}

// DistributedSampler. --------------------------------------------------------------------------

namespace {

std::mutex g_query_mu;
default_group_query g_query;

/// `given`, or the default group's world size (which) or rank, or an error naming `what`.
int64_t from_default_group(std::optional<int64_t> given, bool world_size, const char* what) {
  if (given)
    return *given;
  default_group_query query;
  {
    std::lock_guard lock(g_query_mu);
    query = g_query;
  }
  const auto info = query ? query() : std::nullopt;
  // torch's words first (get_world_size's), then actorch's.
  ACTORCH_CHECK(info.has_value(),
                "Default process group has not been initialized, please make sure to call "
                "init_process_group. (DistributedSampler: ",
                what,
                " was not given and the default process group is not initialized: call "
                "dist::init_process_group first, or pass num_replicas and rank)");
  return world_size ? info->first : info->second;
}

} // namespace

void set_default_group_query(default_group_query query) {
  std::lock_guard lock(g_query_mu);
  g_query = std::move(query);
}

distributed_sampler::distributed_sampler(int64_t dataset_size, std::optional<int64_t> num_replicas,
                                         std::optional<int64_t> rank, bool shuffle, uint64_t seed,
                                         bool drop_last)
    : n_(dataset_size), num_replicas_(from_default_group(num_replicas, true, "num_replicas")),
      rank_(from_default_group(rank, false, "rank")), shuffle_(shuffle), seed_(seed),
      drop_last_(drop_last) {
  ACTORCH_CHECK(dataset_size >= 0, "DistributedSampler: negative dataset size ", dataset_size);
  ACTORCH_CHECK(num_replicas_ > 0, "DistributedSampler: num_replicas should be positive, got ",
                num_replicas_);
  ACTORCH_CHECK(rank_ >= 0 && rank_ < num_replicas_, "DistributedSampler: Invalid rank ", rank_,
                ", rank should be in the interval [0, ", num_replicas_ - 1, "]");
  if (drop_last && n_ % num_replicas_ != 0)
    num_samples_ = (n_ - num_replicas_ + num_replicas_ - 1) / num_replicas_; // ceil((n - r) / r)
  else
    num_samples_ = (n_ + num_replicas_ - 1) / num_replicas_;
  if (num_samples_ < 0)
    num_samples_ = 0;
  total_size_ = num_samples_ * num_replicas_;
}

std::vector<int64_t> distributed_sampler::epoch_order(int64_t epoch) const {
  std::vector<int64_t> idx;
  if (shuffle_) {
    generator g(seed_ + uint64_t(epoch));
    idx = random_permutation(n_, g);
  } else {
    idx.resize(size_t(n_));
    std::iota(idx.begin(), idx.end(), int64_t(0));
  }
  return idx;
}

std::vector<int64_t> distributed_sampler::indices() {
  return remaining_shard(epoch_order(epoch_), 0, num_replicas_, rank_, drop_last_);
}

// Note [Elastic data position]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An elastic job's survivors take up an epoch where the completed steps left it. Every rank
// of a DistributedSampler takes its batch k from the epoch order's positions [k B W, (k+1) B W)
// (rank r the ones congruent to r mod W), so after k steps of every rank the positions below
// k B W are done, whatever W was; the rest is divided among the survivors exactly as a whole
// epoch is. Positions past the order's end are padding.
std::vector<int64_t> remaining_shard(const std::vector<int64_t>& order, int64_t offset,
                                     int64_t num_replicas, int64_t rank, bool drop_last) {
  ACTORCH_CHECK(offset >= 0 && num_replicas > 0 && rank >= 0 && rank < num_replicas,
                "remaining_shard: offset ", offset, ", rank ", rank, " of ", num_replicas);
  std::vector<int64_t> idx(order.begin() + std::min<ptrdiff_t>(offset, ptrdiff_t(order.size())),
                           order.end());
  const auto n = int64_t(idx.size());
  const int64_t per_rank = drop_last && n % num_replicas != 0
                               ? std::max<int64_t>(0, (n - num_replicas + num_replicas - 1) /
                                                          num_replicas) // ceil((n - r) / r)
                               : (n + num_replicas - 1) / num_replicas;
  const int64_t total = per_rank * num_replicas;
  if (!drop_last) // pad by wrapping around, as often as needed, up to total
    for (size_t k = 0; int64_t(idx.size()) < total && n > 0; ++k)
      idx.push_back(idx[k % size_t(n)]);
  else
    idx.resize(size_t(total));
  std::vector<int64_t> out;
  out.reserve(size_t(per_rank));
  for (int64_t i = rank; i < total; i += num_replicas)
    out.push_back(idx[size_t(i)]);
  return out;
}

} // namespace actorch::data
