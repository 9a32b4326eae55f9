//! The column sets of nccl-tests / rccl-tests tables (every version since 2.0) and of
//! tcpx-perf's stdout table, read from the column header line, and the rows they describe.
//!
//! Known layouts (peers.md §1.7; older versions from the outputs in `tests/fixtures/wild`):
//! - `size count type [redop] [root]` then, per placement (out-of-place, in-place),
//!   `time|cputime algbw busbw #wrong|error [i_min i_max i_p99 i_cv%]`, then `[timestamp]`;
//!   before 2.13 `#wrong` was `error`, the largest absolute error (`2e-07`), and tests without a
//!   reduction printed no `redop` (alltoall printed a blank one) and no `root`;
//! - tcpx-perf since issue 22: nccl-tests' columns with one block,
//!   `size count type redop root time algbw busbw #wrong t_min t_max t_p99 cv% t_med`;
//!   before: `size count type time algbw busbw #wrong t_min t_med t_p99 cv%`.

use super::{int, num};
use crate::error::ParseError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pre {
    Redop,
    Root,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Col {
    Time,
    Algbw,
    Busbw,
    /// `#wrong`: a count of wrong elements.
    Wrong,
    /// `error`: the largest absolute error (nccl-tests before 2.13).
    Error,
    /// A per-iteration statistic (`i_min`, `t_med`, `cv%`, ...): checked, kept out of the model.
    Stat,
}

/// The columns of one table, read from its header line.
#[derive(Debug, Clone, PartialEq)]
pub struct Columns {
    pre: Vec<Pre>,
    block: Vec<Col>,
    /// Placements printed (2 for nccl-tests, 1 for tcpx-perf).
    pub blocks: usize,
    timestamp: bool,
    /// tcpx-perf's layout (`t_med` columns).
    pub tcpx: bool,
}

/// What one row says about one placement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placed {
    pub time_us: f64,
    pub algbw: f64,
    pub busbw: f64,
    pub wrong: Option<f64>,
    pub max_error: Option<f64>,
}

/// One table row.
#[derive(Debug, Clone, PartialEq)]
pub struct RowValues {
    pub size: u64,
    pub dtype: String,
    pub redop: String,
    pub placed: Vec<Placed>,
}

/// Why a row could not be read: its shape (a row cut short by a crash looks like this) or a
/// value (always an error).
#[derive(Debug)]
pub enum RowError {
    Shape(String),
    Value(ParseError),
}

const EXPECTED: &str = "expected `size count type [redop] [root]`, then per placement \
`time|cputime algbw busbw #wrong|error [i_min i_max i_p99 i_cv%]`, then `[timestamp]` \
(nccl-tests/rccl-tests), or tcpx-perf's `size count type redop root time algbw busbw #wrong t_min t_max t_p99 cv% t_med` \
(before issue 22: `size count type time algbw busbw #wrong t_min t_med t_p99 cv%`)";

/// True when the tokens are a column header line (`size count ...` with a bandwidth column).
pub fn is_header(tokens: &[&str]) -> bool {
    tokens.len() >= 3 && tokens[0] == "size" && tokens[1] == "count" && tokens.contains(&"busbw")
}

