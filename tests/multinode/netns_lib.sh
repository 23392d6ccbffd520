# shellcheck shell=bash
# Shared by run_netns.sh and run_netns_mpi.sh (sourced, not run): two network namespaces joined
# by a veth pair, the checks both scripts make, and the clean-up (docs/multinode.md).
#   netns_setup              ns[0], ns[1]: the namespaces; addr[0], addr[1]: 10.233.X.1 and .2
#                            on the interface "braid0" in each (one name on both nodes, so
#                            UCX_NET_DEVICES=braid0 and btl_tcp_if_include braid0 fit both);
#                            out0 / out1: temporary files for each node's output. Exits 77 (ctest:
#                            skipped) with a message where namespaces cannot be made.
#   veth_bytes I             bytes node I's braid0 has received so far
#   fail MESSAGE             records a failure (checked by finish)
#   check_ok NPROC           every rank 0 .. 2 NPROC - 1 printed "[rank R] done" in out0 / out1
#   check_peer_lost FIRST N  ranks FIRST .. FIRST + N - 1 reported braid's peer-lost error (with
#                            NETNS_ACCEPT_UCX_PUT_ABORT=1, or died of UCX 1.13's tcp put assertion:
#                            ucx_put_abort)
#   check_end WHO STATUS TIMED_OUT
#                            the job's end as EXPECT (ok | kill-node1) and NPROC want it: ok: WHO
#                            (the launcher, srun) exited 0 and check_ok; kill-node1: WHO failed
#                            but not by the driver's deadline (TIMED_OUT 1), and check_peer_lost
#                            for node 0's ranks
#   check_veth MIN           node 0 received at least MIN bytes over the veth since the start
#   finish WHAT              prints both outputs and exits 1 after failures, else "ok: WHAT"
#   netns_tcp_cc             both namespaces use the TCP congestion control NETNS_TCP_CC (default
#                            cubic; "host" changes nothing; benchmarks, see docs/multinode.md,
#                            "TCP congestion control"); it is added to the host's allowed list
#                            for the run and the list is restored on exit
#   netns_tcp_cc_used        the congestion control node 0's namespace uses
#   netns_braid_tcp_segments the UCX variables that give ucx_perftest braid's tcp segment sizes
#                            (the benchmarks' like-for-like runs)
# Environment: NETNS_MIN_VETH_BYTES (default 0): the least node 0 must receive over the veth;
# NETNS_VERBOSE=1: print both nodes' output even when every check passed.
# NETNS_ACCEPT_UCX_PUT_ABORT=1: check_peer_lost also accepts a rank that died of ucx_put_abort.

netns_setup() {
  if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then
    echo "SKIP: needs root and iproute2 (ip netns) to build two network namespaces" >&2
    exit 77
  fi
  tag=$$
  x=$((tag % 250 + 1))
  ns=("braid-n$tag-0" "braid-n$tag-1")
  if ! ip netns add "${ns[0]}" 2>/dev/null; then
    echo "SKIP: ip netns add failed (no network namespace support here)" >&2
    exit 77
  fi
  out0=$(mktemp /tmp/braid-netns-XXXXXX) out1=$(mktemp /tmp/braid-netns-XXXXXX)
  netns_tmp=$(mktemp -d /tmp/braid-netns-XXXXXX)
  trap netns_cleanup EXIT
  ip netns add "${ns[1]}"
  # Unique names in the root namespace; renamed to braid0 once inside their own.
  ip link add "bv$tag-0" type veth peer name "bv$tag-1"
  for i in 0 1; do
    addr[i]=10.233.$x.$((i + 1))
    ip link set "bv$tag-$i" netns "${ns[$i]}"
    ip -n "${ns[$i]}" link set "bv$tag-$i" name braid0
    ip -n "${ns[$i]}" addr add "${addr[$i]}/24" dev braid0
    ip -n "${ns[$i]}" link set braid0 up
    ip -n "${ns[$i]}" link set lo up
  done
  veth_rx0=$(veth_bytes 0)
  failures=0
}

