//! `--baseline nccl` without a GPU and without NCCL (what CI has): the loader's refusals through
//! real `dlopen`, the C ABI of the calls through a stand-in library compiled here
//! (`tests/fixtures/fake-nccl/fake_nccl.c`, our own code), and the flag's errors through real
//! `mpirun` jobs. NCCL itself on GPUs is exercised by `examples/nccl_probe.rs` and the
//! GPU-host runs (docs/runs).

mod common;

use common::output_within;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use tcpx_perf::baseline::nccl_sys::{NcclLib, NcclUniqueId};

const BIN: &str = env!("CARGO_BIN_EXE_tcpx-perf");

/// Compiles the stand-in NCCL with `FAKE_NCCL_VERSION=version` into a fresh directory.
fn fake_nccl(version: u32, tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tcpx-perf-fake-nccl-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-nccl/fake_nccl.c");
    let out = dir.join("libnccl.so.2");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let o = output_within(
        Command::new(&cc)
            .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror"])
            .arg(format!("-DFAKE_NCCL_VERSION={version}"))
            .arg("-o")
            .arg(&out)
            .arg(&src),
        Duration::from_secs(60),
        "the C compiler",
    );
    assert!(
        o.status.success(),
        "{cc} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[test]
fn an_nccl_older_than_2_19_is_refused_by_name() {
    let lib = fake_nccl(21805, "old");
    let err = NcclLib::open(Some(&lib)).err().expect("refused");
    assert!(err.contains("NCCL 2.18.5 is older than 2.19"), "{err}");
    assert!(err.contains("--nccl-lib") && !err.contains('\n'), "{err}");
}

#[test]
fn calls_cross_the_c_abi_intact_and_errors_carry_nccls_words() {
    let path = fake_nccl(22803, "abi");
    let lib = NcclLib::open(Some(&path)).expect("the stand-in loads");
    assert_eq!(lib.version_string(), "2.28.3");
    assert_eq!(
        std::fs::canonicalize(lib.path()).ok(),
        std::fs::canonicalize(&path).ok(),
        "the path the loader mapped"
    );
    let id = lib.unique_id().expect("unique id");
    let bytes = id.to_bytes();
    assert!(bytes.iter().enumerate().all(|(i, &b)| b == (i * 3 + 1) as u8));
    // The 128-byte id passed by value arrives whole: the stand-in hashes what it received.
    let expect = |id: &[u8], nranks: u64, rank: u64| {
        let h = id.iter().fold(1_469_598_103_934_665_603u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(1_099_511_628_211)
        });
        (h ^ (nranks << 16) ^ rank) as usize
    };
    let comm = lib.comm_init_rank(8, id, 5).expect("init");
    assert_eq!(comm as usize, expect(&bytes, 8, 5));
    let mut other = bytes.clone();
    other[127] ^= 0xff;
    let id2 = NcclUniqueId::from_bytes(&other).expect("128 bytes");
    let comm2 = lib.comm_init_rank(8, id2, 5).expect("init");
    assert_eq!(comm2 as usize, expect(&other, 8, 5));
    assert_ne!(comm, comm2, "the last byte of the id reached the library");
    // Errors: NCCL's name for the code and its last-error text, on one line.
    let err = lib.comm_init_rank(2, id, 7).unwrap_err();
    assert_eq!(
        err,
        "ncclCommInitRank failed: invalid argument (4): fake: rank out of range"
    );
    // SAFETY: the stand-in never touches the pointers.
    let err = unsafe { lib.send(0x1000, 64, 1, comm, std::ptr::null_mut()) }.unwrap_err();
    assert_eq!(
        err,
        "ncclSend failed: invalid usage (5): fake: no GPU behind this communicator"
    );
    lib.group_start().expect("group start");
    lib.group_end().expect("group end");
    // SAFETY: a handle from comm_init_rank, destroyed once.
    unsafe { lib.comm_destroy(comm) }.expect("destroy");
}

fn mpirun(np: usize, args: &str) -> Output {
    let mut cmd = Command::new("mpirun");
    cmd.args(["--oversubscribe", "--bind-to", "none", "-np"])
        .arg(np.to_string())
        .arg(BIN)
        .args(args.split_whitespace())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    output_within(&mut cmd, Duration::from_secs(60), "mpirun")
}

fn error_lines(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.starts_with("tcpx-perf"))
        .map(String::from)
        .collect()
}

#[test]
fn nccl_lib_without_the_baseline_is_a_usage_error() {
    let o = mpirun(2, "--nccl-lib /x/libnccl.so.2 -b 1K -e 1K -n 1 -w 0 --no-out");
    assert_eq!(o.status.code(), Some(64), "{o:?}");
    let lines = error_lines(&o);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("--nccl-lib only applies with --baseline nccl"),
        "{lines:?}"
    );
    let o = mpirun(1, "--baseline mpi --no-out");
    assert_eq!(o.status.code(), Some(64), "{o:?}");
}

#[test]
fn a_missing_nccl_fails_the_job_in_one_line() {
    let o = mpirun(
        2,
        "--baseline nccl --nccl-lib /nonexistent/libnccl.so.2 -b 1K -e 1K -n 1 -w 0 --no-out",
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let lines = error_lines(&o);
    assert_eq!(lines.len(), 1, "one rank speaks for all: {lines:?}");
    assert!(
        lines[0].contains("--nccl-lib /nonexistent/libnccl.so.2: no such file"),
        "{lines:?}"
    );
}

#[test]
fn a_host_that_cannot_run_nccl_says_why_before_any_data_moves() {
    // The stand-in loads; then tcpx-perf needs a GPU per endpoint (CI has none), or, on a
    // one-GPU host, refuses two endpoints on one GPU before NCCL does.
    let lib = fake_nccl(22803, "job");
    let o = mpirun(
        2,
        &format!(
            "--baseline nccl --nccl-lib {} -b 1K -e 1K -n 1 -w 0 --no-out --mem host",
            lib.display()
        ),
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let lines = error_lines(&o);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let known = [
        "has no CUDA driver or no visible GPU",
        "Duplicate GPU",
        "GPU(s) are visible",
        "NCCL's log",
    ];
    assert!(known.iter().any(|k| lines[0].contains(k)), "{lines:?}");
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("float"),
        "no row was measured"
    );
}
