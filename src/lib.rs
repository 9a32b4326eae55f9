//! tcpx-perf