netns_tcp_cc() {
  local cc=${NETNS_TCP_CC:-cubic} allowed=/proc/sys/net/ipv4/tcp_allowed_congestion_control i
  [[ $cc == host ]] && return 0
  if ! grep -qw "$cc" /proc/sys/net/ipv4/tcp_available_congestion_control; then
    modprobe "tcp_$cc" 2>/dev/null
    grep -qw "$cc" /proc/sys/net/ipv4/tcp_available_congestion_control ||
      { echo "netns_tcp_cc: this kernel has no TCP congestion control '$cc'" >&2; return 1; }
  fi
  if ! grep -qw "$cc" "$allowed"; then
    netns_allowed_cc=$(cat "$allowed")
    echo "$netns_allowed_cc $cc" >"$allowed" || return 1
  fi
  for i in 0 1; do
    ip netns exec "${ns[$i]}" sysctl -qw "net.ipv4.tcp_congestion_control=$cc" || return 1
  done
}

# braid's tcp segment sizes as UCX variables (Note [braid's UCX defaults],
# comm/src/ucx_transport.cc; keep the two in step).
# shellcheck disable=SC2034  # used by the scripts that source this file
netns_braid_tcp_segments=(UCX_TCP_TX_SEG_SIZE=512K UCX_TCP_RX_SEG_SIZE=512K)

netns_tcp_cc_used() {
  ip netns exec "${ns[0]}" cat /proc/sys/net/ipv4/tcp_congestion_control
}

netns_cleanup() {
  if [[ -n ${netns_allowed_cc:-} ]]; then
    echo "$netns_allowed_cc" >/proc/sys/net/ipv4/tcp_allowed_congestion_control
  fi
  for n in "${ns[@]}"; do ip netns pids "$n" 2>/dev/null | xargs -r kill -KILL; done
  for n in "${ns[@]}"; do ip netns del "$n" 2>/dev/null; done
  rm -rf "$out0" "$out1" "$netns_tmp"
}

veth_bytes() {
  ip netns exec "${ns[$1]}" cat /sys/class/net/braid0/statistics/rx_bytes
}

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

check_ok() {
  for ((r = 0; r < 2 * $1; r++)); do
    grep -qh "^\[rank $r\] done$" "$out0" "$out1" || fail "rank $r did not print 'done'"
  done
}

check_peer_lost() {
  for ((r = $1; r < $1 + $2; r++)); do
    grep -Eqh "^\[rank $r\] error: braid: peer lost: " "$out0" "$out1" && continue
    if [[ ${NETNS_ACCEPT_UCX_PUT_ABORT:-0} == 1 ]] && ucx_put_abort "$r"; then
      echo "note: rank $r aborted on UCX 1.13's tcp put assertion instead of reporting the lost peer (accepted: docs/ucx.md, \"Unchecked data endpoints\")"
      continue
    fi
    fail "rank $r reported no lost peer"
  done
}

# Whether rank R died of UCX 1.13's tcp put_zcopy assertion on a lost connection, and of nothing
# else: UCX's assertion line in the rank's output and the launcher's report of it killed by
# SIGABRT (docs/ucx.md, "Unchecked data endpoints").
ucx_put_abort() {
  grep -Eqh "^\[rank $1\] .*tcp_ep\.c:[0-9]+ +Assertion .ep->flags & UCT_TCP_EP_FLAG_PUT_TX_WAITING_ACK. failed" \
    "$out0" "$out1" &&
    grep -Eqh "^braid launch: rank $1 was killed by signal 6 " "$out0" "$out1"
}

check_end() {
  case $expect in
  ok)
    [[ $2 -eq 0 ]] || fail "$1 exited $2, expected 0"
    check_ok "$nproc"
    ;;
  kill-node1)
    [[ $2 -ne 0 && $3 -eq 0 ]] ||
      fail "$1 exited $2, expected a failure before the driver's deadline (timed out: $3)"
    check_peer_lost 0 "$nproc"
    ;;
  esac
}

check_veth() {
  local got=$(($(veth_bytes 0) - veth_rx0))
  echo "node 0 received $got bytes over the veth (braid0)"
  [[ $got -ge $1 ]] ||
    fail "node 0 received $got bytes over the veth, expected at least $1 (did the traffic between nodes take another path, such as shared memory?)"
}

finish() {
  if [[ $failures -gt 0 || -n ${NETNS_VERBOSE:-} ]]; then
    echo "---- node 0 (exit ${status0:-?}) ----" >&2
    cat "$out0" >&2
    echo "---- node 1 (exit ${status1:-?}) ----" >&2
    cat "$out1" >&2
  fi
  [[ $failures -eq 0 ]] || exit 1
  echo "ok: $*"
}
