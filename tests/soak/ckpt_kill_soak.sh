#!/usr/bin/env bash
# Checkpoint kill soak (docs/faults.md, "Kill soak"): in each trial a job of ckpt_soak_worker
# (trains and saves a sharded checkpoint after every step) is SIGKILLed on a random rank at a
# random moment after its first save; then:
#   - the launcher exits non-zero within the collective deadline + 10 s;
#   - no rank process is left, nothing of the job in /dev/shm;
#   - the checkpoint folder loads and holds the last step rank 0 reported saved (or the next,
#     when the kill came after the publish), equal bit for bit to the values recorded for
#     that step before it was saved (ckpt_soak_worker check).
#
#   ckpt_kill_soak.sh BRAID WORKER TRIALS [SEED]
# Environment: SOAK_NPROC (4), SOAK_TIMEOUT (collective deadline, s; 10: a death is detected
# without it), SOAK_MAX_DELAY_MS (latest kill after the first save; 1000). Each trial prints
# its rank, delay and the stage of the save the killed rank had reached; the summary counts
# kills inside a save. As in kill_soak.sh, a job that fails before the kill (a deadline passed
# on an overloaded machine) is a void trial, replaced by a new draw.
set -u

braid=$1 worker=$2 trials=$3
seed=${4:-$(date +%s%N | cut -c10-18)}
n=${SOAK_NPROC:-4}
deadline=${SOAK_TIMEOUT:-10}
max_delay_ms=${SOAK_MAX_DELAY_MS:-1000}
exit_limit=$((deadline + 10))
watchdog=$((deadline + 40))

RANDOM=$seed
tmp=$(mktemp -d /tmp/braid-ckpt-soak-XXXXXX)
pids=()
launcher_pid=

cleanup_trial() {
  local p
  for p in "${pids[@]}"; do
    grep -q ckpt_soak_worker "/proc/$p/cmdline" 2>/dev/null && kill -KILL "$p" 2>/dev/null
  done
  if [[ -n $launcher_pid ]] && kill -0 "$launcher_pid" 2>/dev/null; then
    kill -KILL -- "-$launcher_pid" 2>/dev/null
    wait "$launcher_pid" 2>/dev/null
  fi
  launcher_pid=
}
trap 'cleanup_trial; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

failures=0 max_exit=0 inside_save=0 trial_failed=0 void=0
fail() {
  echo "  FAIL: $*"
  trial_failed=1
}

running_worker() {
  grep -q ckpt_soak_worker "/proc/$1/cmdline" 2>/dev/null &&
    ! grep -Eq '^State:\s+Z' "/proc/$1/status" 2>/dev/null
}

