#include "comm/elastic.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <string>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/parse.hpp"
#include "base/text.hpp"
#include "comm/backend/gloo/process_group_gloo.hpp"
#include "comm/store/prefix_store.hpp"
#include "comm/store/tcp_store.hpp"

namespace actorch::dist::elastic {

namespace {

std::string need_env(const char* name) {
  const auto v = env(name);
  ACTORCH_CHECK(v.has_value(), "elastic: ", name,
                " is not set: regrouping needs the store of `actorch launch --elastic`, which "
                "sets it");
  return *v;
}

} // namespace

std::string rank_list(const std::vector<int>& ranks) {
  return join_numbers(ranks, ",");
}

std::vector<int> parse_rank_list(const std::string& text, const std::string& what) {
  std::vector<int> ranks;
  for (size_t pos = 0; pos < text.size();) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    ranks.push_back(int(parse_int(text.substr(pos, comma - pos), what + " (\"" + text + "\")", 0,
                                  std::numeric_limits<int>::max())));
    pos = comma + 1;
  }
  return ranks;
}

bool enabled() {
  return env_flag("ACTORCH_ELASTIC", false);
}

int replacement() {
  return int(env_int("ACTORCH_ELASTIC_JOIN", 0, 0, std::numeric_limits<int>::max()));
}

namespace {
std::atomic<int64_t> g_joined{0};
} // namespace

int64_t joined_membership() {
  return g_joined.load();
}

void set_joined_membership(int64_t generation) {
  g_joined.store(generation);
}

coordinator::coordinator(milliseconds timeout)
    : launch_rank_(int(parse_int(need_env("RANK"), "RANK", 0))), timeout_(timeout) {
  const std::string host = need_env("MASTER_ADDR");
  const auto port = uint16_t(parse_int(need_env("MASTER_PORT"), "MASTER_PORT", 1, 65535));
  store_ = std::make_shared<tcp_store>(host, port, false, timeout);
}

coordinator::~coordinator() = default;

membership coordinator::next(int64_t after, milliseconds wait) {
  // The launcher's detection time.
  wait = std::max(wait, milliseconds(env_int("ACTORCH_ELASTIC_WAIT_MS", 0)));
  const std::string first = members_key + std::to_string(after + 1);
  try {
    store_->wait({first}, wait);
  } catch (const std::exception& e) {
    ACTORCH_FAIL("elastic: no rank was lost: the launcher published no membership after ", after,
                 " within ", wait.count(), " ms (", e.what(), ")");
  }
  // A second rank lost meanwhile: take the newest (members who read the older one fail to
  // make its group and come back here).
  const membership m = read(std::max(after + 1, parse_int(store_->get(generation_key),
                                                          "elastic: the launcher's membership "
                                                          "number",
                                                          0)));
  ACTORCH_CHECK(m.rank >= 0, "elastic: membership ", m.generation,
                " does not have this process (rank ", launch_rank_,
                "): the launcher counted it lost");
  return m;
}

bool coordinator::published(int64_t generation, milliseconds wait) {
  const std::string key = members_key + std::to_string(generation);
  try {
    if (wait.count() == 0)
      return store_->check({key});
    store_->wait({key}, wait);
    return true;
  } catch (const std::exception&) {
    return false; // not within `wait` (or the store is gone: the next call says so)
  }
}

membership coordinator::join(milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (int64_t g = parse_int(store_->get(generation_key),
                             "elastic: the launcher's membership "
                             "number",
                             0);
       ; ++g) {
    if (g > 0) {
      if (membership m = read(g); m.rank >= 0)
        return m;
    }
    const auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    try {
      store_->wait({members_key + std::to_string(g + 1)}, std::max(left, milliseconds(1)));
    } catch (const std::exception& e) {
      ACTORCH_FAIL("elastic: replacement rank ", launch_rank_,
                   " found no membership with it within ", wait.count(), " ms (", e.what(), ")");
    }
  }
}

membership coordinator::read(int64_t generation) {
  membership m;
  m.generation = generation;
  m.ranks = parse_rank_list(store_->get(members_key + std::to_string(generation)),
                            "elastic: membership " + std::to_string(generation));
  const auto it = std::find(m.ranks.begin(), m.ranks.end(), launch_rank_);
  m.rank = it == m.ranks.end() ? -1 : int(it - m.ranks.begin());
  return m;
}

namespace {

// Note [Superseded membership]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A member of membership g lost before it joined g's group (killed while the survivors
// regrouped) leaves the others waiting in the group's rendezvous, for the group's whole timeout
// (60 s), although the launcher publishes membership g + 1 without it within its detection
// time. So the group meets through this store: it waits in slices and, between them, looks
// whether g + 1 is out; if it is, the wait fails saying so, make_group throws, and the trainer
// asks for the newest membership (process_link::regroup); a replacement rank's
// init_process_group joins the newer one likewise. A wait that fails long before its
// slice is up (under half) is not its timeout (the store is gone) and fails at once.
class membership_store final : public store {
public:
  membership_store(std::shared_ptr<store> base, int64_t generation)
      : store(base->timeout()), base_(std::move(base)), generation_(generation),
        group_(
            std::make_shared<prefix_store>("/elastic/group_" + std::to_string(generation), base_)),
        next_(members_key + std::to_string(generation + 1)) {}

  void set(const std::string& key, const std::string& value) override { group_->set(key, value); }
  std::string get(const std::string& key) override {
    wait({key}, timeout());
    return group_->get(key);
  }
  int64_t add(const std::string& key, int64_t delta) override { return group_->add(key, delta); }
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override {
    return group_->compare_set(key, expected, desired);
  }
  bool check(const std::vector<std::string>& keys) override { return group_->check(keys); }
  using store::wait;
  void wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    constexpr milliseconds kSlice{200};
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto now = std::chrono::steady_clock::now();
      const auto slice =
          std::min(kSlice, std::max(milliseconds(1),
                                    std::chrono::duration_cast<milliseconds>(deadline - now)));
      try {
        group_->wait(keys, slice);
        return;
      } catch (const std::exception& e) {
        const auto after = std::chrono::steady_clock::now();
        if (after - now < slice / 2)
          throw;               // not the slice's timeout (long before it): the store's own failure
        if (after >= deadline) // the whole wait's timeout, named as such (not the last slice's)
          throw_timeout(("elastic: membership " + std::to_string(generation_) + "'s group").c_str(),
                        keys, timeout, [&](const std::string& k) { return group_->check({k}); });
        if (base_->check({next_}))
          ACTORCH_FAIL("elastic: membership ", generation_ + 1, " was published while ",
                       "membership ", generation_, "'s group met (a member was lost before it ",
                       "joined): ", e.what());
      }
    }
  }
  bool delete_key(const std::string& key) override { return group_->delete_key(key); }
  int64_t num_keys() override { return group_->num_keys(); }

protected:
  std::string get_now(const std::string& key) override { return group_->get(key); }

private:
  std::shared_ptr<store> base_;
  int64_t generation_;
  std::shared_ptr<prefix_store> group_;
  std::string next_;
};

} // namespace

std::shared_ptr<process_group> coordinator::make_group(const membership& m) {
  process_group_gloo::options o;
  o.timeout = timeout_;
  o.shared_memory = false;
  return std::make_shared<process_group_gloo>(
      std::make_shared<membership_store>(store_, m.generation), m.rank, int(m.ranks.size()), o,
      m.ranks);
}

} // namespace actorch::dist::elastic
