//! The v7-only build exports exactly what TCPX's `libnccl-net-tcpx.so` exports: the data symbol
//! `ncclNetPlugin_v7` and nothing else, so every loader (NCCL, tcpx-perf's `nccl-net`) drives it
//! through the v7 ABI (`int` sizes, no sizes from `test`), as it would drive TCPX.

use std::path::PathBuf;
use std::process::Command;

use nccl_net::{OpenOptions, Plugin, PluginSource};

/// `libnccl_net_tcpxemu_v7.so` as cargo built it for this test: in `<target>/<profile>/deps`
/// (next to the test binary), or uplifted to `<target>/<profile>` by `cargo build`.
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary lives in <target>/<profile>/deps");
    let candidates = [deps.to_path_buf(), deps.parent().unwrap_or(deps).to_path_buf()];
    candidates
        .iter()
        .map(|d| d.join("libnccl_net_tcpxemu_v7.so"))
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!("libnccl_net_tcpxemu_v7.so not found in {candidates:?}: run cargo test -p tcpx-emu-v7")
        })
}

#[test]
fn only_the_v7_table_is_exported() {
    let lib = library();
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("run nm (binutils)");
    assert!(
        out.status.success(),
        "nm failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let symbols: Vec<&str> = text.lines().filter_map(|l| l.split_whitespace().nth(2)).collect();
    assert_eq!(
        symbols,
        ["ncclNetPlugin_v7"],
        "nm -D --defined-only {}:\n{text}",
        lib.display()
    );
}

#[test]
fn loaders_pick_v7_and_strict_contracts_hold() {
    // Strict mode (the default) refuses an init without NCCL_DYNAMIC_CHUNK_SIZE (TCPX contract
    // #13); this is the only test in this binary that loads the plugin.
    std::env::set_var("NCCL_DYNAMIC_CHUNK_SIZE", "524288");
    let p = Plugin::open(&PluginSource::Path(library()), &OpenOptions::default()).expect("open");
    assert_eq!(p.abi(), 7, "probing v12..v7 must find only v7");
    assert_eq!(p.name(), "tcpx-emu_v7");
    assert!(Plugin::open(
        &PluginSource::Path(library()),
        &OpenOptions {
            force_abi: Some(8),
            ..Default::default()
        }
    )
    .is_err());
}