# Waits (up to 60 s, in 50 ms sleeps) for rank 0's first "saved"; fills pids.
wait_first_save() {
  local i r
  for ((i = 0; i < 1200; i++)); do
    if grep -q '^\[rank 0\] saved ' "$tmp/out"; then
      pids=()
      for ((r = 0; r < n; r++)); do
        pids+=("$(sed -nE "s/^\[rank $r\] job [A-Za-z0-9_-]+ pid ([0-9]+)$/\1/p" "$tmp/out" | head -n1)")
      done
      return 0
    fi
    kill -0 "$launcher_pid" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

wait_launcher() {
  local i
  for ((i = 0; i < (watchdog + 10) * 20; i++)); do
    kill -0 "$launcher_pid" 2>/dev/null || break
    sleep 0.05
  done
  wait "$launcher_pid"
  status=$?
  launcher_pid=
}

echo "ckpt_kill_soak: $trials trial(s), seed $seed, $n ranks, deadline ${deadline} s"
for ((t = 1; t <= trials; t++)); do
  k=$((RANDOM % n))
  delay_ms=$((RANDOM % (max_delay_ms + 1)))
  trial_failed=0
  pids=()
  dir=$tmp/trial
  rm -rf "$dir"
  mkdir -p "$dir"
  : >"$tmp/out"
  timeout -k 5 "$watchdog" "$braid" launch --nproc-per-node "$n" --timeout "$deadline" \
    --grace-period 1 "$worker" train "$dir/ckpt" "$dir/records" "$k" >"$tmp/out" 2>&1 &
  launcher_pid=$!
  where=-
  ready=0
  wait_first_save && ready=1
  ((ready)) && sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  if ! kill -0 "$launcher_pid" 2>/dev/null || grep -qE '^\[rank [0-9]+\] error' "$tmp/out"; then
    void=$((void + 1))
    echo "trial $t: void, the job failed before the kill: $(grep -m1 -E 'error|braid launch:' "$tmp/out")"
    cleanup_trial
    ((void > trials)) && { echo "ckpt_kill_soak: more void trials than trials: the machine is too loaded"; failures=$((failures + 1)); break; }
    t=$((t - 1))
    continue
  fi
  if ((!ready)); then
    fail "no save within 60 s"
    status=none elapsed_ms=0
  else
    t0=$(date +%s%N)
    kill -KILL "${pids[$k]}"
    wait_launcher
    elapsed_ms=$((($(date +%s%N) - t0) / 1000000))
    ((elapsed_ms > max_exit)) && max_exit=$elapsed_ms
    ((elapsed_ms > exit_limit * 1000)) && fail "the launcher took ${elapsed_ms} ms to exit"
    [[ $status -ne 0 ]] || fail "the launcher exited 0"
    # Where the kill landed: the killed rank's last stage line.
    where=$(sed -nE "s/^\[rank $k\] stage ([a-z-]+) ([0-9]+)$/\1 \2/p" "$tmp/out" | tail -n1)
    case ${where%% *} in
    begin | checked | file-written | index-written | exchanged | old-moved-aside | published)
      inside_save=$((inside_save + 1))
      where="inside the save of step ${where#* } (last stage: ${where%% *})"
      ;;
    *) where="between saves (last stage: ${where:-none})" ;;
    esac
    for p in "${pids[@]}"; do
      running_worker "$p" && fail "pid $p still runs after the launcher exited"
    done
    prefix=$(sed -nE 's/^\[rank 0\] job ([A-Za-z0-9_-]+) pid [0-9]+$/\1/p' "$tmp/out" | head -n1)
    if [[ -n $prefix ]] && compgen -G "/dev/shm/braid-$prefix-*" >/dev/null; then
      fail "left in /dev/shm: $(ls /dev/shm/braid-"$prefix"-*)"
    fi
    last=$(sed -nE 's/^\[rank 0\] saved ([0-9]+)$/\1/p' "$tmp/out" | tail -n1)
    if ! timeout 60 "$worker" check "$dir/ckpt" "$dir/records" "$last" >"$tmp/check" 2>&1; then
      fail "the checkpoint does not hold step $last or $((last + 1)) intact: $(cat "$tmp/check")"
    fi
  fi
  printf 'trial %d: rank %d SIGKILL %d ms after the first save, %s: exit %s in %s ms; %s%s\n' \
    "$t" "$k" "$delay_ms" "$where" "$status" "$elapsed_ms" "$(cat "$tmp/check" 2>/dev/null)" \
    "$( ((trial_failed)) && echo ' FAILED')"
  if ((trial_failed)); then
    failures=$((failures + 1))
    echo "---- output of trial $t (last 40 lines) ----"
    tail -n 40 "$tmp/out"
    echo "----"
  fi
  cleanup_trial
  rm -f "$tmp/check"
done
printf 'ckpt_kill_soak: seed %s: %d trials, %d failures, %d void, %d kills inside a save, max time-to-exit %d.%03d s\n' \
  "$seed" "$trials" "$failures" "$void" "$inside_save" $((max_exit / 1000)) $((max_exit % 1000))
((failures == 0))
