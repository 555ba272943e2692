// The job secret's cryptography (job_crypto.hpp).
#include "comm/store/job_crypto.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "base/error.hpp"

namespace actorch::dist {

namespace {

// Note [OpenSSL at exit]
// ~~~~~~~~~~~~~~~~~~~~~~
// OpenSSL frees its locks in an atexit handler of its own (OPENSSL_cleanup). A process of
// actorch's may exit while a thread is still inside its calls: the launcher leaves a watcher
// stuck on the network behind (comm/launch/launcher.cpp), a store connection's thread may be
// proving a client. That thread then locks freed memory (TSan saw the launcher's main thread
// destroy a lock a watcher had just released). So OpenSSL is started without that handler
// before its first use here; the process's end frees its memory as it frees everything else.
void init_crypto() {
  static const bool ok = OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;
  ACTORCH_CHECK(ok, "OpenSSL's libcrypto did not start (OPENSSL_init_crypto)");
}

} // namespace

std::string random_bytes(size_t n, const char* what) {
  init_crypto();
  std::string out(n, '\0');
  ACTORCH_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), int(n)) == 1,
                "no random bytes from OpenSSL for ", what);
  return out;
}

std::string hmac_sha256(const std::string& key, const std::string& message) {
  init_crypto();
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  ACTORCH_CHECK(HMAC(EVP_sha256(), key.data(), int(key.size()),
                     reinterpret_cast<const unsigned char*>(message.data()), message.size(), out,
                     &len) != nullptr,
                "HMAC-SHA256 failed");
  return std::string(reinterpret_cast<const char*>(out), len);
}

bool proofs_equal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

} // namespace actorch::dist
