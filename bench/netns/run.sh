#!/usr/bin/env bash
# Benchmarks braid's collectives across two "nodes" on one machine: two network namespaces
# joined by a veth pair (named braid0 in both, 10.233.X.1 and .2; tests/multinode/netns_lib.sh),
# UCX forced to TCP over it.
#   1. the link's reference: ucx_perftest (tag_bw, stream_bw, ucp_am_bw; tag_lat at 8 B),
#      server in node 1, client in node 0; and tag_bw with -e (peer error handling, as braid's
#      endpoints have it) and braid's tcp segment sizes, recorded as "tag_bw-e", then the same
#      in braid's copy mode on tcp (UCX_ZCOPY_THRESH=inf), recorded as "tag_bw-e-copy";
#   2. `braid bench --backend B --peer mpi` under one mpirun spanning both namespaces (the
#      remote orted is started through `ip netns exec`, see agent.sh below), 1 and 2 ranks per
#      node, for B in ucx, mpi and hier (when this build has it): braid's sweep, then OpenMPI's
#      collectives on the same buffers, in the same run.
# Tables and JSON go to OUT_DIR, a summary to OUT_DIR/summary.md and the console
# (bench/netns/summarize.py). A measurement, not a test; docs/performance.md ("Across two
# network namespaces") has the figures. Needs root, iproute2, ucx_perftest (ucx-utils), mpirun.
#   bash bench/netns/run.sh OUT_DIR [BRAID_BINARY]
# Environment: NETNS_BACKENDS ("ucx mpi hier"), NETNS_PPN ("1 2"), NETNS_SWEEP (braid bench's
# size and loop flags), NETNS_PT_SIZES (ucx_perftest sizes), NETNS_MPI_BTL (OpenMPI's btl list;
# default self,tcp, and self,vader,tcp beside hier, whose ranks share memory inside a node),
# NETNS_TCP_CC (cubic: the namespaces' TCP congestion control; "host" keeps the host's, see
# docs/multinode.md, "TCP congestion control"), NETNS_EXPORT (names of more environment
# variables to pass to the ranks, e.g. "UCX_ZCOPY_THRESH").
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: run.sh OUT_DIR [BRAID_BINARY]}
braid=${2:-$here/../../build/bin/braid}
backends=${NETNS_BACKENDS-ucx mpi hier}  # empty: ucx_perftest only
ppns=${NETNS_PPN-1 2}
read -r -a sweep <<<"${NETNS_SWEEP:--b 8 -e 64M -f 2 -n 10 -w 2 --repeats 3 -c 1}"
read -r -a pt_sizes <<<"${NETNS_PT_SIZES:-4194304 67108864}"
ops=(--op all_reduce --op all_gather --op reduce_scatter --op broadcast)

die() {
  echo "run.sh: $*" >&2
  exit 1
}
[[ $(id -u) -eq 0 ]] || die "needs root (ip netns)"
for tool in ip ucx_perftest mpirun python3; do
  command -v "$tool" >/dev/null || die "needs $tool on PATH (ucx_perftest: Debian's ucx-utils)"
done
[[ -x $braid ]] || die "no braid binary at $braid (build target braid_cli, or pass its path)"
braid=$(cd "$(dirname "$braid")" && pwd)/$(basename "$braid")
mkdir -p "$out" || die "cannot create $out"
out=$(cd "$out" && pwd)

# --- two namespaces, one veth pair renamed braid0 on both ends (the tests' set-up) ------
# shellcheck source=tests/multinode/netns_lib.sh
source "$here/../../tests/multinode/netns_lib.sh"
netns_setup  # ns[], addr[], tag, netns_tmp; cleans up on exit
work=$netns_tmp
exports=()  # NETNS_EXPORT: more variables for the ranks
for v in ${NETNS_EXPORT:-}; do exports+=(-x "$v"); done
netns_tcp_cc || die "cannot set TCP congestion control ${NETNS_TCP_CC:-cubic}"
# The namespaces share /dev/shm and IPC: without these UCX would reach node 1 through shared
# memory. Both UCX users (ucx_perftest, braid's ucx backend) see the same settings.
export UCX_TLS=tcp,self UCX_NET_DEVICES=braid0
export BRAID_TIMEOUT=${BRAID_TIMEOUT:-300}
in_ns() { ip netns exec "${ns[$1]}" "${@:2}"; }

{
  echo "# $(date -u +%FT%TZ) $(uname -srm)"
  echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) x $(nproc)"
  echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# $(mpirun --version 2>&1 | head -1); UCX $(ucx_info -v | sed -n 's/^# Version //p')"
  echo "# braid: $braid; UCX_TLS=$UCX_TLS UCX_NET_DEVICES=$UCX_NET_DEVICES"
  echo "# TCP congestion control: $(netns_tcp_cc_used)"
  echo "# link: veth braid0 ${addr[0]} <-> ${addr[1]}, mtu $(ip -n "${ns[0]}" -o link show braid0 | sed -n 's/.*mtu \([0-9]*\).*/\1/p')"
} >"$out/machine.txt"

