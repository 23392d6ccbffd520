#!/usr/bin/env bash
# braid-ucx's point-to-point bandwidth against ucx_perftest over the same link, in alternating
# rounds (issue 4's "within 10% of ucx_perftest"). The veth link of run.sh moves by 2x within
# minutes, so one perftest run beside one braid run decides nothing; here each round runs
# ucx_perftest (tag_bw, stream_bw, ucp_am_bw) and then braid's broadcast between the two
# namespaces (`braid launch` on each node, 1 rank per node, `braid bench --backend ucx --op
# broadcast`: one tagged message, segmented as braid sends it), and the ratio braid / best
# perftest is taken per round; the median of the rounds' ratios is the figure to read.
#   bash bench/netns/p2p_rounds.sh OUT_DIR [BRAID_BINARY] [ROUNDS (5)] [SIZES ("4194304 67108864")]
# A/B comparisons: P2P_VARIANTS="V1;V2;..." runs braid once per variant in each round, in an
# order that rotates from round to round; a variant is words NAME=value set in the ranks'
# environment, and BIN=path runs that braid binary instead; "." is the plain run (e.g.
# P2P_VARIANTS="BIN=/tmp/old/braid;." compares an older build with this one). P2P_OP (broadcast),
# P2P_BACKEND (ucx) and P2P_PPN (1) choose the collective, backend and ranks per node; the
# figure is busbw out of place. Needs root, iproute2 and ucx_perftest, like run.sh. A
# measurement, not a test.
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
export UCX_TLS=tcp,self UCX_NET_DEVICES=braid0 BRAID_TIMEOUT=300
BRAID_STORE_TOKEN=$(head -c12 /dev/urandom | od -An -tx1 | tr -d ' \n')
export BRAID_STORE_TOKEN
in_ns() { ip netns exec "${ns[$1]}" "${@:2}"; }

perftest() {  # TEST SIZE -> GB/s (10^9 B/s; ucx_perftest's MB/s are 2^20 B/s)
  local port=$((20000 + RANDOM % 20000)) line
  in_ns 1 timeout -k 5 120 ucx_perftest -p "$port" >/dev/null 2>&1 &
  sleep 0.4
  line=$(in_ns 0 timeout -k 5 120 ucx_perftest "${addr[1]}" -p "$port" -t "$1" -s "$2" \
    -n $((2147483648 / $2)) -w 2 -v 2>&1 | grep -E '^ *[0-9]+,' | tail -1 | tr -d ' ')
  wait
  echo "$line" | awk -F, '{printf "%.3f", $6 * 1048576 / 1e9}'
}

IFS=';' read -r -a variants <<<"${P2P_VARIANTS:-}"
((${#variants[@]})) || variants=("")
braid_run() {  # SIZE VARIANT -> GB/s busbw of braid's out-of-place collective
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
  awk '$1 == "[rank" && $3 ~ /^[0-9]+$/ && $3 == '"$size"' {print $9}' "$netns_tmp/node0.txt"
}

nv=${#variants[@]}
{
  echo "# $(date -u +%FT%TZ) $(uname -srm); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# braid: $braid; UCX_TLS=$UCX_TLS UCX_NET_DEVICES=$UCX_NET_DEVICES; $rounds rounds"
  echo "# op ${P2P_OP:-broadcast}, backend ${P2P_BACKEND:-ucx}, ${P2P_PPN:-1} rank(s) per node"
  for ((v = 0; v < nv; v++)); do echo "# variant $v: '${variants[v]}'"; done
  printf 'round,size,tag_bw,stream_bw,ucp_am_bw,best'
  for ((v = 0; v < nv; v++)); do printf ',braid%d,ratio%d' "$v" "$v"; done
  echo
} >"$out/rounds.csv"
for ((r = 1; r <= rounds; r++)); do
  for size in "${sizes[@]}"; do
    t=$(perftest tag_bw "$size") s=$(perftest stream_bw "$size") a=$(perftest ucp_am_bw "$size")
    best=$(printf '%s\n' "$t" "$s" "$a" | sort -g | tail -1)
    res=()
    for ((k = 0; k < nv; k++)); do  # the order rotates: no variant always runs first
      v=$(((k + r) % nv))
      res[v]=$(braid_run "$size" "${variants[v]}")
    done
    line="$r,$size,$t,$s,$a,$best"
    for ((v = 0; v < nv; v++)); do
      ratio=$(awk -v b="${res[v]:-0}" -v p="$best" 'BEGIN {printf "%.3f", (p > 0 ? b / p : 0)}')
      line+=",${res[v]:-},$ratio"
    done
    echo "$line" | tee -a "$out/rounds.csv" >&2
  done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/rounds.csv"
python3 - "$out/rounds.csv" <<'PY' | tee "$out/summary.txt"
import csv, statistics, sys
lines = [l for l in open(sys.argv[1]) if not l.startswith("#")]
rows = list(csv.reader(lines))[1:]
variants = [l.split(": ", 1)[1].strip() for l in open(sys.argv[1]) if l.startswith("# variant ")]
for v, name in enumerate(variants):
    for size in sorted({int(r[1]) for r in rows}):
        mine = [r for r in rows if int(r[1]) == size and r[6 + 2 * v]]
        if not mine:
            continue
        ratios = [float(r[7 + 2 * v]) for r in mine]
        label = f" [variant {name}]" if len(variants) > 1 else ""
        print(f"{size} B{label}: braid / best ucx_perftest per round: "
              f"{' '.join(f'{x:.2f}' for x in ratios)}; median {statistics.median(ratios):.2f} "
              f"(braid median {statistics.median(float(r[6 + 2 * v]) for r in mine):.3f} GB/s, "
              f"best perftest median {statistics.median(float(r[5]) for r in mine):.3f} GB/s)")
PY
