// What the ranks of a Gloo group agree on before they run an op: the header each rank sends
// ahead of a collective, the checks of an op's arguments, and the slots that pair a send with
// its recv. process_group_gloo.cpp runs the ops; see Note [Gloo group threads] there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/process_group.hpp"
#include "core/tensor.hpp"

namespace actorch::dist::gloo_checks {

enum class op_kind : int64_t {
  broadcast = 1,
  all_reduce,
  reduce,
  all_gather,
  gather,
  scatter,
  reduce_scatter,
  all_to_all,
  barrier,
};

// What a rank says about a collective before running it: Note [Gloo group threads] in
// process_group_gloo.cpp.
constexpr size_t kHeaderLen = 16;
constexpr size_t kMaxHeaderDims = 9;
/// The last slot: 0, or 1 + the id of the shared block an all_reduce runs on (empty_shared).
constexpr size_t kSharedSlot = kHeaderLen - 1;
static_assert(6 + kMaxHeaderDims <= kSharedSlot);
struct op_header {
  int64_t v[kHeaderLen] = {};
};

/// The header of op `kind` on `t` (null: no tensor), with its root and reduce op (-1: none).
op_header make_header(op_kind kind, const tensor* t, int root, int op);

/// A header as a message shows it: "all_reduce float32 [4, 3] SUM".
std::string describe(const int64_t* h);

/// "[0, 2, 3]".
std::string ranks_str(const std::vector<int>& r);

/// A contiguous view of `t` for Gloo to read and write: t itself, or a copy written back.
struct contiguous_buffer {
  tensor orig;
  tensor flat;
  explicit contiguous_buffer(const tensor& t) : orig(t), flat(t.contiguous()) {}
  void copy_back() {
    if (!flat.is_same(orig))
      orig.copy_(flat);
  }
};

/// Throws actorch::error naming `op` and `what` unless `t` is a defined CPU tensor.
void check_cpu(const char* op, const tensor& t, const char* what);
/// Throws unless `rop` applies to `dt` (bitwise ops to integers and bool, AVG to floats).
void check_reduce(const char* op, dtype dt, reduce_op rop);
/// Throws unless `list` holds `n` CPU tensors, each of like's dtype and number of elements.
void check_list(const char* op, const std::vector<tensor>& list, const char* what, size_t n,
                const tensor& like);

/// The slot of a send or recv with `tag` of `t` (Note [Point-to-point slots] in gloo_checks.cpp).
uint64_t p2p_slot(int tag, const tensor& t);
/// "(tag 3, float32 [4])", for messages about a send or recv.
std::string p2p_what(const tensor& t, int tag);

} // namespace actorch::dist::gloo_checks
