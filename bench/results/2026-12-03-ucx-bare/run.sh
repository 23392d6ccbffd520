#!/usr/bin/env bash
# A bare UCX program against ucx_perftest at 64 MiB (docs/performance.md, "Where issue 4's goals
# stand: UCX's own settings"). Run as root from the repository root, after building
# ../2026-12-03-ucx-window/burst.cc into /tmp/burst/burst (command in that folder's README).
# $S is split on purpose: two variables.
# shellcheck disable=SC2086
set -u
source tests/multinode/netns_lib.sh
netns_setup
netns_tcp_cc || exit 1
export UCX_TLS=tcp,self UCX_NET_DEVICES=braid0
in_ns() { ip netns exec "${ns[$1]}" "${@:2}"; }
burst() { # label env... -- msg count iters
  local label=$1; shift; local envs=(); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  local f=/tmp/burst/addr.$RANDOM
  in_ns 1 env "${envs[@]}" timeout -k 5 120 /tmp/burst/burst recv $f "$@" > /tmp/burst/r.txt 2>&1 &
  in_ns 0 env "${envs[@]}" timeout -k 5 120 /tmp/burst/burst send $f "$@" > /tmp/burst/s.txt 2>&1
  wait
  echo "$label: $(tr '\n' ' ' < /tmp/burst/r.txt)"
}
pt() { # label env... -- perftest args
  local label=$1; shift; local envs=(); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  local port=$((20000 + RANDOM % 20000)) line
  in_ns 1 env "${envs[@]}" timeout -k 5 120 ucx_perftest -p $port >/dev/null 2>&1 &
  sleep 0.4
  line=$(in_ns 0 env "${envs[@]}" timeout -k 5 120 ucx_perftest "${addr[1]}" -p $port "$@" -v 2>&1 |
    grep -E '^ *[0-9]+,' | tail -1 | tr -d ' ')
  wait
  echo "$label: $(echo "$line" | awk -F, '{printf "%.3f GB/s", $6 * 1048576 / 1e9}')"
}
M=67108864
S="UCX_TCP_TX_SEG_SIZE=512K UCX_TCP_RX_SEG_SIZE=512K"
for r in ${ROUNDS:-1 2 3}; do
  echo "# round $r"
  pt "perftest tag_bw 64M" -- -t tag_bw -s $M -n 32 -w 2
  burst "bare, no EH, 1 x 64M" BURST_EH=0 -- $M 1 34
  burst "bare, no EH, 1 x 64M, huge" BURST_EH=0 BURST_HUGE=1 -- $M 1 34
  burst "bare, no EH, 16 x 4M, huge" BURST_EH=0 BURST_HUGE=1 -- 4194304 16 34
  pt "perftest tag_bw 64M -e, braid segs" $S -- -t tag_bw -s $M -n 32 -w 2 -e
  burst "bare, EH, braid segs, zcopy, 1 x 64M, huge" BURST_EH=1 BURST_HUGE=1 $S -- $M 1 34
  burst "bare, EH, braid segs, zcopy, 64 x 1M, huge" BURST_EH=1 BURST_HUGE=1 $S -- 1048576 64 34
  pt "perftest tag_bw 64M -e, braid settings (copy)" UCX_ZCOPY_THRESH=inf $S -- -t tag_bw -s $M -n 32 -w 2 -e
  burst "bare, EH, braid settings, 1 x 64M, huge" BURST_EH=1 BURST_HUGE=1 UCX_ZCOPY_THRESH=inf $S -- $M 1 34
  burst "bare, EH, braid settings, 64 x 1M, huge" BURST_EH=1 BURST_HUGE=1 UCX_ZCOPY_THRESH=inf $S -- 1048576 64 34
done
