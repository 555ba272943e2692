// zero_redundancy_optimizer: the partition, the step and its exchange, and the state's
// consolidation (a schema of every replica's entries, then the entries from their owners).
#include "comm/ddp/zero_redundancy_optimizer.hpp"

#include <algorithm>
#include <map>
#include <numeric>

#include "base/error.hpp"
#include "base/parse.hpp"
#include "comm/collective_tag.hpp"
#include "core/autograd/grad_mode.hpp"
#include "core/ops/factory.hpp"

namespace actorch::dist {

std::vector<std::vector<size_t>> partition_parameters(const std::vector<tensor>& params,
                                                      int world) {
  ACTORCH_CHECK(world >= 1, "ZeroRedundancyOptimizer: world size ", world);
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
  std::vector<std::vector<size_t>> out(static_cast<size_t>(world));
  std::vector<int64_t> sizes(size_t(world), 0);
  for (size_t i : order) {
    const size_t r = size_t(std::min_element(sizes.begin(), sizes.end()) - sizes.begin());
    out[r].push_back(i);
    sizes[r] += params[i].numel();
  }
  return out;
}

zero_redundancy_optimizer::zero_redundancy_optimizer(std::vector<tensor> params,
                                                     optimizer_factory make_optimizer,
                                                     std::shared_ptr<replica_group> group)
    : params_(std::move(params)), group_(std::move(group)) {
  ACTORCH_CHECK(group_ != nullptr, "ZeroRedundancyOptimizer: the replica group is null");
  ACTORCH_CHECK(make_optimizer != nullptr, "ZeroRedundancyOptimizer: no optimizer_class");
  ACTORCH_CHECK(!params_.empty(), "ZeroRedundancyOptimizer: empty parameter list");
  partition_ = partition_parameters(params_, group_->size());
  owner_.assign(params_.size(), 0);
  for (size_t r = 0; r < partition_.size(); ++r)
    for (size_t i : partition_[r])
      owner_[i] = int(r);
  std::map<dtype, size_t> group_of; // the groups in order of their dtype's first appearance
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto [it, fresh] = group_of.try_emplace(params_[i].dtype(), by_dtype_.size());
    if (fresh)
      by_dtype_.emplace_back();
    by_dtype_[it->second].push_back(i);
  }
  std::vector<tensor> shard;
  for (size_t i : partition_[size_t(group_->rank())])
    shard.push_back(params_[i]);
  // A replica with no parameter (more replicas than parameters) steps nothing.
  if (!shard.empty())
    local_ = make_optimizer(std::move(shard));
}

void zero_redundancy_optimizer::step() {
  if (local_)
    local_->step();
  // Every parameter from its owner: the owner's value plus the others' zeros, exactly, in one
  // all-reduce per dtype (in the order of first appearance, the same everywhere).
  no_grad guard;
  collective_tag tag("ZeroRedundancyOptimizer");
  const int me = group_->rank();
  const device on = group_->collective_device();
  for (const std::vector<size_t>& which : by_dtype_) {
    std::vector<tensor> exchange;
    for (size_t i : which)
      exchange.push_back(
          owner_[i] == me ? params_[i].to(on, false, /*copy=*/true)
                          : zeros(params_[i].sizes(), {.dtype = params_[i].dtype(), .device = on}));
    group_->all_reduce_coalesced(exchange, reduce_op::sum).wait();
    for (size_t k = 0; k < which.size(); ++k)
      if (owner_[which[k]] != me)
        tensor(params_[which[k]]).copy_(exchange[k]);
  }
}

void zero_redundancy_optimizer::zero_grad(bool set_to_none) {
  zero_grads(params_, set_to_none);
}

namespace {

// One state entry in the schema: the parameter (global index), the entry's name and layout.
struct entry_schema {
  size_t param;
  std::string name;
  dtype type;
  shape_t shape;
};

} // namespace

std::pair<size_t, std::string> split_state_key(const std::string& key) {
  const size_t dot = key.find('.', 6);
  ACTORCH_CHECK(key.rfind("state.", 0) == 0 && dot != std::string::npos,
                "ZeroRedundancyOptimizer: unexpected state key \"", key, "\"");
  return {size_t(parse_int(key.substr(6, dot - 6), "ZeroRedundancyOptimizer: state key " + key, 0)),
          key.substr(dot + 1)};
}

namespace {

std::vector<int64_t> encode(const std::vector<entry_schema>& entries) {
  std::vector<int64_t> row{int64_t(entries.size())};
  for (const auto& e : entries) {
    row.push_back(int64_t(e.param));
    row.push_back(int64_t(e.name.size()));
    for (unsigned char c : e.name)
      row.push_back(c);
    row.push_back(int64_t(e.type));
    row.push_back(int64_t(e.shape.size()));
    for (int64_t s : e.shape)
      row.push_back(s);
  }
  return row;
}

std::vector<entry_schema> decode(const int64_t* row) {
  std::vector<entry_schema> out;
  size_t k = 0;
  const int64_t n = row[k++];
  for (int64_t i = 0; i < n; ++i) {
    entry_schema e;
    e.param = size_t(row[k++]);
    const int64_t len = row[k++];
    for (int64_t c = 0; c < len; ++c)
      e.name.push_back(char(row[k++]));
    e.type = dtype(row[k++]);
    const int64_t nd = row[k++];
    for (int64_t d = 0; d < nd; ++d)
      e.shape.push_back(row[k++]);
    out.push_back(std::move(e));
  }
  return out;
}

} // namespace

