#!/usr/bin/env bash
# Kill soak (docs/faults.md, "Kill soak"): starts N-rank jobs of soak_worker (every collective
# in a loop, varying sizes) and, in each trial, SIGKILLs or SIGSTOPs one random rank at a
# random moment, then checks:
#   - the launcher exits non-zero within the collective deadline + 10 s of the signal;
#   - every survivor's error names the culprit rank (shm backend; see MODE mpi below);
#   - no survivor reports a wrong result;
#   - no process of the job is left (each rank's pid and process group);
#   - nothing of the job is left in /dev/shm.
#
#   kill_soak.sh MODE TOOL WORKER TRIALS SIGNAL [SEED]
#     MODE    launch: `TOOL launch --nproc-per-node N --timeout T ...` (TOOL is braid);
#             mpirun: `TOOL -np N ...` (TOOL is OpenMPI's mpirun), braid on the shm backend;
#             mpirun-mpi: the same on braid's mpi backend (no culprit check: docs/faults.md)
#     SIGNAL  kill | stop | mixed (each trial picks one)
#     SEED    the driver's seed (default: from the clock, printed); each trial prints its own
#             worker seed, rank, signal and delay, so a failure can be replayed
# Environment: SOAK_NPROC (4); the collective deadline (braid launch --timeout / BRAID_TIMEOUT)
# of a SIGKILL trial SOAK_KILL_TIMEOUT (10 s: a death is detected without it, so it only has to
# outlast start-up and scheduling delays under load) and of a SIGSTOP trial SOAK_STOP_TIMEOUT
# (4 s: the survivors wait that long); SOAK_MAX_DELAY_MS (latest signal after every rank is
# ready; 1500).
# A trial whose job fails before the signal (a rank's error or exit first: on an overloaded
# machine a deadline can pass with no fault) proves nothing about faults: it is reported as
# void and replaced by a new draw; more void trials than TRIALS fail the run.
# Prints one line per trial and a summary ("... trials, F failures, V void, max time-to-exit
# X s"); exits 1 when any trial failed, printing that trial's whole output.
set -u

mode=$1 tool=$2 worker=$3 trials=$4 signal_mode=$5
seed=${6:-$(date +%s%N | cut -c10-18)}
n=${SOAK_NPROC:-4}
kill_deadline=${SOAK_KILL_TIMEOUT:-10}
stop_deadline=${SOAK_STOP_TIMEOUT:-4}
max_delay_ms=${SOAK_MAX_DELAY_MS:-1500}
# Per trial (set_deadline): the launcher must exit within the collective deadline + 10 s of
# the signal; the watchdog (timeout(1) around the launcher) fires later than that, so a hang
# is reported, not waited on.
deadline='' exit_limit='' watchdog=''
set_deadline() {
  deadline=$1
  exit_limit=$((deadline + 10))
  watchdog=$((deadline + 40))
}

