// The caller's tag of a collective: what the collectives a thread issues are for ("DDP bucket
// 3", "SyncBatchNorm"), named in the group's ledger and so in the roll call of a collective
// that waits too long ("all_reduce #184 (DDP bucket 3) waiting 10.0 s: ..."). torch has no
// such thing; its watchdog names the op and its sequence number only.
//
//   { dist::collective_tag tag("my metric sync"); dist::all_reduce(t); }
#pragma once

#include <string>

namespace actorch::dist {

class collective_tag {
public:
  /// Tags this thread's collectives until the object goes; nests (the innermost wins).
  explicit collective_tag(std::string tag);
  ~collective_tag();
  collective_tag(const collective_tag&) = delete;
  collective_tag& operator=(const collective_tag&) = delete;

  /// This thread's current tag, or "" (issued collectives untagged).
  static const std::string& current();

private:
  std::string previous_;
};

} // namespace actorch::dist
