#!/usr/bin/env bash
# Runs one MPI job as two "nodes" (docs/multinode.md): the namespaces of netns_lib.sh, mpirun in
# node 0's, a hostfile of the two veth addresses (NPROC_PER_NODE slots each, ranks filled node by
# node), and instead of ssh a plm_rsh_agent script that starts the remote orted with `ip netns
# exec <that address's namespace>`. Each node also gets its own UTS namespace and hostname
# (braid-node0, braid-node1): OpenMPI names its shared-memory (vader) segments after the
# hostname, so two nodes both called after this machine would map each other's segments. And
# each its own mount namespace, with a private tmpfs on /dev/shm and a TMPDIR in the test's
# folder: a killed node's vader segments and OpenMPI session folder then go with the node
# instead of staying in the machine's /dev/shm and /tmp. MPI's traffic is pointed at the veth:
# `--mca pml ob1 --mca btl self,vader,tcp` (vader only between the ranks of one node),
# btl_tcp_if_include and oob_tcp_if_include braid0. braid's store is served by rank 0 on node 0's veth address
# (MASTER_ADDR).
#   run_netns_mpi.sh MPIRUN NPROC_PER_NODE EXPECT PROGRAM [ARGS...]
# EXPECT: "ok" (mpirun exits 0, every rank prints "done"), or "kill-node1": once a rank of node 1
# has completed a few collectives ("completed all_reduce #3"), every process of node 1 (orted,
# ranks, the agent) is SIGKILLed; mpirun must then end the job with a non-zero status within the
# deadline (not the test's timeout, 124), say that it lost node 1's daemon (naming node 1's
# address) or that the daemon's launch agent failed, and leave no process behind in node 0; no
# rank of node 0 may have finished the run. Environment: BRAID_TIMEOUT (default 30), NETNS_MIN_VETH_BYTES, NETNS_VERBOSE
# (netns_lib.sh). Exits 77 (ctest: skipped) where namespaces cannot be made.
set -u
mpirun=$1 nproc=$2 expect=$3
shift 3
case $expect in
ok | kill-node1) ;;
*)
  echo "run_netns_mpi.sh: EXPECT must be ok or kill-node1, got '$expect'" >&2
  exit 2
  ;;
esac
# shellcheck source=netns_lib.sh
source "$(dirname "$0")/netns_lib.sh"
netns_setup

agent=$netns_tmp/agent.sh
cat >"$agent" <<EOF
#!/usr/bin/env bash
# plm_rsh_agent: called as "agent HOST COMMAND..." (as ssh would be); runs the shell command
# line COMMAND in HOST's namespace, under a hostname, /dev/shm and TMPDIR of its own.
host=\$1
shift
case \$host in
${addr[0]}) ns=${ns[0]} name=braid-node0 ;;
${addr[1]}) ns=${ns[1]} name=braid-node1 ;;
*) echo "netns agent: unknown host '\$host'" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts --mount /bin/sh -c "hostname \$name &&
  mount -t tmpfs braid-shm /dev/shm && mkdir -p $netns_tmp/\$name &&
  export TMPDIR=$netns_tmp/\$name && \$*"
EOF
chmod +x "$agent"
printf '%s slots=%d\n' "${addr[0]}" "$nproc" "${addr[1]}" "$nproc" >"$netns_tmp/hostfile"

export BRAID_STORE_TOKEN
BRAID_STORE_TOKEN=$(head -c12 /dev/urandom | od -An -tx1 | tr -d ' \n')
export BRAID_TIMEOUT=${BRAID_TIMEOUT:-30}
export MASTER_ADDR=${addr[0]} MASTER_PORT=$((29500 + tag % 2000))
deadline=$((BRAID_TIMEOUT + 30))
raw=$netns_tmp/mpirun.out
forward=()  # sanitizer settings of the test (ctest ENVIRONMENT) reach the ranks of both nodes
for v in ASAN_OPTIONS UBSAN_OPTIONS; do [[ -n ${!v:-} ]] && forward+=(-x "$v"); done
timeout -k 5 "$deadline" ip netns exec "${ns[0]}" unshare --uts --mount /bin/sh -c \
  'hostname braid-node0 && mount -t tmpfs braid-shm /dev/shm && mkdir -p "$0" &&
  export TMPDIR="$0" && exec "$@"' "$netns_tmp/braid-node0" \
  "$mpirun" --allow-run-as-root --hostfile "$netns_tmp/hostfile" -np $((2 * nproc)) \
  --map-by slot --bind-to none --tag-output \
  --mca plm_rsh_agent "$agent" --mca pml ob1 --mca btl self,vader,tcp \
  --mca btl_tcp_if_include braid0 --mca oob_tcp_if_include braid0 \
  -x MASTER_ADDR -x MASTER_PORT -x BRAID_STORE_TOKEN -x BRAID_TIMEOUT "${forward[@]}" \
  "$@" >"$raw" 2>&1 &
