#!/usr/bin/env bash
# Runs one run_netns.sh job N times and counts how each run ended: a flake hunt, not a test
# (docs/multinode.md, "Repeating a job"). Keeps the output of every run that did not pass.
#   repeat.sh N OUT_DIR BRAID NPROC_PER_NODE EXPECT PROGRAM [ARGS...]
# e.g. BRAID_NETNS_ENV=BRAID_UCX_UNCHECKED_DATA=1 bash tests/multinode/repeat.sh 400 /tmp/kills \
#        build/bin/braid 1 kill-node1 build/tests/multiproc/conformance_worker --backend ucx long
# Each run's environment is this script's (BRAID_NETNS_ENV, NETNS_ACCEPT_UCX_PUT_ABORT, ...).
# Counts: passed (of which, with NETNS_ACCEPT_UCX_PUT_ABORT=1, how many only because a rank died
# of UCX's tcp put assertion), failed, and of the failures those whose output shows that
# assertion. Needs root and iproute2, like run_netns.sh.
set -u
n=${1:?usage: repeat.sh N OUT_DIR BRAID NPROC_PER_NODE EXPECT PROGRAM [ARGS...]}
out=${2:?usage: repeat.sh N OUT_DIR BRAID NPROC_PER_NODE EXPECT PROGRAM [ARGS...]}
shift 2
mkdir -p "$out"
run=$(dirname "$0")/run_netns.sh
assertion='UCT_TCP_EP_FLAG_PUT_TX_WAITING_ACK'
passed=0 accepted=0 failed=0 failed_put=0
for ((i = 1; i <= n; i++)); do
  log=$out/run$i.txt
  bash "$run" "$@" >"$log" 2>&1
  status=$?
  if [[ $status -eq 77 ]]; then
    cat "$log" >&2
    exit 77
  elif [[ $status -eq 0 ]]; then
    passed=$((passed + 1))
    grep -q "aborted on UCX 1.13's tcp put assertion" "$log" && accepted=$((accepted + 1))
    rm -f "$log"
  else
    failed=$((failed + 1))
    grep -q "$assertion" "$log" && failed_put=$((failed_put + 1))
    echo "run $i failed: $log" >&2
  fi
done
echo "$n runs: $passed passed ($accepted with a rank that died of UCX's tcp put assertion," \
  "accepted), $failed failed ($failed_put of them with that assertion); outputs of failures in $out"
[[ $failed -eq 0 ]]
