// Choosing network interfaces as PyTorch users do: GLOO_SOCKET_IFNAME (one interface or several,
// comma-separated; the Gloo group makes one TCP device per interface and uses them round-robin)
// and NCCL_SOCKET_IFNAME (NCCL reads it itself; it is checked here first, so that a typo fails
// with the interfaces that exist instead of NCCL's "no socket interface found").
#pragma once

#include <string>
#include <vector>

namespace actorch::dist {

/// The names of this host's network interfaces (getifaddrs(3)), sorted, each once.
std::vector<std::string> network_interfaces();

/// The interfaces of a GLOO_SOCKET_IFNAME value ("eth0" or "eth0,eth1"; spaces around names are
/// ignored), in order. Throws actorch::error naming `variable`, the unknown interface and the
/// interfaces that exist, or an empty entry.
std::vector<std::string> parse_gloo_ifnames(const std::string& value,
                                            const char* variable = "GLOO_SOCKET_IFNAME");

/// GLOO_SOCKET_IFNAME's interfaces, or {} when it is unset or empty.
std::vector<std::string> gloo_socket_ifnames();

/// Checks a NCCL_SOCKET_IFNAME value with NCCL's rules: "eth,ib" selects interfaces whose names
/// start with a prefix, "=eth0" (leading '=') matches names exactly, "^docker,lo" (leading '^')
/// excludes by prefix. Throws actorch::error naming the value and the interfaces that exist
/// when an included entry matches no interface, or when the exclusions leave none.
void check_nccl_ifname(const std::string& value);

/// check_nccl_ifname on NCCL_SOCKET_IFNAME when it is set.
void check_nccl_socket_ifname();

/// AF_INET when the interface has an IPv4 address, else AF_INET6 when it has an IPv6 one.
/// Throws actorch::error when it has neither (down, or no address assigned). Gloo binds to the
/// first address of the family it is asked for, so IPv4 is preferred: an IPv6 link-local
/// address listed first would need a scope id to connect to.
int interface_family(const std::string& name);

} // namespace actorch::dist
