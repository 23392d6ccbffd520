#!/usr/bin/env bash
# Runs one job as two "nodes": two network namespaces joined by a veth pair, each with its own
# address (10.233.X.1 and .2 on an interface named braid0 in both), and `braid launch --nnodes 2
# --node-rank R --master-addr 10.233.X.1` in each (docs/multinode.md). Node 0's launcher serves
# the store on its veth address, so the rendezvous crosses a real network path.
#   run_netns.sh BRAID NPROC_PER_NODE EXPECT PROGRAM [ARGS...]
# EXPECT: "ok" (both launchers exit 0 and every rank prints "done"), or "kill-node1": once node
# 1's ranks have completed a few collectives (a line "completed all_reduce #3"), every process
# of node 1 is SIGKILLed, launcher included; node 0's launcher must then exit non-zero within the
# deadline, with each of its ranks reporting a lost peer.
# Exits 77 (ctest: skipped) with a message where namespaces cannot be made (not root, no ip).
# Environment passed to the ranks: BRAID_TIMEOUT (default 30); UCX_TLS (default tcp,self) and
# UCX_NET_DEVICES (default braid0), so that UCX between the nodes takes the veth, never the
# shared /dev/shm; anything in BRAID_NETNS_ENV ("NAME=value NAME=value").
# NETNS_MIN_VETH_BYTES (default 0): the least node 0 must receive over the veth (netns_lib.sh).
set -u
braid=$1 nproc=$2 expect=$3
shift 3
case $expect in
ok | kill-node1) ;;
*)
  echo "run_netns.sh: EXPECT must be ok or kill-node1, got '$expect'" >&2
  exit 2
  ;;
esac
# shellcheck source=netns_lib.sh
source "$(dirname "$0")/netns_lib.sh"
netns_setup

export BRAID_STORE_TOKEN
BRAID_STORE_TOKEN=$(head -c12 /dev/urandom | od -An -tx1 | tr -d ' \n')
export BRAID_TIMEOUT=${BRAID_TIMEOUT:-30}
export UCX_TLS=${UCX_TLS:-tcp,self} UCX_NET_DEVICES=${UCX_NET_DEVICES:-braid0}
port=$((29500 + tag % 2000))
deadline=$((BRAID_TIMEOUT + 30))
for i in 0 1; do
  out=$out0
  [[ $i -eq 1 ]] && out=$out1
  # shellcheck disable=SC2086
  timeout -k 5 "$deadline" ip netns exec "${ns[$i]}" env ${BRAID_NETNS_ENV:-} \
    "$braid" launch --nnodes 2 --node-rank "$i" --nproc-per-node "$nproc" \
    --master-addr "${addr[0]}" --master-port "$port" --timeout "$deadline" --grace-period 1 \
    "$@" >"$out" 2>&1 &
  pids[i]=$!
done
if [[ $expect == kill-node1 ]]; then
  for ((t = 0; t < 10 * deadline; t++)); do
    grep -q "completed all_reduce #3$" "$out1" && break
    sleep 0.1
  done
  ip netns pids "${ns[1]}" | xargs -r kill -KILL
  echo "killed every process of node 1" >>"$out1"
fi
wait "${pids[0]}" 2>/dev/null
status0=$?
wait "${pids[1]}" 2>/dev/null
status1=$?

check_end "node 0's launcher" "$status0" $((status0 == 124))  # 124: timeout's
if [[ $expect == ok ]]; then
  [[ $status1 -eq 0 ]] || fail "node 1's launcher exited $status1, expected 0"
fi
check_veth "${NETNS_MIN_VETH_BYTES:-0}"
finish "2 nodes x $nproc ranks ($expect)"
