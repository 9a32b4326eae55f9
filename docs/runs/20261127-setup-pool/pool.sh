#!/bin/bash
# usage: pool.sh BIN LABEL N : -g 8 fullmesh on 4 ranks beside 4 busy loops; prints the setup line's threads
# old = the build of 555b650, new = the build of this change; busy: 4 x `sh -c "while :; do :; done"` beside it
cd "$(git rev-parse --show-toplevel)"
for i in $(seq 1 $3); do
  d=${POOL_OUT:-/tmp/setup-pool}/$2-$i; rm -rf $d
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
   timeout 120 mpirun -np 4 $1 --pattern fullmesh -g 8 -b 64K -e 64K -n 2 -w 1 --progress never -T 60 --out $d > $d.txt 2>&1
  echo "$2 run $i rc $? $(grep -o 'setup: [0-9.]* s' $d.txt) $(grep -o 'up to [0-9]* setup thread(s) per endpoint' $d.txt) $(grep -o 'first timed iteration [0-9.]* s' $d.txt)"
done
