#!/usr/bin/env bash
# braid-ucx's point-to-point bandwidth against ucx_perftest over the same link, in alternating
# rounds (issue 4's "within 10% of ucx_perftest"). Each round runs ucx_perftest (tag_bw,
# stream_bw, ucp_am_bw; each without and with -e, peer error handling as braid's endpoints
# have it; each with UCX's defaults and with braid's tcp segment sizes) and then braid's
# broadcast between the two namespaces (`braid launch` on each node, 1 rank per node, `braid
# bench --backend ucx --op broadcast`: one tagged message, segmented as braid sends it). Per
# round it takes braid / best perftest and braid / best perftest with -e; the medians of the
# rounds' ratios are the figures to read (docs/ucx.md, "Bandwidth against ucx_perftest", says
# why the -e figure is the like-for-like one).
#   bash bench/netns/p2p_rounds.sh OUT_DIR [BRAID_BINARY] [ROUNDS (5)] [SIZES ("4194304 67108864")]
# A/B comparisons: P2P_VARIANTS="V1;V2;..." runs braid once per variant in each round, in an
# order that rotates from round to round; a variant is words NAME=value set in the ranks'
# environment, and BIN=path runs that braid binary instead; "." is the plain run (e.g.
# P2P_VARIANTS="BIN=/tmp/old/braid;." compares an older build with this one).
# NETNS_TCP_CC (cubic): the namespaces' TCP congestion control; "host" keeps the host's
# default (this VM's is bbr, under which a veth transfer's speed jumps between levels 2-3x
# apart, docs/multinode.md). P2P_OP (broadcast), P2P_BACKEND (ucx) and P2P_PPN (1) choose the
# collective, backend and ranks per node; the figures are busbw out of place and in place.
# Needs root, iproute2 and ucx_perftest, like run.sh. A measurement, not a test.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: p2p_rounds.sh OUT_DIR [BRAID_BINARY] [ROUNDS] [SIZES]}
braid=${2:-$here/../../build/bin/braid}
rounds=${3:-5}
read -r -a sizes <<<"${4:-4194304 67108864}"
[[ $(id -u) -eq 0 ]] || { echo "p2p_rounds.sh: needs root (ip netns)" >&2; exit 1; }
command -v ucx_perftest >/dev/null || { echo "p2p_rounds.sh: needs ucx_perftest" >&2; exit 1; }
[[ -x $braid ]] || { echo "p2p_rounds.sh: no braid binary at $braid" >&2; exit 1; }
braid=$(cd "$(dirname "$braid")" && pwd)/$(basename "$braid")
mkdir -p "$out" && out=$(cd "$out" && pwd)

# shellcheck source=tests/multinode/netns_lib.sh
source "$here/../../tests/multinode/netns_lib.sh"
netns_setup  # ns[], addr[], tag, netns_tmp; cleans up on exit
netns_tcp_cc || exit 1  # NETNS_TCP_CC; docs/multinode.md, "TCP congestion control"
export UCX_TLS=tcp,self UCX_NET_DEVICES=braid0 BRAID_TIMEOUT=300
BRAID_STORE_TOKEN=$(head -c12 /dev/urandom | od -An -tx1 | tr -d ' \n')
export BRAID_STORE_TOKEN
in_ns() { ip netns exec "${ns[$1]}" "${@:2}"; }

# braid's tcp segment sizes (netns_braid_tcp_segments, netns_lib.sh): perftest runs with and
# without them, so that the best perftest figure is the best of both. braid's copy mode is left
# out: perftest sends zero-copy, UCX's default.
braid_ucx=("${netns_braid_tcp_segments[@]}")
perftest() {  # TEST SIZE default|braid [-e] -> GB/s (10^9 B/s; ucx_perftest's MB/s are 2^20 B/s)
  local port=$((20000 + RANDOM % 20000)) line envs=()
  [[ $3 == braid ]] && envs=("${braid_ucx[@]}")
  in_ns 1 env "${envs[@]}" timeout -k 5 120 ucx_perftest -p "$port" >/dev/null 2>&1 &
  sleep 0.4
  line=$(in_ns 0 env "${envs[@]}" timeout -k 5 120 ucx_perftest "${addr[1]}" -p "$port" -t "$1" \
    -s "$2" -n $((2147483648 / $2)) -w 2 ${4:+"$4"} -v 2>&1 | grep -E '^ *[0-9]+,' | tail -1 |
    tr -d ' ')
  wait
  echo "$line" | awk -F, '{printf "%.3f", $6 * 1048576 / 1e9}'
}