# Base 10: a seed from the clock may start with 0, which bash would read as octal (and reject
# 8s and 9s, leaving RANDOM unseeded and the run not replayable).
RANDOM=$((10#$seed))
tmp=$(mktemp -d /tmp/braid-soak-XXXXXX)
pids=()        # the current trial's rank pids
launcher_pid=  # the current trial's timeout(1) process (its process group holds the launcher)

# Ends what the current trial left (by pid: the ranks and the launcher's process group).
cleanup_trial() {
  local p
  for p in "${pids[@]}"; do
    if grep -q soak_worker "/proc/$p/cmdline" 2>/dev/null; then
      kill -KILL "$p" 2>/dev/null
      kill -CONT "$p" 2>/dev/null
    fi
  done
  if [[ -n $launcher_pid ]] && kill -0 "$launcher_pid" 2>/dev/null; then
    kill -KILL -- "-$launcher_pid" 2>/dev/null
    wait "$launcher_pid" 2>/dev/null
  fi
  launcher_pid=
}
trap 'cleanup_trial; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

failures=0
max_exit=0 max_kill=0 max_stop=0
unreported=0  # mpirun mode: survivors mpirun ended before they reported
continued=0   # mpirun mode: stopped ranks mpirun continued (SIGCONT) when it aborted the job
trial_failed=0
fail() {
  echo "  FAIL: $*"
  trial_failed=1
}

# Rank lines in one form whatever the launcher: "[rank R] text".
normalize() {
  sed -E 's/^\[[0-9]+,([0-9]+)\]<std(out|err)>:/[rank \1] /' "$tmp/raw"
}

start_job() {
  local worker_seed=$1
  case $mode in
  launch)
    timeout -k 5 "$watchdog" "$tool" launch --nproc-per-node "$n" --timeout "$deadline" \
      --grace-period 1 "$worker" "$worker_seed" 100000000 >"$tmp/raw" 2>&1 &
    ;;
  mpirun | mpirun-mpi)
    local backend=shm
    [[ $mode == mpirun-mpi ]] && backend=mpi
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) BRAID_TIMEOUT=$deadline \
      BRAID_BACKEND=$backend BRAID_STORE_TOKEN=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n') \
      timeout -k 5 "$watchdog" "$tool" --allow-run-as-root --oversubscribe --bind-to none \
      --tag-output -np "$n" -x MASTER_ADDR -x MASTER_PORT -x BRAID_STORE_TOKEN -x BRAID_TIMEOUT \
      -x BRAID_BACKEND "$worker" "$worker_seed" 100000000 >"$tmp/raw" 2>&1 &
    ;;
  *)
    echo "kill_soak.sh: unknown mode '$mode' (launch, mpirun, mpirun-mpi)" >&2
    exit 2
    ;;
  esac
  launcher_pid=$!
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits (up to 60 s, in 50 ms sleeps) until every rank printed "ready"; fills pids.
wait_ready() {
  local i r
  for ((i = 0; i < 1200; i++)); do
    if [[ $(normalize | grep -cE '^\[rank [0-9]+\] ready$') -ge $n ]]; then
      pids=()
      for ((r = 0; r < n; r++)); do
        pids+=("$(normalize | sed -nE "s/^\[rank $r\] job [A-Za-z0-9_-]+ pid ([0-9]+)$/\1/p" | head -n1)")
      done
      ompi_env
      return 0
    fi
    kill -0 "$launcher_pid" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# Under mpirun: OpenMPI's job id (its vader segments in /dev/shm carry it in hex) and session
# folder, read from rank 0's environment while it runs.
ompi_jobid_hex=
ompi_session=
ompi_env() {
  ompi_jobid_hex='' ompi_session=''
  [[ $mode == launch ]] && return
  local env
  env=$(tr '\0' '\n' <"/proc/${pids[0]}/environ" 2>/dev/null)
  local id
  id=$(sed -n 's/^OMPI_MCA_ess_base_jobid=//p' <<<"$env")
  [[ -n $id ]] && ompi_jobid_hex=$(printf '%x' "$id")
  ompi_session=$(sed -n 's/^OMPI_MCA_orte_jobfam_session_dir=//p' <<<"$env")
}

# Waits for the launcher; past the limit, prints what each rank is doing (state, kernel wait
# channel) once, then lets the watchdog end it. Sets status.
wait_launcher() {
  local i p
  for ((i = 0; i < (watchdog + 10) * 20; i++)); do
    kill -0 "$launcher_pid" 2>/dev/null || break
    if ((i == exit_limit * 20)); then
      echo "  the launcher still runs ${exit_limit} s after the signal; the ranks:"
      for p in "${pids[@]}"; do
        echo "    pid $p: $(grep -E '^State' "/proc/$p/status" 2>/dev/null) wchan $(cat "/proc/$p/wchan" 2>/dev/null)"
      done
    fi
    sleep 0.05
  done
  wait "$launcher_pid"
  status=$?
}

# Some process of the current trial is left: a rank (not a zombie), or any process that is
# not a zombie in a rank's process group (this also catches a rank that is exiting: its
# cmdline is already empty). Prints them.
job_processes_left() {
  local p found=1
  for p in "${pids[@]}"; do
    if running_worker "$p"; then
      echo "pid $p (a rank)"
      found=0
    fi
  done
  local groups=" ${pids[*]} "
  while read -r pid pgid stat comm; do
    if [[ $groups == *" $pgid "* && $stat != Z* ]]; then
      echo "pid $pid ($comm, state $stat, process group $pgid)"
      found=0
    fi
  done < <(ps -e -o pid=,pgid=,stat=,comm=)
  return $found
}

# A process (not a zombie) with this pid runs soak_worker.
running_worker() {
  grep -q soak_worker "/proc/$1/cmdline" 2>/dev/null && ! grep -Eq '^State:\s+Z' "/proc/$1/status" 2>/dev/null
}

check_trial() {
  local k=$1 sig=$2 status=$3 out=$4 r p
  # The launcher's status and line.
  # (A watchdog kill also shows as a time-to-exit beyond the limit.)
  [[ $status -eq 124 ]] && fail "the launcher hung: ended by the ${watchdog} s watchdog"
  [[ $status -ne 0 ]] || fail "the launcher exited 0"
  if [[ $mode == launch ]]; then
    if [[ $sig == KILL ]]; then
      [[ $status -eq 137 ]] || fail "launcher exit status $status, expected 137 (rank $k SIGKILLed)"
      grep -Eq "^braid launch: rank $k was killed by signal 9" "$out" ||
        fail "the launcher does not name rank $k as killed"
    else
      [[ $status -eq 3 ]] || fail "launcher exit status $status, expected 3 (a survivor's timeout)"
    fi
  fi
  # Survivors: no wrong result; the error names K (shm: in the missing-rank list).
  grep -q "wrong result" "$out" && fail "a rank reported a wrong result"
  # K is named either as the cause ("the process of group rank K (pid P) has exited": K died
  # after it had arrived at the step this rank waits for, so the missing list names the rank
  # still waiting for K), in the missing-rank list, or as whom a missing rank waits for ("group
  # rank R (world rank W) waits for group rank K": R is stuck in a call K has left, such as a
  # recv from K while K went on to the next collective and was stopped there).
  local names_k="(the process of group rank $k \(pid [0-9]+\) has exited|waiting for group ranks \[([0-9]+, )*$k(, [0-9]+)*\]|waits for group rank $k \()"
  # mpirun sends SIGCONT before SIGTERM when it aborts a job: a stopped K then runs again (and
  # reports an error of its own) and may arrive where a slower survivor waits, which then
  # names the ranks that left instead. There only the survivor that timed out must name K.
  local resumed=0
  if [[ $mode == mpirun && $sig == STOP ]] && grep -Eq "^\[rank $k\] error: " "$out"; then
    resumed=1
    grep -Eq "^\[rank [0-9]+\] error: braid: timeout: shm: .*$names_k" "$out" ||
      fail "no survivor's timeout names rank $k"
    echo "  (rank $k was continued by mpirun: the culprit check holds for the timed-out survivor)"
    continued=$((continued + 1))
  fi
  for ((r = 0; r < n; r++)); do
    [[ $r -eq $k ]] && continue
    local line
    line=$(grep -E "^\[rank $r\] error: " "$out" | head -n1)
    case $mode in
    launch | mpirun)
      if [[ -z $line ]]; then
        # Under mpirun a survivor may be killed by mpirun before it reports (see the docs).
        if [[ $mode == mpirun ]]; then
          echo "  (rank $r reported no error: ended by mpirun first)"
          unreported=$((unreported + 1))
        else
          fail "rank $r reported no error"
        fi
      elif ((resumed)); then
        grep -Eq "error: braid: (peer lost|timeout): shm: " <<<"$line" ||
          fail "rank $r's error is not a shm peer lost / timeout: $line"
      elif ! grep -Eq "error: braid: (peer lost|timeout): shm: .*$names_k" <<<"$line"; then
        fail "rank $r's error does not name rank $k: $line"
      fi
      ;;
    mpirun-mpi)
      # The mpi backend cannot name a missing rank (docs/mpi.md, "Errors"): a timeout only.
      if [[ -n $line ]] && ! grep -Eq "error: braid: timeout: mpi: " <<<"$line"; then
        fail "rank $r's error is not the mpi backend's timeout: $line"
      fi
      ;;
    esac
  done
  # No process of the job left: each rank's pid and its process group. mpirun may return
  # while a rank it killed is still being torn down: up to 3 s are allowed there (and
  # counted), none under braid launch, which reaps every rank before it exits.
  if [[ $mode != launch ]]; then
    local i
    for ((i = 0; i < 60; i++)); do
      job_processes_left >/dev/null || break
      sleep 0.05
    done
    ((i > 0)) && echo "  (a process of the job outlived mpirun by $((i * 50)) ms)"
  fi
  local left
  if left=$(job_processes_left); then
    fail "left after the launcher exited: $(tr '\n' ' ' <<<"$left")"
  fi
  # /dev/shm: braid's segments of this job (the prefix from rank 0's first line).
  local prefix
  prefix=$(sed -nE 's/^\[rank 0\] job ([A-Za-z0-9_-]+) pid [0-9]+$/\1/p' "$out" | head -n1)
  if [[ -z $prefix ]]; then
    fail "rank 0 did not print its job prefix"
  elif compgen -G "/dev/shm/braid-$prefix-*" >/dev/null; then
    fail "left in /dev/shm: $(ls /dev/shm/braid-"$prefix"-*)"
  fi
  # OpenMPI's own shared memory (vader segments) and session folder of this job.
  if [[ $mode != launch ]]; then
    if [[ -z $ompi_jobid_hex || -z $ompi_session ]]; then
      fail "could not read OpenMPI's job id and session folder from rank 0's environment"
    else
      compgen -G "/dev/shm/vader_segment.*.$ompi_jobid_hex.*" >/dev/null &&
        fail "left in /dev/shm: $(ls /dev/shm/vader_segment.*."$ompi_jobid_hex".*)"
      [[ -e $ompi_session ]] && fail "OpenMPI's session folder $ompi_session is left"
    fi
  fi
}