impl Columns {
    /// Reads a header line's tokens (without the leading `#`).
    pub fn from_header(file: &str, line: usize, tokens: &[&str]) -> Result<Columns, ParseError> {
        let bad = |what: String| ParseError::new(file, Some(line), format!("column header: {what}; {EXPECTED}"));
        if tokens.get(2) != Some(&"type") {
            return Err(bad(format!("third column is {:?}", tokens.get(2).unwrap_or(&""))));
        }
        let mut i = 3;
        let mut pre = Vec::new();
        while let Some(p) = tokens.get(i).and_then(|t| match *t {
            "redop" => Some(Pre::Redop),
            "root" => Some(Pre::Root),
            _ => None,
        }) {
            pre.push(p);
            i += 1;
        }
        let mut cols = Vec::new();
        let mut timestamp = false;
        let mut tcpx = false;
        for (k, t) in tokens[i..].iter().enumerate() {
            let c = match *t {
                "time" | "cputime" => Col::Time,
                "algbw" => Col::Algbw,
                "busbw" => Col::Busbw,
                "#wrong" => Col::Wrong,
                "error" => Col::Error,
                "i_min" | "i_max" | "i_p99" | "i_cv%" => Col::Stat,
                "t_min" | "t_max" | "t_med" | "t_p99" | "cv%" => {
                    tcpx = true;
                    Col::Stat
                }
                "timestamp" if k + i == tokens.len() - 1 => {
                    timestamp = true;
                    continue;
                }
                other => return Err(bad(format!("unknown column `{other}`"))),
            };
            cols.push(c);
        }
        if cols.is_empty() {
            return Err(bad("no measurement columns".into()));
        }
        let first_len = cols[1..]
            .iter()
            .position(|c| *c == Col::Time)
            .map_or(cols.len(), |p| p + 1);
        let block: Vec<Col> = cols[..first_len].to_vec();
        let blocks = cols.len() / first_len.max(1);
        let ok = !block.is_empty()
            && block[0] == Col::Time
            && block.contains(&Col::Algbw)
            && block.contains(&Col::Busbw)
            && (blocks == 1 || blocks == 2)
            && cols.chunks(first_len).all(|c| c == block.as_slice());
        if !ok {
            return Err(bad(format!("columns `{}`", tokens[i..].join(" "))));
        }
        Ok(Columns {
            pre,
            block,
            blocks,
            timestamp,
            tcpx,
        })
    }

    fn width(&self) -> usize {
        3 + self.pre.len() + self.blocks * self.block.len() + if self.timestamp { 2 } else { 0 }
    }

    /// Reads one row's tokens.
    pub fn row(&self, file: &str, line: usize, tokens: &[&str]) -> Result<RowValues, RowError> {
        let value = |e: ParseError| RowError::Value(e);
        let want = self.width();
        // Old alltoall_perf printed an empty `redop` under its header: one token short, the
        // fourth token already a number.
        let blank_redop = self.pre.first() == Some(&Pre::Redop)
            && tokens.len() + 1 == want
            && tokens.get(3).is_some_and(|t| t.parse::<f64>().is_ok());
        if tokens.len() != want && !blank_redop {
            return Err(RowError::Shape(format!(
                "table row has {} fields, expected {want} (the header names {})",
                tokens.len(),
                self.describe()
            )));
        }
        let size = int(file, line, "size", tokens[0]).map_err(value)?;
        int(file, line, "count", tokens[1]).map_err(value)?;
        let dtype = tokens[2].to_string();
        if dtype.parse::<f64>().is_ok() {
            return Err(value(ParseError::new(
                file,
                Some(line),
                format!("type: {dtype:?} is a number, not a data type name"),
            )));
        }
        let mut k = 3;
        let mut redop = String::new();
        for p in &self.pre {
            match p {
                Pre::Redop if blank_redop => {}
                Pre::Redop => {
                    redop = tokens[k].to_string();
                    if redop.parse::<f64>().is_ok() {
                        return Err(value(ParseError::new(
                            file,
                            Some(line),
                            format!("redop: {redop:?} is a number, not an operation"),
                        )));
                    }
                    k += 1;
                }
                Pre::Root => {
                    tokens[k].parse::<i64>().map_err(|_| {
                        value(ParseError::new(
                            file,
                            Some(line),
                            format!("root: cannot parse {:?} as an integer", tokens[k]),
                        ))
                    })?;
                    k += 1;
                }
            }
        }
        let mut placed = Vec::with_capacity(self.blocks);
        for _ in 0..self.blocks {
            let mut p = Placed {
                time_us: 0.0,
                algbw: 0.0,
                busbw: 0.0,
                wrong: None,
                max_error: None,
            };
            for c in &self.block {
                let t = tokens[k];
                k += 1;
                let opt = |what: &str| -> Result<Option<f64>, RowError> {
                    match t {
                        "N/A" => Ok(None),
                        _ => num(file, line, what, t).map(Some).map_err(value),
                    }
                };
                match c {
                    Col::Time => p.time_us = num(file, line, "time (us)", t).map_err(value)?,
                    Col::Algbw => p.algbw = num(file, line, "algbw (GB/s)", t).map_err(value)?,
                    Col::Busbw => p.busbw = num(file, line, "busbw (GB/s)", t).map_err(value)?,
                    Col::Wrong => p.wrong = opt("#wrong")?,
                    Col::Error => p.max_error = opt("error")?,
                    Col::Stat => {
                        opt("per-iteration statistic")?;
                    }
                }
            }
            if p.time_us <= 0.0 {
                return Err(value(ParseError::new(file, Some(line), "time must be > 0")));
            }
            placed.push(p);
        }
        Ok(RowValues {
            size,
            dtype,
            redop,
            placed,
        })
    }

