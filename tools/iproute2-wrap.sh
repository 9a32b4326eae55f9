#!/usr/bin/env bash
# Sourced, not run: `iproute2_wrap IPROUTE2_DIR WRAP_DIR` writes `ip` and `tc` wrappers in WRAP_DIR
# for an extracted iproute2 with its libraries (a GPU host that has none: Debian's iproute2,
# libbpf1, libelf1, libmnl0, libbsd0, libcap2, libxtables12, libmd0, zlib1g unpacked with dpkg -x)
# and exports IP and TC for launch/cluster.sh. The library path reaches iproute2 only, never what
# `ip netns exec` starts.
iproute2_wrap() {
  local ipr wrap=$2 libs
  ipr=$(cd "$1" && pwd) || return 1
  libs=$ipr/lib/x86_64-linux-gnu:$ipr/usr/lib/x86_64-linux-gnu
  mkdir -p "$wrap" || return 1
  cat >"$wrap/ip" <<WRAP
#!/bin/sh
if [ "\$1" = netns ] && [ "\$2" = exec ]; then
  ns=\$3; shift 3
  LD_LIBRARY_PATH=$libs exec $ipr/bin/ip netns exec "\$ns" env -u LD_LIBRARY_PATH "\$@"
fi
LD_LIBRARY_PATH=$libs exec $ipr/bin/ip "\$@"
WRAP
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s/sbin/tc "$@"\n' "$libs" "$ipr" >"$wrap/tc"
  chmod +x "$wrap/ip" "$wrap/tc"
  export IP=$wrap/ip TC=$wrap/tc
}