# --- 1. the link's reference: ucx_perftest ------------------------------------------------
# One line per run: test,size,<ucx_perftest -v CSV: iterations,latency typical/avg/overall (us),
# bandwidth avg/overall (MiB/s: ucx_perftest's MB is 2^20 bytes),msgrate avg/overall>.
# With -e the test runs with peer error handling and braid's tcp segment sizes
# (netns_braid_tcp_segments), the fastest way UCX moves a large message with error handling
# here (docs/performance.md), and is named TEST-e; with
# -e-copy also without zero-copy sends (Note [Copy mode on tcp]), as braid's ucx backend runs
# by default on tcp, and is named TEST-e-copy.
perftest() {  # TEST SIZE ITERS [-e|-e-copy]
  local port=$((20000 + tag % 20000)) _ flags=() envs=() name=$1${4:-}
  if [[ -n ${4:-} ]]; then
    flags=(-e) envs=("${netns_braid_tcp_segments[@]}")
    [[ $4 == -e-copy ]] && envs+=(UCX_ZCOPY_THRESH=inf)
  fi
  in_ns 1 env "${envs[@]}" timeout -k 5 120 ucx_perftest -p "$port" >"$work/pt-server.log" 2>&1 &
  local server=$!
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    sleep 0.3
    if in_ns 0 env "${envs[@]}" timeout -k 5 120 ucx_perftest "${addr[1]}" -p "$port" -t "$1" \
      -s "$2" -n "$3" -w $(($3 / 10 + 1)) "${flags[@]}" -v >"$work/pt-client.log" 2>&1; then
      local line
      line=$(grep -E '^ *[0-9]+,' "$work/pt-client.log" | tail -1 | tr -d ' ')
      echo "$name,$2,$line" >>"$out/perftest.csv"
      wait "$server"
      return 0
    fi
    grep -q "connect" "$work/pt-client.log" || break  # not a "server not up yet" failure
  done
  echo "ucx_perftest -t $1 -s $2 ${4:+$4 }failed:" >&2
  cat "$work/pt-client.log" "$work/pt-server.log" >&2
  kill "$server" 2>/dev/null
  wait "$server" 2>/dev/null
  return 1
}
echo "== ucx_perftest across the namespaces" >&2
echo "test,size,iterations,lat_typical_us,lat_avg_us,lat_overall_us,bw_avg_mibps,bw_overall_mibps,rate_avg,rate_overall" >"$out/perftest.csv"
perftest tag_lat 8 20000
for size in "${pt_sizes[@]}"; do
  iters=$((2147483648 / size))  # about 2 GiB per run
  for test in tag_bw stream_bw ucp_am_bw; do perftest "$test" "$size" "$iters"; done
  perftest tag_bw "$size" "$iters" -e
  perftest tag_bw "$size" "$iters" -e-copy
done

# --- 2. braid bench + OpenMPI under one mpirun across the namespaces ---------------------
# mpirun runs in node 0; OpenMPI starts node 1's orted with its rsh agent, which this script
# makes: `agent.sh HOST COMMAND...` runs COMMAND in HOST's namespace. Each node also gets its
# own host name (a UTS namespace): OpenMPI names its shared-memory files (vader) and session
# directories after the host name, and the namespaces share /dev/shm and /tmp, so with one
# name node 1's files collide with node 0's (vader then crashes in MPI_Bcast).
on_node() {  # NODE COMMAND...: COMMAND in NODE's namespaces, host name braid-nodeNODE
  ip netns exec "${ns[$1]}" unshare --uts /bin/sh -c "hostname braid-node$1 && exec \"\$@\"" \
    sh "${@:2}"
}
cat >"$work/agent.sh" <<AGENT
#!/bin/bash
host=\$1
shift
case \$host in
  ${addr[0]}) exec ip netns exec ${ns[0]} unshare --uts /bin/sh -c "hostname braid-node0 && \$*" ;;
  ${addr[1]}) exec ip netns exec ${ns[1]} unshare --uts /bin/sh -c "hostname braid-node1 && \$*" ;;
esac
echo "agent.sh: unknown host \$host" >&2
exit 1
AGENT
chmod +x "$work/agent.sh"

# The backends this build registers, from the error that names them all.
available=$("$braid" bench --backend no-such-backend -b 8 -e 8 2>&1 | sed -n 's/.*available: //p')
status=0
for backend in $backends; do
  if [[ $available != *"'$backend'"* ]]; then
    echo "== $backend: not in this build (it has $available), skipped" >&2
    echo "# $backend: skipped, not in this build (it has $available)" >>"$out/machine.txt"
    continue
  fi
  btl=${NETNS_MPI_BTL:-self,tcp}
  [[ -z ${NETNS_MPI_BTL:-} && $backend == hier ]] && btl=self,vader,tcp
  for ppn in $ppns; do
    name=${backend}_ppn$ppn
    echo "== braid $backend + OpenMPI (btl $btl), 2 nodes x $ppn ranks" >&2
    on_node 0 timeout -k 10 1800 mpirun --allow-run-as-root --oversubscribe --bind-to none \
      --mca plm_rsh_agent "$work/agent.sh" --mca pml ob1 --mca btl "$btl" \
      --mca btl_tcp_if_include braid0 --mca oob_tcp_if_include braid0 \
      --host "${addr[0]}:$ppn,${addr[1]}:$ppn" -np $((2 * ppn)) \
      -x UCX_TLS -x UCX_NET_DEVICES -x BRAID_TIMEOUT -x MASTER_ADDR="${addr[0]}" "${exports[@]}" \
      "$braid" bench --backend "$backend" --peer mpi "${sweep[@]}" "${ops[@]}" \
      -J "$out/$name.json" >"$out/$name.txt" 2>"$work/$name.err"
    rc=$?
    echo "# $name: exit $rc, btl $btl, load average after: $(cut -d' ' -f1-3 /proc/loadavg)" \
      >>"$out/machine.txt"
    if [[ $rc -ne 0 ]]; then
      echo "== $name failed (exit $rc):" >&2
      tail -20 "$work/$name.err" >&2
      cp "$work/$name.err" "$out/$name.err"
      status=1
    fi
  done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"

python3 "$here/summarize.py" "$out" | tee "$out/summary.md"
exit $status
