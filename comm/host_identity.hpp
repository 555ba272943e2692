// Who this machine and a process are, for deciding what can be shared or cleaned up: ranks on
// the same host (and boot) share memory (shm_collectives), and a store file's recorded users are
// checked against the processes running here (file_store, Note [Stale store files]); and a
// socket address as numbers or text, for the addresses comm gives out, logs and reads.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <sys/socket.h>
#include <sys/types.h>

namespace actorch::dist {

/// "<host name>/<boot id>": equal for two processes only when they run on the same machine
/// since the same boot (namespaces with their own host name count as machines of their own).
std::string host_id();

/// When process `pid` started (field 22 of /proc/<pid>/stat, in clock ticks since boot), or
/// "" when no such process runs (an exited one not yet reaped, a zombie, included): with
/// host_id() and the pid, it names a process even after its pid is reused.
std::string process_start_time(pid_t pid);

/// Whether process `pid` of this host has exited: none runs, or it is a zombie (its parent has
/// not reaped it yet). False when it cannot tell (no /proc, another user's process).
bool process_exited(pid_t pid);

/// A socket address as numbers: {"127.0.0.1", 29500}, {"::1", 80}; {"?", 0} for a family
/// other than IPv4 and IPv6.
std::pair<std::string, uint16_t> numeric_endpoint(const sockaddr_storage& a);

/// numeric_endpoint as text: "127.0.0.1:29500", "[::1]:80" (what split_host_port reads).
std::string endpoint_text(const sockaddr_storage& a);

/// "host:port", "[v6]:port", "host" or "[v6]" as {host without brackets, port's text} (the
/// port's text empty when there is none); the port is the caller's to parse.
std::pair<std::string, std::string> split_host_port(const std::string& text);

} // namespace actorch::dist