    fn describe(&self) -> String {
        let pre: Vec<&str> = self
            .pre
            .iter()
            .map(|p| match p {
                Pre::Redop => "redop",
                Pre::Root => "root",
            })
            .collect();
        format!(
            "size count type{}{} + {} x {} columns{}",
            if pre.is_empty() { "" } else { " " },
            pre.join(" "),
            self.blocks,
            self.block.len(),
            if self.timestamp { " + timestamp" } else { "" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(h: &str) -> Result<Columns, ParseError> {
        Columns::from_header("f", 1, &h.split_whitespace().collect::<Vec<_>>())
    }

    fn row(c: &Columns, r: &str) -> Result<RowValues, RowError> {
        c.row("f", 2, &r.split_whitespace().collect::<Vec<_>>())
    }

    #[test]
    fn layouts() {
        let new = cols("size count type redop root time algbw busbw #wrong time algbw busbw #wrong").unwrap();
        let r = row(&new, "256 64 float sum -1 34.24 0.01 0.02 0 33.65 0.01 0.01 N/A").unwrap();
        assert_eq!((r.size, r.placed[0].time_us, r.placed[0].busbw), (256, 34.24, 0.02));
        assert_eq!((r.placed[0].wrong, r.placed[1].wrong), (Some(0.0), None));
        let old = cols("size count type redop time algbw busbw error time algbw busbw error").unwrap();
        let r = row(&old, "8 2 float sum 61.03 0.00 0.00 2e-07 61.04 0.00 0.00 1e-07").unwrap();
        assert_eq!((r.placed[0].max_error, r.placed[0].wrong), (Some(2e-7), None));
        // A blank redop (old alltoall_perf) is one token short with a number in 4th place.
        let r = row(&old, "8 2 float 61.03 0.00 0.00 2e-07 61.04 0.00 0.00 1e-07").unwrap();
        assert_eq!((r.redop.as_str(), r.placed[1].time_us), ("", 61.04));
        // One token short anywhere else is a cut row.
        assert!(matches!(
            row(&old, "8 2 float sum 61.03 0.00 0.00 2e-07 61.04 0.00 0.00"),
            Err(RowError::Shape(_))
        ));
        let ts = cols("size count type redop root time algbw busbw #wrong time algbw busbw #wrong timestamp").unwrap();
        let r = row(
            &ts,
            "8 2 float sum -1 5.0 0.00 0.00 0 5.1 0.00 0.00 0 2025-01-02 03:04:05",
        )
        .unwrap();
        assert_eq!(r.placed[1].time_us, 5.1);
        let t = cols("size count type time algbw busbw #wrong t_min t_med t_p99 cv%").unwrap();
        assert!(t.tcpx && t.blocks == 1);
        // tcpx-perf since issue 22: nccl-tests' first nine columns, then -I's positions and t_med.
        let t = cols("size count type redop root time algbw busbw #wrong t_min t_max t_p99 cv% t_med").unwrap();
        assert!(t.tcpx && t.blocks == 1);
        let r = row(
            &t,
            "1048576 262144 float none -1 400.77 2.62 2.61 N/A 395.10 693.25 693.25 15.53 450.30",
        )
        .unwrap();
        assert_eq!(
            (r.redop.as_str(), r.placed[0].busbw, r.placed[0].wrong),
            ("none", 2.61, None)
        );
        let e = cols("size count type redop time algbw busbw frobs time algbw busbw error").unwrap_err();
        assert!(e.msg.contains("unknown column `frobs`"), "{e}");
        let e = cols("size count type time algbw busbw #wrong time algbw").unwrap_err();
        assert!(e.msg.contains("columns `time algbw busbw #wrong time algbw`"), "{e}");
        assert!(matches!(
            row(&new, "256 64 7 sum -1 34.24 0.01 0.02 0 33.65 0.01 0.01 0"),
            Err(RowError::Value(_))
        ));
    }
}