pid=$!
if [[ $expect == kill-node1 ]]; then
  # --tag-output: "[JOB,RANK]<stdout>:line"; node 1 holds ranks nproc .. 2 nproc - 1.
  node1_ranks=$(seq -s '|' "$nproc" $((2 * nproc - 1)))
  for ((t = 0; t < 10 * deadline; t++)); do
    grep -Eq "^\[[0-9]+,($node1_ranks)\]<stdout>:completed all_reduce #3$" "$raw" && break
    sleep 0.1
  done
  ip netns pids "${ns[1]}" | xargs -r kill -KILL
  echo "killed every process of node 1" >>"$out1"
fi
wait "$pid" 2>/dev/null
status0=$?
# The checks of netns_lib.sh read launcher-style "[rank R] line" output.
sed -E 's/^\[[0-9]+,([0-9]+)\]<std(out|err)>:/[rank \1] /' "$raw" >"$out0"

case $expect in
ok)
  [[ $status0 -eq 0 ]] || fail "mpirun exited $status0, expected 0"
  check_ok "$nproc"
  ;;
kill-node1)
  [[ $status0 -ne 0 && $status0 -ne 124 && $status0 -ne 137 ]] ||
    fail "mpirun exited $status0, expected a failure (not the test's timeout, 124 or 137)"
  # mpirun ends the job from whichever it notices first (all three were seen): its TCP
  # connection to node 1's orted closing ("lost communication with a remote daemon", naming
  # the node), its launch agent for node 1 (the ssh stand-in, killed with the node) exiting
  # ("unable to reliably start one or more daemons", which names no node), or a rank of node 0
  # whose TCP connection to a rank of node 1 broke ("peer process has unexpectedly
  # disconnected", naming node 1's address as the peer host) exiting non-zero.
  if grep -q "ORTE has lost communication with a remote daemon" "$out0"; then
    grep -Eq "Remote daemon: .* on node ${addr[1]//./\\.}$" "$out0" ||
      fail "mpirun lost a daemon but does not name node 1 (${addr[1]}) as its node"
  elif grep -q "peer process has unexpectedly disconnected" "$out0"; then
    grep -Eq "Peer host: +${addr[1]//./\\.}$" "$out0" ||
      fail "a rank lost an MPI peer but the report does not name node 1 (${addr[1]}) as its host"
  elif ! grep -q "ORTE was unable to reliably start one or more daemons" "$out0"; then
    fail "mpirun's output says neither that it lost node 1's daemon or a peer on it nor that its launch failed"
  fi
  for ((r = 0; r < nproc; r++)); do
    ! grep -Eq "^\[rank $r\] (done|completed all_reduce #40)$" "$out0" ||
      fail "rank $r of node 0 completed the run: node 1 died too late to test anything"
  done
  # A rank mpirun killed may still be a zombie for a moment after mpirun exits (dead, waiting
  # for its new parent to reap it): only processes that are not zombies count, and they get
  # a few seconds to go.
  left=""
  for ((t = 0; t < 50; t++)); do
    left=$(ip netns pids "${ns[0]}" | xargs -r ps -o pid=,stat= -p | awk '$2 !~ /^Z/ {print $1}')
    [[ -z $left ]] && break
    sleep 0.1
  done
  [[ -z $left ]] || fail "processes left in node 0 after mpirun exited: $(ps -o pid=,stat=,args= -p "${left//$'\n'/,}")"
  ;;
esac
check_veth "${NETNS_MIN_VETH_BYTES:-0}"
finish "mpirun, 2 nodes x $nproc ranks ($expect)"
