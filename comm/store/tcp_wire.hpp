// PyTorch's TCPStore wire protocol, shared by tcp_store's client and its master (Note
// [TCPStore protocol] in tcp_store_server.cpp): a request is one type byte and its arguments;
// integers travel as raw little-endian bytes (PyTorch copies host-order values, which is
// little-endian on every machine it runs on); a string is a u64 length and its bytes. Two
// numberings: torch 1.13's (Debian 12's), and 2.x's, which puts VALIDATE first.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace actorch::dist::wire {

/// The operations, numbered as torch 1.13 numbers them.
enum class op : uint8_t {
  set = 0,
  compare_set = 1,
  get = 2,
  add = 3,
  check = 4,
  wait = 5,
  num_keys = 6,
  watch_key = 7,
  delete_key = 8,
  // 2.x only (no 1.13 code):
  append = 9,
  multi_get = 10,
  multi_set = 11,
  cancel_wait = 12,
  ping = 13,
  validate = 14,
  // actorch's own, outside both numberings: the job secret's challenge (Note [Job secret]).
  auth = 0xA7,
};

/// Which numbering a connection speaks.
enum class dialect : uint8_t { torch113, torch2 };

/// The 2.x handshake: VALIDATE (code 0 in 2.x) then this u32.
inline constexpr uint32_t validate_magic = 0x3C85F7CE;

/// The code of `o` in `d` (2.x: VALIDATE = 0 and the rest one higher; WATCH_KEY is gone).
inline uint8_t code_of(op o, dialect d) {
  if (o == op::auth || d == dialect::torch113)
    return uint8_t(o);
  switch (o) {
  case op::validate: return 0;
  case op::set: return 1;
  case op::compare_set: return 2;
  case op::get: return 3;
  case op::add: return 4;
  case op::check: return 5;
  case op::wait: return 6;
  case op::num_keys: return 7;
  case op::delete_key: return 8;
  case op::append: return 9;
  case op::multi_get: return 10;
  case op::multi_set: return 11;
  case op::cancel_wait: return 12;
  case op::ping: return 13;
  default: return 0xFF;
  }
}

/// The operation a code means in `d`; false for a code with no meaning there.
inline bool op_of(uint8_t code, dialect d, op& out) {
  if (code == uint8_t(op::auth)) {
    out = op::auth;
    return true;
  }
  if (d == dialect::torch113) {
    if (code > uint8_t(op::delete_key))
      return false;
    out = op(code);
    return true;
  }
  static constexpr op table[] = {op::validate,    op::set,    op::compare_set, op::get,
                                 op::add,         op::check,  op::wait,        op::num_keys,
                                 op::delete_key,  op::append, op::multi_get,   op::multi_set,
                                 op::cancel_wait, op::ping};
  if (code >= sizeof table / sizeof table[0])
    return false;
  out = table[code];
  return true;
}

/// Replies to CHECK and WAIT.
inline constexpr uint8_t check_ready = 0, check_not_ready = 1;
inline constexpr uint8_t wait_stop_waiting = 0, wait_canceled = 1;

/// What a master accepts before it allocates (PyTorch 2.x's libuv server has the same kind of
/// bounds; 1.13 allocates whatever a length says).
inline constexpr uint64_t max_key_bytes = 64 * 1024;
inline constexpr uint64_t max_value_bytes = 64ull << 20;
inline constexpr uint64_t max_keys_per_request = 128 * 1024;

inline void put_u8(std::string& out, uint8_t v) {
  out.push_back(char(v));
}
template <class T> void put_int(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T)); // host order: little-endian, as PyTorch's
  out.append(b, sizeof(T));
}
inline void put_str(std::string& out, std::string_view s) {
  put_int<uint64_t>(out, s.size());
  out.append(s);
}
template <class T> T get_int(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

} // namespace actorch::dist::wire
