// The job secret's cryptography (Note [Job secret] in tcp_store_server.cpp): random bytes for
// nonces and secrets, HMAC-SHA256 proofs and their comparison, over OpenSSL's libcrypto, started
// as Note [OpenSSL at exit] in job_crypto.cpp says. The store's server and client, the Gloo
// group's pair proofs and the launcher use these, and only these, of OpenSSL.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace actorch::dist {

/// `n` bytes from OpenSSL's random generator; `what` names them in the error.
std::string random_bytes(size_t n, const char* what);
/// HMAC-SHA256 of `message` under `key` (32 bytes).
std::string hmac_sha256(const std::string& key, const std::string& message);
/// Whether two proofs are equal, in time that does not depend on where they differ.
bool proofs_equal(std::string_view a, std::string_view b);

} // namespace actorch::dist
