// The back-end independent parts of process_group.
#include "comm/process_group.hpp"

#include "base/error.hpp"

namespace actorch::dist {

const char* reduce_op_name(reduce_op op) {
  switch (op) {
  case reduce_op::sum: return "SUM";
  case reduce_op::avg: return "AVG";
  case reduce_op::product: return "PRODUCT";
  case reduce_op::min: return "MIN";
  case reduce_op::max: return "MAX";
  case reduce_op::band: return "BAND";
  case reduce_op::bor: return "BOR";
  case reduce_op::bxor: return "BXOR";
  }
  return "?";
}

process_group::process_group(int rank, int size, std::vector<int> global_ranks)
    : rank_(rank), size_(size), global_ranks_(std::move(global_ranks)) {
  ACTORCH_CHECK(size_ >= 1, "process_group: size must be >= 1 but got ", size_);
  ACTORCH_CHECK(rank_ >= -1 && rank_ < size_, "process_group: rank ", rank_, " is outside [0, ",
                size_, ")");
  if (global_ranks_.empty())
    for (int r = 0; r < size_; ++r)
      global_ranks_.push_back(r);
  ACTORCH_CHECK(int(global_ranks_.size()) == size_, "process_group: ", global_ranks_.size(),
                " global ranks given for a group of size ", size_);
}

process_group::~process_group() = default;

tensor process_group::empty_shared(int64_t, dtype) {
  return {};
}

std::shared_ptr<symmetric_memory> process_group::empty_symmetric(int64_t, dtype) {
  return nullptr;
}

int process_group::group_rank(int global_rank) const {
  for (int i = 0; i < size_; ++i)
    if (global_ranks_[size_t(i)] == global_rank)
      return i;
  return -1;
}

void process_group::check_rank(const char* op, int r, const char* what) const {
  ACTORCH_CHECK(r >= 0 && r < size_, op, ": ", what, " ", r, " is outside the group's ranks [0, ",
                size_, ")");
}

} // namespace actorch::dist
