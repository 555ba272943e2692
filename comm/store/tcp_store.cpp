// tcp_store over CAF 0.17's middleman. The master spawns `store_actor` (a map plus the
// response promises of waiters) and publishes it; every rank, the master included, sends it
// requests from a scoped_actor and blocks on the answer with a timeout.
//
// Note [Waiting in the store actor]: the actor never blocks. A wait for missing keys becomes
// a response promise kept with its keys; every write re-checks the kept promises and delivers
// those whose keys are all present. The client's request timeout bounds the wait; a promise
// whose client gave up is delivered later into the void, which CAF allows.
#include "comm/store/tcp_store.hpp"

#include <map>
#include <thread>

#include "caf/all.hpp"
#include "caf/io/all.hpp"

#include "base/error.hpp"
#include "comm/store/hash_store.hpp"

namespace actorch::dist {

namespace {

using st_set = caf::atom_constant<caf::atom("st_set")>;
using st_get = caf::atom_constant<caf::atom("st_get")>;
using st_add = caf::atom_constant<caf::atom("st_add")>;
using st_cas = caf::atom_constant<caf::atom("st_cas")>;
using st_check = caf::atom_constant<caf::atom("st_check")>;
using st_wait = caf::atom_constant<caf::atom("st_wait")>;
using st_del = caf::atom_constant<caf::atom("st_del")>;
using st_num = caf::atom_constant<caf::atom("st_num")>;

struct waiter {
  std::vector<std::string> keys;
  caf::response_promise promise;
};

struct store_state {
  std::map<std::string, std::string> data;
  std::vector<waiter> waiters;

  bool has_all(const std::vector<std::string>& keys) const {
    for (const auto& k : keys)
      if (!data.contains(k))
        return false;
    return true;
  }
  // See Note [Waiting in the store actor].
  void wake() {
    for (size_t i = 0; i < waiters.size();) {
      if (has_all(waiters[i].keys)) {
        waiters[i].promise.deliver(caf::ok_atom::value);
        waiters.erase(waiters.begin() + std::ptrdiff_t(i));
      } else {
        ++i;
      }
    }
  }
};

// A class-based actor rather than a function: CAF 0.17 spawns a function actor without
// arguments through init_fun_factory, which UBSan flags (DEPENDENCIES.md, "ASan/UBSan and CAF").
class store_actor : public caf::event_based_actor {
public:
  explicit store_actor(caf::actor_config& cfg) : caf::event_based_actor(cfg) {}

  caf::behavior make_behavior() override {
    auto* self = this;
    return {
        [=](st_set, const std::string& key, const std::string& value) {
          self->state_.data[key] = value;
          self->state_.wake();
          return caf::ok_atom::value;
        },
        [=](st_get, const std::string& key) -> caf::result<bool, std::string> {
          auto it = self->state_.data.find(key);
          if (it == self->state_.data.end())
            return {false, std::string{}};
          return {true, it->second};
        },
        [=](st_add, const std::string& key,
            int64_t delta) -> caf::result<bool, int64_t, std::string> {
          auto& data = self->state_.data;
          auto it = data.find(key);
          int64_t v = delta;
          if (it != data.end()) {
            try {
              v += parse_counter(key, it->second);
            } catch (const std::exception& e) {
              return {false, int64_t(0), std::string(e.what())};
            }
          }
          data[key] = std::to_string(v);
          self->state_.wake();
          return {true, v, std::string{}};
        },
        [=](st_cas, const std::string& key, const std::string& expected,
            const std::string& desired) -> std::string {
          auto& data = self->state_.data;
          auto it = data.find(key);
          if (it == data.end() ? expected.empty() : it->second == expected) {
            data[key] = desired;
            self->state_.wake();
            return desired;
          }
          return it == data.end() ? expected : it->second;
        },
        [=](st_check, const std::vector<std::string>& keys) { return self->state_.has_all(keys); },
        [=](st_wait, const std::vector<std::string>& keys) {
          auto rp = self->make_response_promise();
          if (self->state_.has_all(keys))
            rp.deliver(caf::ok_atom::value);
          else
            self->state_.waiters.push_back(waiter{keys, rp});
          return rp;
        },
        [=](st_del, const std::string& key) { return self->state_.data.erase(key) > 0; },
        [=](st_num) { return int64_t(self->state_.data.size()); },
    };
  }

  // Kept promises point back at this actor (and at their requesters): drop them on exit, or
  // the cycle keeps the actor alive after shutdown.
  void on_exit() override {
    state_.waiters.clear();
    state_.data.clear();
  }

private:
  store_state state_;
};

} // namespace

struct tcp_store::impl {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::actor server; // the master's own store actor (invalid on clients)
  caf::actor target; // where requests go: server on the master, the proxy on clients

  impl() {
    // A store needs few threads: it answers small requests (tests run several in a process).
    cfg.set("scheduler.max-threads", 2);
    cfg.set("logger.verbosity", caf::atom("quiet"));
    cfg.load<caf::io::middleman>();
    sys = std::make_unique<caf::actor_system>(cfg);
  }

