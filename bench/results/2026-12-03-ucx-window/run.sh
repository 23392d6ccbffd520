set -u
source /work/main/tests/multinode/netns_lib.sh
netns_setup
netns_tcp_cc || exit 1
export UCX_TLS=tcp,self UCX_NET_DEVICES=braid0
in_ns() { ip netns exec "${ns[$1]}" "${@:2}"; }
burst() { # label env... -- msg count iters
  local label=$1; shift; local envs=(); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  local f=/tmp/burst/addr.$RANDOM
  in_ns 1 env "${envs[@]}" /tmp/burst/burst recv $f "$@" > /tmp/burst/r.txt 2>&1 &
  in_ns 0 env "${envs[@]}" /tmp/burst/burst send $f "$@" > /tmp/burst/s.txt 2>&1
  wait
  echo "$label: $(cat /tmp/burst/r.txt | tr '\n' ' ') $(cat /tmp/burst/s.txt | tr '\n' ' ')"
}
pt() { local label=$1; shift; local envs=(); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  local port=$((20000 + RANDOM % 20000))
  in_ns 1 env "${envs[@]}" timeout 60 ucx_perftest -p $port >/dev/null 2>&1 &
  sleep 0.4
  local line=$(in_ns 0 env "${envs[@]}" timeout 60 ucx_perftest ${addr[1]} -p $port "$@" -v 2>&1 | grep -E '^ *[0-9]+,' | tail -1 | tr -d ' ')
  wait
  echo "$label: $(echo $line | awk -F, '{printf "%.3f GB/s", $6 * 1048576 / 1e9}')"
}
S="UCX_TCP_TX_SEG_SIZE=512K UCX_TCP_RX_SEG_SIZE=512K"
for r in 1 2 3; do
  burst "1Mx64" BURST_EH=1 UCX_ZCOPY_THRESH=inf $S -- 1048576 64 12
  burst "1Mx64-s1" BURST_SWIN=1 BURST_EH=1 UCX_ZCOPY_THRESH=inf $S -- 1048576 64 12
  burst "1Mx64-r1" BURST_RWIN=1 BURST_EH=1 UCX_ZCOPY_THRESH=inf $S -- 1048576 64 12
  burst "1Mx64-s1r1" BURST_SWIN=1 BURST_RWIN=1 BURST_EH=1 UCX_ZCOPY_THRESH=inf $S -- 1048576 64 12
  burst "1Mx64-s2r2" BURST_SWIN=2 BURST_RWIN=2 BURST_EH=1 UCX_ZCOPY_THRESH=inf $S -- 1048576 64 12
  burst "1Mx64-s2" BURST_SWIN=2 BURST_EH=1 UCX_ZCOPY_THRESH=inf $S -- 1048576 64 12
done
