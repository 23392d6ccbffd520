#!/usr/bin/env bash
# Runs one job as two "nodes": two network namespaces joined by a veth pair, each with its own
# address (10.233.X.1 and .2), and `braid launch --nnodes 2 --node-rank R --master-addr
# 10.233.X.1` in each (docs/multinode.md). Node 0's launcher serves the store on its veth
# address, so the rendezvous crosses a real network path.
#   run_netns.sh BRAID NPROC_PER_NODE EXPECT PROGRAM [ARGS...]
# EXPECT: "ok" (both launchers exit 0 and every rank prints "done"), or "kill-node1": once node
# 1's ranks have completed a few collectives (a line "completed all_reduce #3"), every process
# of node 1 is SIGKILLed, launcher included; node 0's launcher must then exit non-zero within the
# deadline, with each of its ranks reporting a lost peer.
# Exits 77 (ctest: skipped) with a message where namespaces cannot be made (not root, no ip).
# Environment passed to the ranks: BRAID_TIMEOUT (default 30), anything in BRAID_NETNS_ENV
# ("NAME=value NAME=value").
set -u
braid=$1 nproc=$2 expect=$3
shift 3

if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then
  echo "SKIP: needs root and iproute2 (ip netns) to build two network namespaces" >&2
  exit 77
fi
tag=$$
x=$((tag % 250 + 1))
ns=(braid-n$tag-0 braid-n$tag-1)
if ! ip netns add "${ns[0]}" 2>/dev/null; then
  echo "SKIP: ip netns add failed (no network namespace support here)" >&2
  exit 77
fi
out0=$(mktemp /tmp/braid-netns-XXXXXX) out1=$(mktemp /tmp/braid-netns-XXXXXX)
cleanup() {
  for n in "${ns[@]}"; do ip netns pids "$n" 2>/dev/null | xargs -r kill -KILL; done
  for n in "${ns[@]}"; do ip netns del "$n" 2>/dev/null; done
  rm -f "$out0" "$out1"
}
trap cleanup EXIT
ip netns add "${ns[1]}"
ip link add "bv$tag-0" type veth peer name "bv$tag-1"
for i in 0 1; do
  ip link set "bv$tag-$i" netns "${ns[$i]}"
  ip -n "${ns[$i]}" addr add "10.233.$x.$((i + 1))/24" dev "bv$tag-$i"
  ip -n "${ns[$i]}" link set "bv$tag-$i" up
  ip -n "${ns[$i]}" link set lo up
done

export BRAID_STORE_TOKEN
BRAID_STORE_TOKEN=$(head -c12 /dev/urandom | od -An -tx1 | tr -d ' \n')
export BRAID_TIMEOUT=${BRAID_TIMEOUT:-30}
port=$((29500 + tag % 2000))
deadline=$((BRAID_TIMEOUT + 30))
for i in 0 1; do
  out=$out0
  [[ $i -eq 1 ]] && out=$out1
  # shellcheck disable=SC2086
  timeout -k 5 "$deadline" ip netns exec "${ns[$i]}" env ${BRAID_NETNS_ENV:-} \
    "$braid" launch --nnodes 2 --node-rank "$i" --nproc-per-node "$nproc" \
    --master-addr "10.233.$x.1" --master-port "$port" --timeout "$deadline" --grace-period 1 \
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
wait "${pids[0]}"
status0=$?
wait "${pids[1]}" 2>/dev/null
status1=$?

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
case $expect in
ok)
  [[ $status0 -eq 0 ]] || fail "node 0's launcher exited $status0, expected 0"
  [[ $status1 -eq 0 ]] || fail "node 1's launcher exited $status1, expected 0"
  for ((r = 0; r < 2 * nproc; r++)); do
    grep -qh "^\[rank $r\] done$" "$out0" "$out1" || fail "rank $r did not print 'done'"
  done
  ;;
kill-node1)
  [[ $status0 -ne 0 && $status0 -ne 124 ]] ||
    fail "node 0's launcher exited $status0, expected a failure (not the test's timeout, 124)"
  for ((r = 0; r < nproc; r++)); do
    grep -Eq "^\[rank $r\] error: braid: peer lost: " "$out0" || fail "rank $r reported no lost peer"
  done
  ;;
*)
  echo "run_netns.sh: EXPECT must be ok or kill-node1, got '$expect'" >&2
  exit 2
  ;;
esac
if [[ $failures -gt 0 ]]; then
  echo "---- node 0 (exit $status0) ----" >&2
  cat "$out0" >&2
  echo "---- node 1 (exit $status1) ----" >&2
  cat "$out1" >&2
  exit 1
fi
echo "ok: 2 nodes x $nproc ranks ($expect)"
