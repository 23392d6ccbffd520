#!/usr/bin/env bash
# Runs one job under Slurm across two "nodes" (docs/multinode.md, "Under Slurm"): the
# namespaces of netns_lib.sh, a Slurm cluster of this test's own (a munged with its own key and
# socket, slurmctld in node 0's namespace, one slurmd per namespace, each node named after its
# namespace: braid-node0 and braid-node1, every file in the test's folder), and `srun -N 2
# --ntasks-per-node NPROC_PER_NODE --label PROGRAM` from node 0. The ranks find their rank, size,
# local rank and node from Slurm's variables alone (docs/launch.md, "Rank discovery"); braid's
# store is served by rank 0 on node 0's veth address (MASTER_ADDR).
#   run_netns_slurm.sh NPROC_PER_NODE EXPECT PROGRAM [ARGS...]
# EXPECT: "ok" (srun exits 0, every rank prints "done"), or "kill-node1": once a rank of node 1
# has completed a few collectives ("completed all_reduce #3"), every rank of node 1 is SIGKILLed
# (Slurm's daemons stay: the node is up, its ranks died); each rank of node 0 must then report
# braid's peer-lost error and srun exit non-zero within the deadline.
# Each slurmd runs in its node's network namespace and in a mount namespace of its own with that
# namespace's sysfs (so UCX sees braid0, as under `ip netns exec`) and the machine's cgroup
# hierarchy bound back under it (slurmd reads it at start), and a UTS namespace: each node has
# its own hostname (braid-node0, braid-node1), /dev/shm and job scratch folder (TmpFS), which its
# ranks inherit.
# Environment: SLURM_NETNS_SRUN_ARGS (more words for srun, e.g. --mpi=pmix for an MPI program,
# whose OMPI_MCA_* settings pass through the environment), BRAID_TIMEOUT (default 30),
# NETNS_MIN_VETH_BYTES, NETNS_VERBOSE (netns_lib.sh). Exits 77 (ctest: skipped) where
# namespaces cannot be made or Slurm or munge is not installed.
set -u
nproc=$1 expect=$2
shift 2
case $expect in
ok | kill-node1) ;;
*)
  echo "run_netns_slurm.sh: EXPECT must be ok or kill-node1, got '$expect'" >&2
  exit 2
  ;;
esac
for tool in srun sinfo slurmctld slurmd munged mungekey nsenter unshare; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: needs Slurm and munge ('$tool' not found; Debian: slurmd slurmctld slurm-client munge)" >&2
    exit 77
  fi
done
# shellcheck source=netns_lib.sh
source "$(dirname "$0")/netns_lib.sh"
netns_setup

d=$netns_tmp/slurm
mkdir -p "$d/state" "$d/spool/braid-node0" "$d/spool/braid-node1" "$d/nodetmp"
chmod 755 "$netns_tmp"  # munged wants its socket's folders searchable by all
slurm_cleanup() {
  [[ -s $d/munged.pid ]] && kill "$(cat "$d/munged.pid")" 2>/dev/null
  netns_cleanup
}
trap slurm_cleanup EXIT
mungekey --create --keyfile="$d/munge.key" >/dev/null 2>&1 || fail "mungekey could not make a key"
munged --force --socket="$d/munge.sock" --key-file="$d/munge.key" --pid-file="$d/munged.pid" \
  --log-file="$d/munged.log" --seed-file="$d/munged.seed" || fail "munged did not start"