echo "kill_soak: mode $mode, $trials trial(s), signal $signal_mode, seed $seed, $n ranks," \
  "deadline ${kill_deadline} s (SIGKILL) / ${stop_deadline} s (SIGSTOP), exit limit deadline + 10 s"
void=0
for ((t = 1; t <= trials; t++)); do
  worker_seed=$RANDOM$RANDOM
  k=$((RANDOM % n))
  delay_ms=$((RANDOM % (max_delay_ms + 1)))
  case $signal_mode in
  kill) sig=KILL ;;
  stop) sig=STOP ;;
  mixed) if ((RANDOM % 2)); then sig=KILL; else sig=STOP; fi ;;
  *) echo "kill_soak.sh: unknown signal '$signal_mode' (kill, stop, mixed)" >&2; exit 2 ;;
  esac
  if [[ $sig == KILL ]]; then set_deadline "$kill_deadline"; else set_deadline "$stop_deadline"; fi
  elapsed_ms=
  trial_failed=0
  pids=()
  : >"$tmp/raw"  # here, not in the background job: wait_ready must not read the last trial's
  start_job "$worker_seed"
  ready=0
  wait_ready && ready=1
  ((ready)) && sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  if ! kill -0 "$launcher_pid" 2>/dev/null || normalize | grep -qE '^\[rank [0-9]+\] (error|wrong result)'; then
    # The job failed before the signal: void (a wrong result is never void).
    if normalize | grep -q "wrong result"; then
      fail "a rank reported a wrong result before any fault"
    else
      void=$((void + 1))
      echo "trial $t: void, the job failed before the signal: $(normalize | grep -m1 -E 'error|braid launch:')"
      cleanup_trial
      ((void > trials)) && { echo "kill_soak: more void trials than trials: the machine is too loaded"; failures=$((failures + 1)); break; }
      t=$((t - 1))
      continue
    fi
  fi
  if ((!ready)); then
    fail "the job did not start (every rank ready) within 60 s"
    status=none
  elif ((!trial_failed)); then
    t0=$(date +%s%N)
    kill -"$sig" "${pids[$k]}"
    wait_launcher
    launcher_pid=
    elapsed_ms=$((($(date +%s%N) - t0) / 1000000))
    ((elapsed_ms > max_exit)) && max_exit=$elapsed_ms
    if [[ $sig == KILL ]]; then
      ((elapsed_ms > max_kill)) && max_kill=$elapsed_ms
    else
      ((elapsed_ms > max_stop)) && max_stop=$elapsed_ms
    fi
    ((elapsed_ms > exit_limit * 1000)) &&
      fail "the launcher took ${elapsed_ms} ms to exit, more than ${exit_limit} s"
    normalize >"$tmp/out"
    check_trial "$k" "$sig" "$status" "$tmp/out"
  fi
  printf 'trial %d: worker seed %s, rank %d SIG%s after %d ms: exit %s in %s ms%s\n' "$t" \
    "$worker_seed" "$k" "$sig" "$delay_ms" "$status" "${elapsed_ms:-?}" \
    "$( ((trial_failed)) && echo ' FAILED')"
  if ((trial_failed)); then
    failures=$((failures + 1))
    echo "---- output of trial $t ----"
    normalize
    echo "----"
  fi
  cleanup_trial
done
ms() { printf '%d.%03d s' $(($1 / 1000)) $(($1 % 1000)); }
echo "kill_soak: mode $mode, signal $signal_mode, seed $seed: $trials trials, $failures failures," \
  "$void void, $unreported unreported survivor(s), $continued stopped rank(s) continued by mpirun," \
  "max time-to-exit $(ms "$max_exit") (SIGKILL $(ms "$max_kill"), SIGSTOP $(ms "$max_stop"))"
((failures == 0))