IFS=';' read -r -a variants <<<"${P2P_VARIANTS:-}"
((${#variants[@]})) || variants=("")
braid_run() {  # SIZE VARIANT -> "OOP IP": GB/s busbw of braid's out-of-place, in-place calls
  local size=$1 port=$((29500 + RANDOM % 2000)) i bin=$braid envs=()
  for w in $2; do
    if [[ $w == BIN=* ]]; then
      bin=${w#BIN=}
    elif [[ $w != . ]]; then
      envs+=("$w")
    fi
  done
  for i in 0 1; do
    in_ns "$i" env "${envs[@]}" timeout -k 5 300 "$bin" launch --nnodes 2 --node-rank "$i" \
      --nproc-per-node "${P2P_PPN:-1}" --master-addr "${addr[0]}" --master-port "$port" \
      --timeout 300 "$bin" bench --backend "${P2P_BACKEND:-ucx}" --op "${P2P_OP:-broadcast}" \
      -b "$size" -e "$size" -n 10 -w 2 --repeats 3 -c 0 >"$netns_tmp/node$i.txt" 2>&1 &
  done
  wait
  awk '$1 == "[rank" && $3 ~ /^[0-9]+$/ && $3 == '"$size"' {print $9, $13}' "$netns_tmp/node0.txt"
}

nv=${#variants[@]}
tests=(tag_bw stream_bw ucp_am_bw)
{
  echo "# $(date -u +%FT%TZ) $(uname -srm); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# braid: $braid; UCX_TLS=$UCX_TLS UCX_NET_DEVICES=$UCX_NET_DEVICES; $rounds rounds"
  echo "# TCP congestion control in the namespaces: $(netns_tcp_cc_used)"
  echo "# op ${P2P_OP:-broadcast}, backend ${P2P_BACKEND:-ucx}, ${P2P_PPN:-1} rank(s) per node"
  echo "# perftest columns: GB/s; *_eh with -e (peer error handling, as braid's endpoints);"
  echo "# *_b with braid's tcp segment sizes (${braid_ucx[*]})"
  for ((v = 0; v < nv; v++)); do echo "# variant $v: '${variants[v]}'"; done
  printf 'round,size'
  for t in "${tests[@]}"; do printf ',%s,%s_eh,%s_b,%s_b_eh' "$t" "$t" "$t" "$t"; done
  printf ',best,best_eh'
  for ((v = 0; v < nv; v++)); do
    printf ',braid%d,braid_ip%d,ratio%d,ratio_eh%d,ratio_ip_eh%d' "$v" "$v" "$v" "$v" "$v"
  done
  echo
} >"$out/rounds.csv"
ratio() { awk -v b="${1:-0}" -v p="$2" 'BEGIN {printf "%.3f", (p > 0 ? b / p : 0)}'; }
for ((r = 1; r <= rounds; r++)); do
  for size in "${sizes[@]}"; do
    line="$r,$size" all=() eh=()
    for t in "${tests[@]}"; do
      a=$(perftest "$t" "$size" default) e=$(perftest "$t" "$size" default -e)
      ab=$(perftest "$t" "$size" braid) eb=$(perftest "$t" "$size" braid -e)
      line+=",$a,$e,$ab,$eb" all+=("$a" "$e" "$ab" "$eb") eh+=("$e" "$eb")
    done
    best=$(printf '%s\n' "${all[@]}" | sort -g | tail -1)
    best_eh=$(printf '%s\n' "${eh[@]}" | sort -g | tail -1)
    line+=",$best,$best_eh"
    res=()
    for ((k = 0; k < nv; k++)); do  # the order rotates: no variant always runs first
      v=$(((k + r) % nv))
      res[v]=$(braid_run "$size" "${variants[v]}")
    done
    for ((v = 0; v < nv; v++)); do
      read -r oop ip <<<"${res[v]:-0 0}"
      line+=",$oop,$ip,$(ratio "$oop" "$best"),$(ratio "$oop" "$best_eh"),$(ratio "$ip" "$best_eh")"
    done
    echo "$line" | tee -a "$out/rounds.csv" >&2
  done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/rounds.csv"
python3 - "$out/rounds.csv" <<'PY' | tee "$out/summary.txt"
import csv, statistics, sys
lines = [l for l in open(sys.argv[1]) if not l.startswith("#")]
rows = list(csv.DictReader(lines))
variants = [l.split(": ", 1)[1].strip() for l in open(sys.argv[1]) if l.startswith("# variant ")]
med = statistics.median
for v, name in enumerate(variants):
    for size in sorted({int(r["size"]) for r in rows}):
        mine = [r for r in rows if int(r["size"]) == size and r[f"braid{v}"]]
        if not mine:
            continue
        label = f" [variant {name}]" if len(variants) > 1 else ""
        for col, what in ((f"ratio{v}", "best ucx_perftest"),
                          (f"ratio_eh{v}", "best ucx_perftest -e"),
                          (f"ratio_ip_eh{v}", "best ucx_perftest -e, braid in place")):
            ratios = [float(r[col]) for r in mine]
            print(f"{size} B{label}: braid / {what} per round: "
                  f"{' '.join(f'{x:.2f}' for x in ratios)}; median {med(ratios):.2f}")
        print(f"{size} B{label}: braid median {med(float(r[f'braid{v}']) for r in mine):.3f} GB/s "
              f"(in place {med(float(r[f'braid_ip{v}']) for r in mine):.3f}); "
              f"perftest medians (GB/s): " + ", ".join(
                  f"{c} {med(float(r[c]) for r in mine):.3f}"
                  for c in rows[0] if c.endswith(("bw", "_eh", "_b"))))
PY
