//! The files tcpx-analyze reads, by docs/files.md's rules ([`tcpx_files::read`]): every input is
//! a regular file, opened without blocking and read within the bound of its kind, and remembered
//! as an input of the command, so that no output of the command replaces it. Below every layer
//! that reads (`validate`, `parse`, `baseline`, `history`).

use crate::error::Failure;
use std::path::{Path, PathBuf};
use tcpx_files::Bound;

/// The files that make a tcpx-perf result directory's content (the pictures are derived).
pub const RUN_FILES: [&str; 6] = [
    "summary.json",
    "results.csv",
    "samples.csv",
    "rank_samples.csv",
    "pairs.csv",
    "nccl_samples.csv",
];

/// True when the path looks like a baseline file (`.toml`).
pub fn is_baseline_path(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "toml")
}

/// How large a file of `path`'s kind may be ([`Bound`]), by its name: a result directory's files,
/// a baseline (.toml), else a log or JSON input.
pub fn bound_for(path: &Path) -> Bound {
    match path.file_name().and_then(|n| n.to_str()) {
        Some("summary.json") => Bound::SUMMARY_JSON,
        Some("results.csv") => Bound::RESULTS_CSV,
        _ if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv")) => Bound::DATA_CSV,
        _ if is_baseline_path(path) => Bound::BASELINE,
        _ => Bound::LOG,
    }
}

/// Reads an input file (every file tcpx-analyze reads comes through here or [`read_text`]): a
/// regular file, opened without blocking, within [`bound_for`] its kind; remembered as an input.
/// One line naming the file otherwise.
pub fn read_bytes(path: &Path) -> Result<Vec<u8>, Failure> {
    tcpx_files::read_input(path, bound_for(path)).map_err(|e| Failure::Input(e.to_string()))
}

/// [`read_bytes`] as UTF-8 text.
pub fn read_text(path: &Path) -> Result<String, Failure> {
    tcpx_files::read_input_text(path, bound_for(path)).map_err(|e| Failure::Input(e.to_string()))
}

/// Remembers the files `paths` name as this command's inputs before any is read
/// ([`tcpx_files::note_input`]): each file, and a result directory's files ([`RUN_FILES`]) or
/// those of the result directories in a directory. An output claimed afterwards at one of them
/// is refused, whatever the command reads first.
pub fn note_inputs(paths: &[PathBuf]) {
    let note_dir = |d: &Path| {
        for f in RUN_FILES {
            tcpx_files::note_input(&d.join(f));
        }
    };
    for p in paths {
        if p.is_dir() {
            note_dir(p);
            for sub in std::fs::read_dir(p).into_iter().flatten().flatten() {
                if sub.file_type().is_ok_and(|t| t.is_dir()) {
                    note_dir(&sub.path());
                }
            }
        } else {
            tcpx_files::note_input(p);
        }
    }
}
