// The Gloo group's full mesh: one TCP pair per peer, connected through the store, each pair
// checked to join the two ranks it should (Note [Gloo pair checks]) and, with a job secret,
// proved (Note [Gloo pair proofs]) before it carries data. Used by process_group_gloo.cpp.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <sys/socket.h>

namespace gloo {
class Context;
namespace transport {
class Device;
}
} // namespace gloo

namespace actorch::dist {

class store;

/// Connects rank `rank` of a group whose ranks have global numbers `global` to every peer, on
/// `device`, rendezvousing in `st`, within `timeout`: a Gloo context whose pairs each reached
/// the rank it names (remade when a stranger took a pair's place, until the timeout) and, with
/// a non-empty `secret`, proved it. Throws naming the peer, and any stranger seen, otherwise.
std::shared_ptr<gloo::Context> connect_mesh(store& st,
                                            const std::shared_ptr<gloo::transport::Device>& device,
                                            int rank, const std::vector<int>& global,
                                            const std::string& secret,
                                            std::chrono::milliseconds timeout);

/// This process's sockets whose local addresses (family, address and port) are `locals`, -1
/// where none is, found in one look at its descriptors. Gloo keeps its pairs' sockets to
/// itself; a pair's local port is its socket's alone.
std::vector<int> sockets_bound_to(const std::vector<sockaddr_storage>& locals);

/// Zeroes every byte of a Gloo address record (a sockaddr_storage, then a sequence number)
/// past its family's sockaddr: Gloo never initialises them, so they carried stack and heap
/// bytes of the process to whoever could read the store. A value of another size is left as
/// it is.
void scrub_address(std::string& record);

} // namespace actorch::dist
