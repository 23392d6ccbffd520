// braid's UCX configuration choices (docs/ucx.md, "tcp: copy mode"), apart from the transport
// that applies them. Compiled only with UCX, like ucx_transport.*. Private to comm/.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

struct ucp_config;

namespace braid {

// Note [tcp copy mode]
// UCX 1.13's tcp transport completes a zero-copy send twice when the socket write fails under
// it (uct_tcp_ep_sendv: uct_tcp_ep_handle_send_err already completed the operation through
// uct_tcp_ep_handle_disconnected, then sendv completes it again). With Debian's build that is an
// assertion and SIGABRT (`uct_iface.h: Assertion 'comp->count > 0' failed ... status=-80`)
// instead of the peer-lost error: measured, 17 of 120 runs of 2 nodes x 1 rank in which node 1
// is killed mid-all_reduce (docs/performance.md). Zero-copy sends over tcp are the eager
// zcopy protocol and the rendezvous put_zcopy; with UCX_ZCOPY_THRESH=inf and
// UCX_TCP_PUT_ENABLE=n tcp only sends from UCX's own buffers, which fail cleanly (0 of 160
// aborts), and UCX_TCP_TX_SEG_SIZE=64K makes those buffers large enough to cost nothing
// measurable. So when tcp is the only network transport UCX has, braid sets the three unless
// the user set them; where InfiniBand is present the threshold would cost its zero-copy paths too,
// and nothing is changed. BRAID_UCX_TCP_ZCOPY=1 keeps UCX's defaults (a faster 4 MiB message
// over tcp, at the risk above); =0 applies copy mode whatever the transports.

// One UCX setting of copy mode: the environment variable a user would set ("UCX_TCP_TX_SEG_SIZE"),
// the key ucp_config_modify() takes for it ("TX_SEG_SIZE": a transport's own settings go by
// their name without the transport's prefix, which UCX applies to every interface that has
// one; "TCP_TX_SEG_SIZE" is rejected as an invalid configuration), and the value.
struct UcxSetting {
  std::string variable, key, value;
};

// `network_tls`: the transports of UCX's network devices on this machine (uct's resource
// list: "tcp", "rc_verbs", ...). `requested`: BRAID_UCX_TCP_ZCOPY (true: keep zero copy).
// `env`: reads a variable of the environment (the user's UCX_* settings win). Returns the
// settings to apply, empty when none.
std::vector<UcxSetting> tcp_copy_mode_settings(
    const std::vector<std::string>& network_tls, std::optional<bool> requested,
    const std::function<std::optional<std::string>(const std::string&)>& env);

// The transports of UCX's network devices here (uct_query_components and each memory domain's
// resources, device type NET), sorted and unique.
std::vector<std::string> ucx_network_transports();

// Applies tcp_copy_mode_settings() for this machine and environment to `config` (ucp_config_read's
// result); returns what it applied.
std::vector<UcxSetting> apply_tcp_copy_mode(ucp_config* config);

}  // namespace braid