std::vector<std::vector<std::pair<std::string, tensor>>>
gather_state_entries(replica_group& group, const std::vector<std::pair<std::string, tensor>>& mine,
                     int to) {
  const int me = group.rank();
  std::vector<entry_schema> schema;
  for (const auto& [key, t] : mine) {
    const auto [param, name] = split_state_key(key);
    schema.push_back({param, name, t.dtype(), t.sizes()});
  }
  const std::vector<int64_t> row = encode(schema);
  tensor mine_row = empty({int64_t(row.size())}, {.dtype = dtype::int64});
  std::copy(row.begin(), row.end(), mine_row.data_ptr<int64_t>());
  const tensor rows = all_gather_rows(group, mine_row, -1).contiguous();
  std::vector<std::vector<std::pair<std::string, tensor>>> out(size_t(group.size()));
  for (int r = 0; r < group.size(); ++r) {
    const std::vector<entry_schema> theirs = decode(rows.data_ptr<int64_t>() + r * rows.size(1));
    std::vector<tensor> values;
    for (size_t k = 0; k < theirs.size(); ++k)
      values.push_back(r == me ? mine[k].second.contiguous().clone()
                               : empty(theirs[k].shape, {.dtype = theirs[k].type}));
    if (!values.empty())
      broadcast_from(group, values, r);
    if (me == to)
      for (size_t k = 0; k < theirs.size(); ++k)
        out[size_t(r)].emplace_back(
            "state." + std::to_string(theirs[k].param) + "." + theirs[k].name, values[k]);
  }
  return out;
}

void zero_redundancy_optimizer::consolidate_state_dict(int to) {
  ACTORCH_CHECK(to >= 0 && to < group_->size(), "ZeroRedundancyOptimizer: consolidate to rank ", to,
                " of a world of ", group_->size());
  const int me = group_->rank();
  // This replica's entries, renamed to the global indices.
  optim::optimizer_state mine;
  std::vector<std::pair<std::string, tensor>> entries;
  if (local_) {
    mine = local_->state_dict();
    for (const auto& [key, t] : mine.tensors) {
      const auto [local, name] = split_state_key(key);
      entries.emplace_back("state." + std::to_string(partition_[size_t(me)].at(local)) + "." + name,
                           t);
    }
  }
  auto gathered = gather_state_entries(*group_, entries, to);
  if (me != to) {
    consolidated_.reset();
    return;
  }
  // The metadata (kind, lr, hyper-parameters) is the same everywhere: this shard's, with the
  // whole parameter count.
  ACTORCH_CHECK(local_ != nullptr, "ZeroRedundancyOptimizer: rank ", to,
                " holds no parameter, so it has no optimizer to take the metadata from; "
                "consolidate to rank 0");
  std::vector<std::pair<std::string, tensor>> whole;
  for (auto& theirs : gathered)
    std::move(theirs.begin(), theirs.end(), std::back_inserter(whole));
  consolidated_ = whole_state(std::move(whole), std::move(mine.metadata), params_.size());
}

const optim::optimizer_state& zero_redundancy_optimizer::state_dict() const {
  ACTORCH_CHECK(consolidated_.has_value(),
                "Optimizer state has not been consolidated on this rank. Please call "
                "`consolidate_state_dict(to=",
                group_->rank(),
                ")` on all ranks beforehand if you meant to save the global state.");
  return *consolidated_;
}

namespace {

// The entries of a whole state for `shard`, renumbered 0, 1, ... in shard order, with the
// shard's parameter count; throws when `whole` covers another number of parameters than `total`
// or names one outside it.
optim::optimizer_state shard_state(const optim::optimizer_state& whole,
                                   const std::vector<size_t>& shard, size_t total) {
  auto it = whole.metadata.find("param_groups.0.params");
  ACTORCH_CHECK(it != whole.metadata.end() && it->second == std::to_string(total),
                "ZeroRedundancyOptimizer: load_state_dict: the state covers ",
                it == whole.metadata.end() ? std::string("no") : it->second,
                " parameters, this optimizer has ", total);
  std::vector<size_t> local_of(total, size_t(-1));
  for (size_t k = 0; k < shard.size(); ++k)
    local_of[shard[k]] = k;
  optim::optimizer_state mine;
  mine.metadata = whole.metadata;
  mine.metadata["param_groups.0.params"] = std::to_string(shard.size());
  for (const auto& [key, t] : whole.tensors) {
    const auto [global, name] = split_state_key(key);
    ACTORCH_CHECK(global < total, "ZeroRedundancyOptimizer: load_state_dict: \"", key,
                  "\" names no parameter");
    if (local_of[global] != size_t(-1))
      mine.tensors.emplace_back("state." + std::to_string(local_of[global]) + "." + name, t);
  }
  return mine;
}

} // namespace

void zero_redundancy_optimizer::load_state_dict(const optim::optimizer_state& state) {
  const optim::optimizer_state mine =
      shard_state(state, partition_[size_t(group_->rank())], params_.size());
  if (local_)
    local_->load_state_dict(mine); // checks kind, shapes and hyper-parameters first
}

optim::optimizer_state whole_state(std::vector<std::pair<std::string, tensor>> entries,
                                   std::map<std::string, std::string> metadata, size_t total) {
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return split_state_key(a.first) < split_state_key(b.first);
  });
  metadata["param_groups.0.params"] = std::to_string(total);
  return {std::move(entries), std::move(metadata)};
}

} // namespace actorch::dist
