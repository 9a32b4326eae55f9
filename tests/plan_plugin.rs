//! `--plan --plugin X` plans the plugin X is: it opens X as a run would and reads its table's
//! name without `init` (issue 55: GKE's path to the real TCPX plugin was planned as tcpx-emu).
//! The real tcpx-emu, a copy of it under TCPX's file name, a library built here whose table
//! names itself GPUDirectTCPX (every entry aborts: calling one would kill the plan), a library
//! without a plugin table, a file that is no library, and a missing path.

mod common;

use common::{output_within, show};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_tcpx-perf");

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tcpx-plan-plugin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch");
    dir
}

/// Builds `source` (C) into a shared library at `dir/name` with the system's cc.
fn cc(dir: &Path, name: &str, source: &str) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, source).expect("source");
    let so = dir.join(name);
    let o = output_within(
        Command::new("cc").args(["-shared", "-fPIC", "-o"]).arg(&so).arg(&c),
        Duration::from_secs(60),
        "cc",
    );
    assert!(o.status.success(), "cc: {}", show(&o));
    so
}

/// The plan's header line and its notes, and the exit status.
fn plan(plugin: &Path) -> (Option<i32>, String) {
    let o = output_within(
        Command::new(BIN)
            .args(["--plan", "2x8x4", "--mem", "host", "--plugin"])
            .arg(plugin),
        Duration::from_secs(60),
        "tcpx-perf --plan",
    );
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(stdout.starts_with("# tcpx-perf --plan 2x8x4"), "{}", show(&o));
    (o.status.code(), stdout)
}

/// The model named in the header (`..., --mem host, MODEL (helper threads ...)`) and the note
/// about `--plugin`.
fn model_and_note(stdout: &str) -> (String, String) {
    let header = stdout.lines().next().unwrap_or_default();
    let model = header
        .split_once("--mem host, ")
        .and_then(|(_, m)| m.split(" (helper threads").next())
        .unwrap_or_default()
        .to_string();
    let note = stdout
        .lines()
        .find(|l| l.starts_with("# note: --plugin "))
        .unwrap_or_default()
        .to_string();
    (model, note)
}

#[test]
fn plan_names_the_plugin_it_opened_or_plans_unknown() {
    let dir = scratch();
    let emu = Path::new(BIN).with_file_name("libnccl_net_tcpxemu_v7.so");
    assert!(emu.exists(), "{} is built with the workspace", emu.display());
    let renamed = dir.join("libnccl-net.so");
    std::fs::copy(&emu, &renamed).expect("copy");
    let tcpx = cc(
        &dir,
        "libnccl-net-fake-tcpx.so",
        "#include <stdlib.h>\n\
         static int never(void) { abort(); return 0; }\n\
         struct table { const char *name; int (*entry[31])(void); };\n\
         struct table ncclNetPlugin_v7 = { \"GPUDirectTCPX_v7\", { [0 ... 30] = never } };\n",
    );
    let no_table = cc(&dir, "libnothing.so", "int unrelated = 1;\n");
    let not_a_library = dir.join("libnotalib.so");
    std::fs::write(&not_a_library, "this is text, not ELF\n").expect("text");
    let missing = dir.join("missing/libnccl-net.so");

    for (plugin, model, said) in [
        (
            emu.as_path(),
            "tcpx-emu",
            "names itself 'tcpx-emu_v7' (ncclNetPlugin_v7): planned as tcpx-emu",
        ),
        (
            &renamed,
            "tcpx-emu",
            "names itself 'tcpx-emu_v7' (ncclNetPlugin_v7): planned as tcpx-emu",
        ),
        (
            &tcpx,
            "GPUDirect-TCPX",
            "names itself 'GPUDirectTCPX_v7' (ncclNetPlugin_v7): planned as GPUDirect-TCPX",
        ),
        (&no_table, "unknown", "is not an NCCL net plugin"),
        (&not_a_library, "unknown", "not opened (cannot load net plugin"),
        (&missing, "unknown", "not opened (cannot load net plugin"),
    ] {
        let (code, stdout) = plan(plugin);
        assert!(matches!(code, Some(0 | 1)), "{}: {code:?}\n{stdout}", plugin.display());
        let (got, note) = model_and_note(&stdout);
        assert_eq!(got, model, "{}:\n{stdout}", plugin.display());
        assert!(
            note.starts_with(&format!("# note: --plugin {}", plugin.display())) && note.contains(said),
            "{}: {note}\n{stdout}",
            plugin.display()
        );
        if model == "unknown" {
            assert!(note.contains("planned as unknown"), "{note}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
