// Regrouping after a lost rank (Note [Elastic membership] in comm/launch/launcher.cpp): the
// launcher started with --elastic publishes in its store which of its ranks remain; the
// survivors make a process group of them and go on.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.hpp"

namespace actorch::dist {
class store;
}

namespace actorch::dist::elastic {

using milliseconds = std::chrono::milliseconds;

/// The launcher's keys: the newest membership's number, and each membership's ranks
/// ("0,2,3": the RANKs the launcher gave them).
inline constexpr const char* generation_key = "/elastic/generation";
inline constexpr const char* members_key = "/elastic/members/";

/// A membership's ranks as the store keeps them, "0,2,3" ("" for none), and back. Throws
/// naming `what` for a malformed list.
std::string rank_list(const std::vector<int>& ranks);
std::vector<int> parse_rank_list(const std::string& text, const std::string& what);

/// Whether this process was started by `actorch launch --elastic` (ACTORCH_ELASTIC=1).
bool enabled();
/// Which replacement for a lost rank this process is (ACTORCH_ELASTIC_JOIN), 0 when it is one
/// of the job's first ranks.
int replacement();
/// The membership this process joined as a replacement (init_process_group records it), 0
/// for a first rank.
int64_t joined_membership();
void set_joined_membership(int64_t generation);

struct membership {
  int64_t generation = 0;
  std::vector<int> ranks; ///< the members' launcher RANKs, ascending
  int rank = -1;          ///< this process's place among them: its rank in their group
};

/// This process's link to the launcher's store, for regrouping.
class coordinator {
public:
  /// Joins the launcher's store at MASTER_ADDR:MASTER_PORT; this process is RANK. Throws
  /// naming what is missing when the environment is not an elastic launcher's.
  explicit coordinator(milliseconds timeout);
  ~coordinator();

  /// The launcher's RANK of this process.
  int launch_rank() const { return launch_rank_; }
  /// The newest membership after `after`, waiting up to `wait` for the launcher to publish
  /// one. Throws when none comes in time (whatever failed was not a lost rank) or when this
  /// process is not a member.
  membership next(int64_t after, milliseconds wait);
  /// Whether the launcher has published membership `generation`, waiting up to `wait` (0: only
  /// looks).
  bool published(int64_t generation, milliseconds wait);
  /// A replacement's first membership: the newest one that has this process, waiting up to
  /// `wait` for the launcher to publish it.
  membership join(milliseconds wait);
  /// A Gloo group of `m`'s members (no shared memory: Note [Elastic membership]), named by
  /// their launcher RANKs in its messages. Blocks until every member joined; throws as soon as
  /// the launcher publishes a later membership (a member lost before it joined: ask next()
  /// again; Note [Superseded membership]), and after the timeout.
  std::shared_ptr<process_group> make_group(const membership& m);

private:
  membership read(int64_t generation);

  std::shared_ptr<store> store_;
  int launch_rank_;
  milliseconds timeout_;
};

} // namespace actorch::dist::elastic