  // One request-response round trip. `what` names the operation in errors.
  template <class OnReply, class... Args>
  void call(const std::string& what, milliseconds timeout, OnReply on_reply, Args&&... args) {
    caf::scoped_actor self{*sys};
    std::string failure;
    bool timed_out = false;
    self->request(target, caf::duration{timeout}, std::forward<Args>(args)...)
        .receive(on_reply, [&](caf::error& err) {
          timed_out = err == caf::sec::request_timeout;
          failure = sys->render(err);
        });
    if (timed_out)
      throw timeout_error{};
    ACTORCH_CHECK(failure.empty(), "tcp_store: ", what, " failed: ", failure);
  }

  struct timeout_error {};
};

tcp_store::tcp_store(std::string host, uint16_t port, bool is_master, milliseconds timeout)
    : store(timeout), impl_(std::make_unique<impl>()), host_(std::move(host)), port_(port),
      is_master_(is_master) {
  auto& mm = impl_->sys->middleman();
  if (is_master_) {
    impl_->server = impl_->sys->spawn<store_actor>();
    auto bound = mm.publish(impl_->server, port_, nullptr, true);
    if (!bound) {
      caf::anon_send_exit(impl_->server, caf::exit_reason::user_shutdown);
      ACTORCH_FAIL("tcp_store: the master cannot listen on port ", port_, ": ",
                   impl_->sys->render(bound.error()));
    }
    port_ = *bound;
    impl_->target = impl_->server;
    return;
  }
  // The master may start later than us: retry until the timeout.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last;
  for (;;) {
    auto remote = mm.remote_actor(host_, port_);
    if (remote) {
      impl_->target = *remote;
      return;
    }
    last = impl_->sys->render(remote.error());
    if (std::chrono::steady_clock::now() >= deadline)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ACTORCH_FAIL("tcp_store: no master answered at ", host_, ":", port_, " within ", timeout.count(),
               " ms (last error: ", last, ")");
}

tcp_store::~tcp_store() {
  // A published actor that is still alive makes ~actor_system hang (DEPENDENCIES.md, CAF
  // gotcha 1): end it first.
  if (impl_->server)
    caf::anon_send_exit(impl_->server, caf::exit_reason::user_shutdown);
  impl_->target = nullptr;
  impl_->server = nullptr;
}

void tcp_store::set(const std::string& key, const std::string& value) {
  try {
    impl_->call(
        "set('" + key + "')", timeout(), [](caf::ok_atom) {}, st_set::value, key, value);
  } catch (const impl::timeout_error&) {
    ACTORCH_FAIL("tcp_store: set('", key, "') got no answer within ", timeout().count(), " ms");
  }
}

int64_t tcp_store::add(const std::string& key, int64_t delta) {
  int64_t out = 0;
  std::string err;
  try {
    impl_->call(
        "add('" + key + "')", timeout(),
        [&](bool ok, int64_t v, std::string msg) {
          out = v;
          if (!ok)
            err = std::move(msg);
        },
        st_add::value, key, delta);
  } catch (const impl::timeout_error&) {
    ACTORCH_FAIL("tcp_store: add('", key, "') got no answer within ", timeout().count(), " ms");
  }
  ACTORCH_CHECK(err.empty(), err);
  return out;
}

std::string tcp_store::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  std::string out;
  try {
    impl_->call(
        "compare_set('" + key + "')", timeout(), [&](std::string v) { out = std::move(v); },
        st_cas::value, key, expected, desired);
  } catch (const impl::timeout_error&) {
    ACTORCH_FAIL("tcp_store: compare_set('", key, "') got no answer within ", timeout().count(),
                 " ms");
  }
  return out;
}

bool tcp_store::check(const std::vector<std::string>& keys) {
  bool out = false;
  try {
    impl_->call(
        "check", timeout(), [&](bool v) { out = v; }, st_check::value, keys);
  } catch (const impl::timeout_error&) {
    ACTORCH_FAIL("tcp_store: check got no answer within ", timeout().count(), " ms");
  }
  return out;
}

void tcp_store::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  try {
    impl_->call(
        "wait", timeout, [](caf::ok_atom) {}, st_wait::value, keys);
  } catch (const impl::timeout_error&) {
    throw_timeout("tcp_store", keys, timeout);
  }
}

bool tcp_store::delete_key(const std::string& key) {
  bool out = false;
  try {
    impl_->call(
        "delete_key('" + key + "')", timeout(), [&](bool v) { out = v; }, st_del::value, key);
  } catch (const impl::timeout_error&) {
    ACTORCH_FAIL("tcp_store: delete_key('", key, "') got no answer within ", timeout().count(),
                 " ms");
  }
  return out;
}

int64_t tcp_store::num_keys() {
  int64_t out = 0;
  try {
    impl_->call(
        "num_keys", timeout(), [&](int64_t v) { out = v; }, st_num::value);
  } catch (const impl::timeout_error&) {
    ACTORCH_FAIL("tcp_store: num_keys got no answer within ", timeout().count(), " ms");
  }
  return out;
}

std::string tcp_store::get_now(const std::string& key) {
  bool found = false;
  std::string out;
  try {
    impl_->call(
        "get('" + key + "')", timeout(),
        [&](bool f, std::string v) {
          found = f;
          out = std::move(v);
        },
        st_get::value, key);
  } catch (const impl::timeout_error&) {
    ACTORCH_FAIL("tcp_store: get('", key, "') got no answer within ", timeout().count(), " ms");
  }
  ACTORCH_CHECK(found, "tcp_store: key '", key, "' was deleted while being read");
  return out;
}

} // namespace actorch::dist
