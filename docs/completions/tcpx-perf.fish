complete -c tcpx-perf -s b -l minbytes -d 'Smallest message size (binary K/M/G suffixes, e.g. 1M)' -r
complete -c tcpx-perf -s e -l maxbytes -d 'Largest message size (binary K/M/G suffixes, e.g. 64M)' -r
complete -c tcpx-perf -s f -l stepfactor -d 'Multiplicative step between sizes; 1 switches to the additive step -i' -r
complete -c tcpx-perf -s i -l stepbytes -d 'Additive step between sizes, used when -f is 1' -r
complete -c tcpx-perf -s n -l iters -d 'Timed iterations per size' -r
complete -c tcpx-perf -s w -l warmup_iters -l warmup-iters -d 'Untimed warmup iterations, run before every size (nccl-tests: once before the sweep; see --warmup-once)' -r
complete -c tcpx-perf -s c -l check -d 'Data check of every timed iteration: 1 on, 0 off (#wrong then shows N/A)' -r
complete -c tcpx-perf -s a -l average -d 'How the per-rank time is reduced before computing bandwidth: 0 rank0, 1 avg, 2 min, 3 max' -r
complete -c tcpx-perf -s T -l timeout -d 'Deadline in seconds for every phase (connect, barriers, each iteration); 0 turns it off' -r
complete -c tcpx-perf -s g -l ngpus -d 'Endpoints (GPU workers) per rank' -r
complete -c tcpx-perf -l pattern -d 'Traffic pattern (definitions and formulas at the end of --help)' -r -f -a "sendrecv\t'Endpoint e sends to e+1 and receives from e-1 (nccl-tests sendrecv)'
pairs\t'Endpoint e exchanges with e + n/2 (GPU i <-> GPU i on two nodes)'
ring\t'The traffic of a ring all-reduce: 2(n-1) steps of size/n blocks, no arithmetic'
fullmesh\t'All-to-all: size/n to every endpoint (nccl-tests alltoall)'"
complete -c tcpx-perf -l scope -d 'Which endpoint pairs carry traffic: all, inter-node only, or auto' -r -f -a "all\t'Every pair, same node or not'
inter-node\t'Only pairs on different nodes'
auto\t'inter-node when the job spans several nodes, else all'"
complete -c tcpx-perf -l dir -d 'Direction for --pattern pairs: uni (lower half sends) or bi (both send)' -r -f -a "uni\t''
bi\t''"
complete -c tcpx-perf -l mem -d 'Buffer memory: host, cuda, or auto (cuda when the plugin and a GPU allow it)' -r -f -a "auto\t'cuda when the plugin and a GPU allow it, else host'
host\t'Host memory'
cuda\t'CUDA device memory'"
complete -c tcpx-perf -l ranks-per-node -d 'Ranks per node, overriding hostname-based node detection' -r
complete -c tcpx-perf -l max-peers -d 'Bound on the peers an endpoint talks to at once (fullmesh; the peers are served in shifted rounds)' -r
complete -c tcpx-perf -l connect -d 'Which comms are open while data moves' -r -f -a "all\t'Every comm of the job before the first byte, held to the end (the footprint of NCCL\'s alltoall, which connects every peer)'
rounds\t'Only the comms of the `--max-peers` round in flight: a size\'s iterations run round by round, each round\'s comms connected before its untimed warm-up and closed after it'"
complete -c tcpx-perf -l connect-peers -d 'With --connect rounds: the peers an endpoint has comms with at once' -r
complete -c tcpx-perf -l chunk -d 'Size of one send/recv request (binary K/M/G suffixes)' -r
complete -c tcpx-perf -l max-reg -d 'Largest single memory registration; the buffer is registered in segments of this size' -r
complete -c tcpx-perf -l channels -d 'Communicators (connections) per peer' -r
complete -c tcpx-perf -l window -d 'Requests outstanding per communicator (1..=32; also bounded by the plugin)' -r
complete -c tcpx-perf -l plugin -d 'Net plugin: a path to a .so or a name (libnccl-net-NAME.so); default: the bundled tcpx-emu (v7 only, as TCPX)' -r
complete -c tcpx-perf -l abi -d 'Force one plugin ABI version (7..=12) instead of the newest the plugin exports' -r
complete -c tcpx-perf -l net-dev -d 'Plugin device per GPU: one index or name for every GPU, or one per GPU index on the node' -r
complete -c tcpx-perf -l cpu-bind -d 'CPUs each endpoint\'s thread (and the threads it starts) runs on: auto, none, or a cpulist' -r
complete -c tcpx-perf -l poll -d 'How each endpoint\'s progress loop waits when a pass over its comms found nothing to do' -r -f -a "adaptive\t'Spin a little after progress, then sleep with growing pauses (bounded by [`sleep_bound`])'
spin\t'Test continuously, yielding the core every 64 empty passes'"
complete -c tcpx-perf -l setup-threads -d 'Most connection-setup threads per endpoint (default: 64 for TCPX and tcpx-emu, 1 for other plugins)' -r
complete -c tcpx-perf -l connects-in-flight -d 'Most connects under way at once per endpoint: auto, or a count' -r
complete -c tcpx-perf -l plan -d 'Plan a job of NODESxGPUSxNICS (e.g. 64x8x4) on this machine, without MPI or the plugin\'s init' -r
complete -c tcpx-perf -l plan-json -d 'With --plan: also write the plan (needs, limits, verdicts) as JSON to FILE' -r -F
complete -c tcpx-perf -l out -d 'Result directory; default: results/<UTC timestamp>-<pattern>' -r -F
complete -c tcpx-perf -l progress -d 'Progress bar: auto (only when stderr is a terminal), always, never' -r -f -a "auto\t'Only when the output is a terminal'
always\t'Always'
never\t'Never'"
complete -c tcpx-perf -l plugin-log -d 'Plugin log level passed to the plugin\'s logger' -r -f -a "warn\t'Warnings only'
info\t'Informational messages'
trace\t'Everything'
none\t'Nothing'"
complete -c tcpx-perf -s J -l output_file -l output-file -d 'Also write the run as nccl-tests 2.19 writes -J FILE (JSON version 3), for nccl-tests\' tools' -r -F
complete -c tcpx-perf -l healthy-hostfile -d 'Write the healthy nodes of a multi-node run as an Open MPI hostfile to PATH' -r -F
complete -c tcpx-perf -l drain-list -d 'Write the bad nodes of a multi-node run to PATH, one a line: the node, a space, the reason' -r -F
complete -c tcpx-perf -l suspect-share -d 'A NIC side whose flows ran below this share of the median side is suspect (node verdicts)' -r
complete -c tcpx-perf -l bad-share -d 'A NIC side below this share of the median side, its partners fast with everyone else, makes its node bad (exit 5)' -r
complete -c tcpx-perf -l probe-rounds -d 'Rounds of node pairs after the sweep that judge the nodes (each node with a new partner per round, the largest size one way then the other; 0: none, the sweep\'s flows judge)' -r
complete -c tcpx-perf -l probe-pairs -d 'Node pairs of a probe round that run at once, the others after them (0: all at once)' -r
complete -c tcpx-perf -l iter-time -d 'Which rank\'s time each timed iteration gets in t_min t_max t_p99 cv% t_med and samples.csv: reduced (with -a, the default) or max (the slowest rank, as nccl-tests -I 1)' -r -f -a "reduced\t'Reduced over ranks as -a says'
max\t'The slowest rank\'s (nccl-tests -I 1: "i_* uses max over process rows")'"
complete -c tcpx-perf -l timing -d 'How the timed iterations run: per-iteration (each after a barrier of every rank, timed alone) or back-to-back (nccl-tests\' timing: one barrier, the iterations back to back, time = total / iterations; -c checks the last iteration\'s bytes)' -r -f -a "per-iteration\t'Every iteration starts after a barrier of every rank, and is timed alone: its time is a sample of its own, the slowest rank\'s start included in no other'
back-to-back\t'The iterations run back to back from one barrier, each endpoint starting the next as its previous one completes (nccl-tests\' timing: time = total / iterations); an iteration\'s sample is from the previous one\'s end on its rank to its own'"
complete -c tcpx-perf -l completions -d 'Print a shell completion script (bash, zsh, fish, elvish, powershell), then exit' -r -f -a "bash\t''
elvish\t''
fish\t''
powershell\t''
zsh\t''"
complete -c tcpx-perf -l baseline -d 'Measure NCCL itself beside tcpx-perf, size by size, in the same job' -r -f -a "nccl\t'NCCL (libnccl.so.2, loaded at run time) through the same plugin, same GPUs, same job'"
complete -c tcpx-perf -l nccl-lib -d 'libnccl.so.2 for --baseline nccl (default: the dynamic loader\'s search for libnccl.so.2)' -r -F
complete -c tcpx-perf -l spread-channels -d 'With --channels > 1: spread each endpoint\'s channels over the devices as close to its GPU as its own (round robin, starting from its own)'
complete -c tcpx-perf -l dry-run -d 'Stop before moving data: MPI, plugin, placement, CPU bindings and preflight checks on every node, then a per-node table and one line per finding; exit 0 if no error'
complete -c tcpx-perf -l force -d 'Run even though preflight found errors (ranks with different TCPX settings, a NIC whose link is down, ...); recorded in the header and summary.json. Without it such a run exits 1 before any data moves'
complete -c tcpx-perf -l simulate -d 'With --plan: rehearse the job\'s bookkeeping here, without MPI or sockets'
complete -c tcpx-perf -l no-out -d 'Write no result files (stdout only)'
complete -c tcpx-perf -s v -l verbose -d 'More of the plugin\'s log: -v at least info, -vv trace (raises --plugin-log, never lowers it)'
complete -c tcpx-perf -l warmup-once -d 'Warm up as nccl-tests does: -w untimed iterations of every size once, before the first timed iteration, and none between sizes'
complete -c tcpx-perf -l print-man -d 'Print the man page (roff) generated from these flags, then exit'
complete -c tcpx-perf -l version -d 'Print version'
complete -c tcpx-perf -s h -l help -d 'Print help (see more with \'--help\')'
