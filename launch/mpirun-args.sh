# shellcheck shell=bash
# Sourced by the launch scripts: mpirun flags that work as root and on small machines.
# --oversubscribe: more ranks than cores is fine (the engine yields when idle).
MPIRUN_ARGS=(--oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && MPIRUN_ARGS+=(--allow-run-as-root)
# Open MPI inside containers: shared-memory transport without a cross-memory-attach capability.
MPIRUN_ARGS+=(--mca btl_vader_single_copy_mechanism none)
