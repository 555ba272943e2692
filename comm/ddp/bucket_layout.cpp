// The reducer's buckets: bucket_layout.hpp.
#include "comm/ddp/bucket_layout.hpp"

#include <map>

#include "base/error.hpp"

namespace actorch::dist {

std::vector<std::vector<size_t>> compute_bucket_assignment(const std::vector<bucket_param>& params,
                                                           const std::vector<size_t>& order,
                                                           size_t first_cap_bytes,
                                                           size_t cap_bytes) {
  struct open_bucket {
    std::vector<size_t> indices;
    size_t bytes = 0;
    size_t cap = 0;
  };
  std::map<std::pair<dtype, device>, open_bucket> open;
  std::vector<std::vector<size_t>> result;
  for (size_t i : order) {
    ACTORCH_CHECK(i < params.size(), "compute_bucket_assignment: index ", i, " out of range for ",
                  params.size(), " parameters");
    const bucket_param& p = params[i];
    auto [it, inserted] = open.try_emplace({p.type, p.dev});
    open_bucket& b = it->second;
    if (inserted)
      b.cap = first_cap_bytes;
    b.indices.push_back(i);
    b.bytes += p.bytes;
    if (b.bytes >= b.cap) {
      result.push_back(std::move(b.indices));
      b = open_bucket{{}, 0, cap_bytes};
    }
  }
  for (auto& [key, b] : open)
    if (!b.indices.empty())
      result.push_back(std::move(b.indices));
  return result;
}

std::vector<std::vector<size_t>> compute_bucket_assignment(const std::vector<tensor>& params,
                                                           const std::vector<size_t>& order,
                                                           size_t first_cap_bytes,
                                                           size_t cap_bytes) {
  std::vector<bucket_param> described;
  for (const tensor& p : params)
    described.push_back({p.dtype(), p.device(), p.nbytes()});
  return compute_bucket_assignment(described, order, first_cap_bytes, cap_bytes);
}

void bucket_layout::build(std::vector<std::vector<size_t>> assignment) {
  assignment_ = std::move(assignment);
  ++generation_;
  buckets_.clear();
  where_.assign(params_.size(), {0, 0});
  for (size_t b = 0; b < assignment_.size(); ++b) {
    bucket bk;
    int64_t numel = 0;
    for (size_t slot = 0; slot < assignment_[b].size(); ++slot) {
      const size_t i = assignment_[b][slot];
      bk.params.push_back(i);
      bk.offsets.push_back(numel);
      numel += params_[i].numel();
      where_[i] = {b, slot};
    }
    const dtype dt = params_[assignment_[b].front()].dtype();
    bk.bytes = size_t(numel) * element_size(dt);
    if (in_place_)
      bk.reduced_in_place.resize(bk.params.size());
    else
      bk.flat = group_->new_buffer(numel, dt);
    buckets_.push_back(std::move(bk));
  }
}

void bucket_layout::make_flat() {
  if (!in_place_)
    return;
  in_place_ = false;
  build(assignment_);
}

tensor bucket_layout::slot_view(size_t b, size_t slot, const tensor& of) const {
  const bucket& bk = buckets_[b];
  const tensor& p = params_[bk.params[slot]];
  return of.narrow(0, bk.offsets[slot], p.numel()).view(p.sizes());
}

grad_bucket bucket_layout::hooked(size_t b) const {
  const bucket& bk = buckets_[b];
  std::vector<tensor> grads, ps;
  for (size_t slot = 0; slot < bk.params.size(); ++slot) {
    grads.push_back(slot_view(b, slot, bk.flat));
    ps.push_back(params_[bk.params[slot]]);
  }
  return grad_bucket(b, b + 1 == buckets_.size(), bk.flat, std::move(grads), std::move(ps), group_);
}

std::vector<int64_t> bucket_layout::choice(size_t positions) const {
  std::vector<int64_t> c(positions, 0);
  for (size_t b = 0, k = 0; b < buckets_.size(); ++b)
    for (size_t slot = 0; slot < buckets_[b].params.size(); ++slot)
      c[k++] = int64_t(b);
  return c;
}

void bucket_layout::build_from_choice(const std::vector<size_t>& order, const int64_t* c) {
  std::vector<std::vector<size_t>> a;
  for (size_t k = 0; k < order.size(); ++k) {
    if (k == 0 || c[k] != c[k - 1])
      a.emplace_back();
    a.back().push_back(order[k]);
  }
  build(std::move(a));
}

} // namespace actorch::dist
