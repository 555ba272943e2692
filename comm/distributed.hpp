// torch.distributed's module-level API: init_process_group / destroy_process_group, the
// default group and new_group, rank queries, and the ops as free functions taking *global*
// ranks (translated to group ranks) with `async_op`. Without async_op an op waits and returns
// its completed work; with it, the work returns at once (see work.hpp).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_group.hpp"
#include "comm/store/store.hpp"

namespace actorch::dist {

using group = std::shared_ptr<process_group>;

/// torch.distributed.Backend: the backend names as PyTorch spells them. A name is taken in any
/// case ("GLOO", "Gloo"), as Backend("GLOO") is "gloo" in PyTorch.
struct Backend {
  static constexpr const char* GLOO = "gloo";
  static constexpr const char* NCCL = "nccl";
  static constexpr const char* MPI = "mpi";
  /// `name` in lower case; throws actorch::error naming it when it is none of the three.
  static std::string canonical(std::string_view name);
};

struct init_options {
  /// Backend::GLOO (CPU tensors) or Backend::NCCL (CUDA tensors; only in CUDA builds), in any
  /// case.
  std::string backend = Backend::GLOO;
  /// "env://" (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK), "tcp://host:port" or
  /// "file:///path"; empty (torch's None): "env://" unless `store` is given. Giving both is an
  /// error, as in torch.
  std::string init_method = "";
  /// -1: from RANK / WORLD_SIZE, else OMPI_COMM_WORLD_RANK / _SIZE, else SLURM_PROCID /
  /// SLURM_NTASKS (tcp:// and file:// also accept ?rank=R&world_size=N).
  int world_size = -1;
  int rank = -1;
  /// For the rendezvous (reaching the master included) and for every op of the groups.
  milliseconds timeout{1800000};
  /// A store shared by the ranks, instead of init_method (as torch's store= argument).
  std::shared_ptr<dist::store> store = nullptr;
};

/// torch.distributed.is_available: this build has the distributed package (always true).
bool is_available();
/// The gloo backend is always built in.
bool is_gloo_available();
/// True in CUDA builds, which link NCCL (as PyTorch's, it says nothing about whether a GPU is
/// present: init_process_group with "nccl" still needs one).
bool is_nccl_available();
/// Always false: actorch has no MPI backend (see backend_unavailable_reason("mpi")).
bool is_mpi_available();
/// Why `backend` cannot be used in this build, or "" when it can; init_process_group fails with
/// this reason for such a backend.
std::string backend_unavailable_reason(const std::string& backend);

/// Joins the default group; blocks until every rank has, or throws actorch::error within the
/// timeout (malformed URL, rank outside [0, world), a missing variable, no master).
void init_process_group(const init_options& opts = {});
bool is_initialized();
/// Drops the default group and every group made by new_group (finishing their queued ops).
void destroy_process_group();

/// The default group (torch's GroupMember.WORLD). @pre is_initialized()
group world();
/// The caller's rank in `g` (the default group when null), and the group's size; both -1 when
/// the caller is not a member, as torch's.
int get_rank(const group& g = nullptr);
int get_world_size(const group& g = nullptr);
std::string get_backend(const group& g = nullptr);

/// A group of the given global ranks (all ranks when empty), under PyTorch's rule: every rank
/// of the default group calls new_group, with the same ranks, in the same order, even ranks
/// that are not members: they get a group whose get_rank() and get_world_size() are -1, and
/// on which every op below returns at once, changing nothing, with a warning, as torch's do
/// (Note [Ops of a non-member] in distributed.cpp).
/// `backend` (in any case) defaults to the default group's, as in PyTorch.
group new_group(std::vector<int> ranks = {}, std::optional<milliseconds> timeout = {},
                std::optional<std::string> backend = {});

// Point-to-point; ranks are global. recv's src -1 means any rank; it returns the sender.
void send(const tensor& t, int dst, const group& g = nullptr, int tag = 0);
int recv(tensor& t, int src = -1, const group& g = nullptr, int tag = 0);
work isend(const tensor& t, int dst, const group& g = nullptr, int tag = 0);
/// The work's source_rank() is the sender's *global* rank.
work irecv(tensor& t, int src = -1, const group& g = nullptr, int tag = 0);

// Collectives; src/dst are global ranks.
work broadcast(tensor& t, int src, const group& g = nullptr, bool async_op = false);
work all_reduce(tensor& t, reduce_op op = reduce_op::sum, const group& g = nullptr,
                bool async_op = false);
work reduce(tensor& t, int dst, reduce_op op = reduce_op::sum, const group& g = nullptr,
            bool async_op = false);
work all_gather(std::vector<tensor>& tensor_list, const tensor& t, const group& g = nullptr,
                bool async_op = false);
work all_gather_into_tensor(tensor& output, const tensor& input, const group& g = nullptr,
                            bool async_op = false);
/// gather_list: one tensor per rank on dst, empty elsewhere.
work gather(const tensor& t, std::vector<tensor>& gather_list, int dst = 0,
            const group& g = nullptr, bool async_op = false);
/// scatter_list: one tensor per rank on src, empty elsewhere.
work scatter(tensor& t, const std::vector<tensor>& scatter_list, int src = 0,
             const group& g = nullptr, bool async_op = false);
work reduce_scatter(tensor& output, const std::vector<tensor>& input_list,
                    reduce_op op = reduce_op::sum, const group& g = nullptr, bool async_op = false);
work all_to_all(std::vector<tensor>& output_list, const std::vector<tensor>& input_list,
                const group& g = nullptr, bool async_op = false);
work barrier(const group& g = nullptr, bool async_op = false);
/// Throws actorch::error naming the ranks that did not arrive within `timeout` (default: the
/// group's): torch's words first (the first missing rank, or every one with `wait_all_ranks`),
/// then every missing rank by its global number (Note [Monitored barrier]).
void monitored_barrier(const group& g = nullptr, std::optional<milliseconds> timeout = {},
                       bool wait_all_ranks = false);

} // namespace actorch::dist