cat >"$d/slurm.conf" <<EOF
ClusterName=braidnetns
SlurmctldHost=$(hostname)(${addr[0]})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$d/munge.sock
CredType=cred/munge
StateSaveLocation=$d/state
TmpFS=$d/nodetmp
SlurmdSpoolDir=$d/spool/%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd-%n.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd-%n.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=braid-node0 NodeAddr=${addr[0]} CPUs=8 State=UNKNOWN
NodeName=braid-node1 NodeAddr=${addr[1]} CPUs=8 State=UNKNOWN
PartitionName=braid Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
export SLURM_CONF=$d/slurm.conf
ip netns exec "${ns[0]}" slurmctld -D -i >"$d/slurmctld.out" 2>&1 &
disown  # the daemons end with the namespaces (netns_cleanup), unreported
for i in 0 1; do
  # The namespace's own sysfs over /sys (its network devices), the machine's cgroups under it.
  # Its own hostname, /dev/shm and job scratch folder (TmpFS: one path, a tmpfs of its own on
  # each node), as a node has: OpenMPI names its shared-memory segments after the hostname, and
  # Slurm's PMIx plugin makes <TmpFS>/spmix_appdir_<uid>_<job>.<step> on every node.
  nsenter --net="/var/run/netns/${ns[$i]}" unshare --mount --uts bash -c "mkdir -p $d/cg$i &&
    mount --rbind /sys/fs/cgroup $d/cg$i && mount -t sysfs sysfs /sys &&
    mount --rbind $d/cg$i /sys/fs/cgroup && hostname braid-node$i &&
    mount -t tmpfs -o size=1g tmpfs /dev/shm && mount -t tmpfs tmpfs $d/nodetmp &&
    exec slurmd -D -N braid-node$i" \
    >"$d/slurmd$i.out" 2>&1 &
  disown
done
for ((t = 0; t < 150; t++)); do
  [[ $(ip netns exec "${ns[0]}" sinfo -h -t idle -o %D 2>/dev/null) == 2 ]] && break
  sleep 0.2
done
[[ $(ip netns exec "${ns[0]}" sinfo -h -t idle -o %D 2>/dev/null) == 2 ]] ||
  fail "the two slurmd did not register as idle within 30 s"

export BRAID_STORE_TOKEN
BRAID_STORE_TOKEN=$(head -c12 /dev/urandom | od -An -tx1 | tr -d ' \n')
export BRAID_TIMEOUT=${BRAID_TIMEOUT:-30} MASTER_ADDR=${addr[0]} MASTER_PORT=$((29500 + tag % 2000))
export UCX_TLS=${UCX_TLS:-tcp,self} UCX_NET_DEVICES=${UCX_NET_DEVICES:-braid0}
deadline=$((BRAID_TIMEOUT + 30))
program=$1
if [[ $failures -eq 0 ]]; then
  started=$SECONDS
  # shellcheck disable=SC2086  # SLURM_NETNS_SRUN_ARGS: words
  timeout -k 5 "$deadline" ip netns exec "${ns[0]}" srun -N 2 --ntasks-per-node "$nproc" \
    -n $((2 * nproc)) --label ${SLURM_NETNS_SRUN_ARGS:-} "$@" >"$out0" 2>&1 &
  srun_pid=$!
  if [[ $expect == kill-node1 ]]; then
    for ((t = 0; t < 10 * deadline; t++)); do
      awk -F': ' -v n="$nproc" '$1 + 0 >= n && /completed all_reduce #3$/ {f = 1} END {exit !f}' \
        "$out0" && break
      sleep 0.1
    done
    # Node 1's ranks: the processes of its namespace that run PROGRAM (not Slurm's daemons).
    program=$(readlink -f "$program")
    for pid in $(ip netns pids "${ns[1]}"); do
      [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$program" ]] && kill -KILL "$pid"
    done
    echo "killed every rank of node 1" >>"$out1"
  fi
  wait "$srun_pid"
  status0=$?
  # srun itself exits 137 when a task was killed, which is also timeout's status after its
  # SIGKILL: whether the deadline ended srun is read from the time it took.
  timed_out=$((status0 == 124 || SECONDS - started >= deadline))
fi

# srun --label writes "R: line"; netns_lib's checks read "[rank R] line".
sed -E 's/^ *([0-9]+): /[rank \1] /' "$out0" >"$out0.ranks" && mv "$out0.ranks" "$out0"
if [[ $failures -eq 0 ]]; then
  check_end srun "$status0" "$timed_out"
  check_veth "${NETNS_MIN_VETH_BYTES:-0}"
fi
if [[ $failures -gt 0 ]]; then
  for f in "$d"/*.log "$d"/*.out; do
    echo "---- $f ----" >&2
    tail -n 20 "$f" >&2
  done
fi
finish "Slurm, 2 nodes x $nproc ranks ($expect)"
