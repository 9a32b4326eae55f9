#!/usr/bin/env bash
# Installs what a fresh Debian/Ubuntu machine lacks, in two parts:
#   bash launch/setup.sh           building and running tcpx-perf (launch/quickstart.sh): Open MPI
#                                  (mpirun, and headers for rsmpi), libclang (rsmpi's bindgen),
#                                  pkg-config, a C toolchain, OpenSSL's headers (tcpx-analyze's TLS to
#                                  PostgreSQL, built by launch/build.sh --all), and Rust if it is missing;
#   bash launch/setup.sh --tests   that, and what only the test suite needs (launch/test.sh, so CI):
#                                  iproute2 and shellcheck (launch/cluster.sh and the scripts' tests),
#                                  Slurm and MUNGE (tests/slurm.rs), the PostgreSQL server (the run
#                                  history's tests, launch/postgres/local-postgres.sh), kubernetes-validate (tests/k8s.rs),
#                                  clippy and rustfmt, and best effort chromium and
#                                  signal-processing-algorithms (the history tests, which skip without).
# Safe to run again; prints what it installed.
#
# A package counts as installed only when dpkg says "install ok installed": `dpkg -s` also
# answers 0 for a removed package whose configuration files remain, which would leave the
# build to fail later on a missing mpi.h.
set -euo pipefail

# Every argument is checked before anything is installed.
tests=0
for arg in "$@"; do
  case "$arg" in
    --tests) tests=1 ;;
    *) echo "setup: unknown argument '${arg//$'\n'/\\n}': usage: bash launch/setup.sh [--tests]" >&2; exit 2 ;;
  esac
done

installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
can_install() { [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; }

# apt-get update once per call, and only when something is missing (it takes tens of seconds).
updated=0
apt_install() {
  [ "$updated" = 1 ] || { $SUDO apt-get update -qq && updated=1; }
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# The quick start's packages; with --tests also the suite's. Slurm 22.05 and MUNGE serve
# tests/slurm.rs and launch/slurm/local-slurm.sh (slurmd brings slurm-wlm-basic-plugins, whose
# mpi_pmix.so is srun --mpi=pmix): required, not best effort, since CI fails when the Slurm tests
# cannot run. The PostgreSQL server likewise serves the history's tests (CI fails without it); no
# cluster of the package's own is needed (local-postgres.sh makes a private one), nor its start.
pkgs=(openmpi-bin libopenmpi-dev libclang-dev pkg-config build-essential ca-certificates curl libssl-dev)
if [ "$tests" = 1 ]; then pkgs+=(iproute2 shellcheck slurmctld slurmd slurm-client munge postgresql); fi
need=()
for pkg in "${pkgs[@]}"; do
  installed "$pkg" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  can_install || { echo "setup: need root or sudo to install: ${need[*]}" >&2; exit 1; }
  echo "setup: installing ${need[*]}"
  apt_install "${need[@]}"
  echo "setup: installed ${need[*]}"
else
  echo "setup: system packages already installed"
fi

# Rust without clippy and rustfmt: the quick start only builds (--tests adds them below).
if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  echo "setup: installing Rust (rustup, minimal profile)"
  if ! curl -sSf --max-time 60 https://sh.rustup.rs -o /tmp/rustup-init.sh || ! sh /tmp/rustup-init.sh -y --profile minimal; then
    cat >&2 <<'EOF'
setup: could not install Rust from https://sh.rustup.rs (no network, or a proxy in the way).
Install Rust 1.89 or newer yourself, then run this again:
  - with network access elsewhere: download rustup-init for your platform from
    https://rust-lang.github.io/rustup/installation/other.html and run it here, or
  - from your distribution, if it is new enough: apt-get install cargo rustc (check rustc --version)
EOF
    exit 1
  fi
  echo "setup: installed Rust"
fi
export PATH="$HOME/.cargo/bin:$PATH"

if [ "$tests" = 1 ]; then
  # Best effort, for the run-history tests (analysis/tests/history_*.rs), which skip, saying so, where
  # these are missing: Debian's chromium (the HTML report checked in a headless browser) and MongoDB's
  # signal-processing-algorithms from PyPI (the reference change-point detector). Never fatal.
  if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 && can_install; then
    echo "setup: installing chromium (best effort)"
    if { [ "$updated" = 1 ] || $SUDO timeout 120 apt-get update -qq; } && DEBIAN_FRONTEND=noninteractive \
        $SUDO timeout 600 apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; then
      echo "setup: installed chromium"
    else
      echo "setup: chromium not installed: the history report's browser check will skip"
    fi
  fi
  if command -v python3 >/dev/null 2>&1 && ! python3 -c "import signal_processing_algorithms" 2>/dev/null; then
    echo "setup: installing signal-processing-algorithms from PyPI (best effort)"
    timeout 300 python3 -m pip install -q --disable-pip-version-check signal-processing-algorithms >/dev/null 2>&1 \
      || echo "setup: signal-processing-algorithms not installed: the detector's reference comparison will skip"
  fi
  # The GKE manifests' validator (launch/k8s/validate.py, tests/k8s.rs), with the Kubernetes API
  # schemas inside: validation then needs no cluster and no network. Pinned, so that every machine
  # checks against the same schemas. Debian's python3 refuses pip outside a venv (PEP 668) unless told.
  if command -v python3 >/dev/null 2>&1 && ! python3 -c "import kubernetes_validate" 2>/dev/null; then
    echo "setup: installing kubernetes-validate 1.37.0 from PyPI"
    pip_install=(timeout 300 python3 -m pip install -q --disable-pip-version-check kubernetes-validate==1.37.0)
    "${pip_install[@]}" >/dev/null 2>&1 || "${pip_install[@]}" --break-system-packages >/dev/null 2>&1 \
      || echo "setup: kubernetes-validate not installed: tests/k8s.rs will fail (python3 -m pip install kubernetes-validate==1.37.0)" >&2
  fi
  # CI (launch/test.sh) runs cargo fmt and cargo clippy: add them to a toolchain installed without.
  if command -v rustup >/dev/null 2>&1 && ! { cargo clippy --version && cargo fmt --version; } >/dev/null 2>&1; then
    rustup component add clippy rustfmt || echo "setup: could not add clippy/rustfmt (rustup component add clippy rustfmt)" >&2
  fi
fi
echo "setup: $(mpirun --version 2>/dev/null | head -1); $(cargo --version)"
