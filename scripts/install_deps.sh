#!/usr/bin/env bash
# Installs everything braid's build, tests and scripts need on Debian 12, as root, without
# prompts. Idempotent: only missing packages are installed, and `apt-get update` runs only
# when something is missing. Safe to run before every build (scripts/quickstart.sh and
# scripts/test.sh do).
#
# Add packages to the lists below; keep one concern per line so a diff says why.
set -euo pipefail

# Debian packages.
APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config git ccache  # toolchain (ccache: faster CI reruns)
  clang-format                                             # scripts/format.sh
  clang-15 libclang-common-15-dev                          # tests/fuzz: clang 15 and its libFuzzer runtime
  libgtest-dev libgmock-dev libbenchmark-dev               # tests and bench/
  libeigen3-dev nlohmann-json3-dev libyaml-cpp-dev         # kernels GEMM, JSON and YAML
  libcli11-dev                                             # apps/: the braid CLI
  libopenblas-dev                                          # a BLAS peer for bench/
  libucx-dev                                               # the ucx backend
  ucx-utils                                                # ucx_perftest: bench/netns/run.sh, multinode_bench_netns
  libopenmpi-dev openmpi-bin                               # MPI peer: braid bench --peer mpi, comparison tests
  slurmd slurmctld slurm-client munge                      # tests/multinode: jobs under a real srun
  python3 python3-pip python3-numpy python3-torch          # golden and interop tests
  libdlpack-dev                                            # bindings/: DLManagedTensor in braid.h
  pybind11-dev python3-pybind11 python3-dev                # bindings/python: pybind11 and the headers of Debian's python3
  hipcc libamdhip64-dev                                    # HIP 5.2: kernels.hip_compile (docs/gpu.md, "HIP"); 66 MB, ~20 s
)

# Python packages for the python3 on PATH. When that interpreter is Debian's own
# (externally managed), numpy comes from python3-numpy above so python3-torch keeps the
# numpy it was built against.
# libucx-cu12: UCX 1.22 as PyPI's libucx wheel ships it, a second UCX library that
# tests/ucx_versions runs braid's UCX tests against (docs/ucx.md, "UCX versions").
PIP_PACKAGES=(numpy safetensors ml_dtypes "libucx-cu12==1.22.0")
# Extra Python packages for Debian's /usr/bin/python3 (the one with python3-torch), whichever
# python3 is on PATH.
# transformers: the GPT interop test (tests/interop/gpt_transformers.py) and the goldens of
# tests/reference/gen_torch_gpt.py; 4.40 is the newest line that supports Debian's torch 1.13.
# tensorboard: accel/tests/trackers/check_tensorboard.py reads braid's event files back.
SYSTEM_PYTHON_PIP_PACKAGES=(safetensors "transformers==4.40.2" "tensorboard==2.21.0")

start=$(date +%s)
log() { echo "[install_deps] $*"; }

if [[ $(id -u) -ne 0 ]]; then
  echo "[install_deps] must run as root (apt-get install)" >&2
  exit 1
fi

# --- Debian packages -----------------------------------------------------------------
missing=()
for p in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  log "apt: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  log "apt: all ${#APT_PACKAGES[@]} packages present"
fi

# --- Python packages -----------------------------------------------------------------
# import name for a pip package name
import_name() {
  case "$1" in
    ml_dtypes) echo ml_dtypes ;;
    libucx-cu12*) echo libucx ;;
    *)
      local name=${1%%[=<>]*} # "transformers==4.40.2" imports as transformers
      echo "${name//-/_}"
      ;;
  esac
}

# pip_install <python> <package>...: installs the packages that do not import yet.
pip_install() {
  local py=$1
  shift
  local todo=()
  for p in "$@"; do
    "$py" -c "import $(import_name "$p")" 2>/dev/null || todo+=("$p")
  done
  if ((${#todo[@]} == 0)); then
    log "pip ($py): all of $* present"
    return
  fi
  local flags=(--quiet --disable-pip-version-check --root-user-action=ignore)
  local managed
  managed=$("$py" -c 'import os, sysconfig; print(os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))')
  if [[ $managed == True ]]; then
    # Debian's interpreter: pip refuses without this flag (PEP 668). Keep Debian's numpy 1.x,
    # which python3-torch is built against.
    if "$py" -m pip install --help | grep -q -- --break-system-packages; then
      flags+=(--break-system-packages)
    fi
    todo+=("numpy<2")
  fi
  log "pip ($py): installing ${todo[*]}"
  "$py" -m pip install "${flags[@]}" "${todo[@]}"
}

path_python=$(command -v python3)
pip_install "$path_python" "${PIP_PACKAGES[@]}"
# Always for /usr/bin/python3 (also when it is the python3 on PATH, as on a fresh Debian):
# the interop tests run it.
if [[ -x /usr/bin/python3 ]]; then
  pip_install /usr/bin/python3 "${SYSTEM_PYTHON_PIP_PACKAGES[@]}"
fi

log "done in $(($(date +%s) - start)) s"
