//! Turns a pasted or captured log into the lines nccl-tests printed: line numbers are kept,
//! carriage returns, markdown code fences and launcher prefixes are removed.
//!
//! Launcher prefixes seen in the wild:
//! - Open MPI `--tag-output`: `[1,0]<stdout>:` (also `<stderr>`, `<stddiag>`), with
//!   `--timestamp-output` a date before it;
//! - Slurm `srun --label`: ` 0: ` (the task number, right-aligned);
//! - pdsh / clush: `host: `. A host name cannot be told from other `word: ` text, so this one is
//!   stripped only when the file shows it in front of an nccl-tests header line.

/// One line of the input as the benchmark printed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line<'a> {
    /// 1-based line number in the file.
    pub no: usize,
    /// The text without launcher prefix, trimmed.
    pub text: &'a str,
}

/// The Open MPI `--tag-output` tag: `[JOB,RANK]<stdout>:`, optionally preceded by a
/// `--timestamp-output` date. Returns the rest of the line.
fn strip_open_mpi(line: &str) -> Option<&str> {
    for tag in ["]<stdout>:", "]<stderr>:", "]<stddiag>:"] {
        if let Some(end) = line.find(tag) {
            let open = line[..end].rfind('[')?;
            let (job, rank) = line[open + 1..end].split_once(',')?;
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            if digits(job) && digits(rank) {
                return Some(&line[end + tag.len()..]);
            }
        }
    }
    None
}

/// `srun --label`: optional spaces, the task number, `: `.
fn strip_srun(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let n = t.bytes().take_while(u8::is_ascii_digit).count();
    if n > 0 && t[n..].starts_with(": ") {
        Some(&t[n + 2..])
    } else {
        None
    }
}

/// pdsh/clush: a host name (letters, digits, `.`, `-`, `_`) then `: `.
fn strip_host(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let n = t
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        .count();
    if n > 0 && t[n..].starts_with(": ") {
        Some(&t[n + 2..])
    } else {
        None
    }
}

/// True for the lines that open an nccl-tests (or tcpx-perf) output, used to recognise a
/// pdsh-style host prefix.
fn is_anchor(rest: &str) -> bool {
    let b = rest.trim_start().trim_start_matches('#').trim_start();
    b.starts_with("nThread ")
        || b.starts_with("Collective test starting")
        || (b.starts_with("size ") && b.contains("busbw"))
}

/// Splits `text` into benchmark lines (see the module documentation).
pub fn logical_lines(text: &str) -> Vec<Line<'_>> {
    let raw: Vec<&str> = text.lines().map(|l| l.trim_end_matches('\r')).collect();
    let host_prefix = raw
        .iter()
        .any(|l| strip_open_mpi(l).is_none() && strip_srun(l).is_none() && strip_host(l).is_some_and(is_anchor));
    let mut out = Vec::with_capacity(raw.len());
    for (i, l) in raw.iter().enumerate() {
        let rest = strip_open_mpi(l)
            .or_else(|| strip_srun(l))
            .or_else(|| if host_prefix { strip_host(l) } else { None })
            .unwrap_or(l);
        let text = rest.trim();
        if text.starts_with("```") {
            continue;
        }
        out.push(Line { no: i + 1, text });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(s: &str) -> Vec<&str> {
        logical_lines(s).into_iter().map(|l| l.text).collect()
    }

    #[test]
    fn prefixes() {
        assert_eq!(texts("[1,0]<stdout>:# x\n[1,12]<stderr>:  y"), ["# x", "y"]);
        assert_eq!(texts("Thu Mar 28 13:42:53 2024[1,0]<stdout>:  8  2"), ["8  2"]);
        assert_eq!(texts(" 0: #  size\n12:   8   2"), ["#  size", "8   2"]);
        // A `word: ` prefix is stripped only when it stands before a header line.
        assert_eq!(texts("Warning: x\nhost: y"), ["Warning: x", "host: y"]);
        assert_eq!(
            texts("node-1: # nThread 1\nnode-1: 8 2\nhost:12:34 [0] NCCL INFO"),
            ["# nThread 1", "8 2", "host:12:34 [0] NCCL INFO"]
        );
        // Not a tag: the part in brackets is not `job,rank`.
        assert_eq!(texts("[a,0]<stdout>:x"), ["[a,0]<stdout>:x"]);
        // Code fences are dropped, line numbers kept.
        let l = logical_lines("```txt\n# a\n```\r\n");
        assert_eq!(l, [Line { no: 2, text: "# a" }]);
    }
}
