//! [`NetError`]: every failure of this crate, worded for the person running the benchmark.
//!
//! Each message says what failed, against which peer, and what to do about it where that is known
//! (a wrong plugin path, a missing symbol). Plugin call failures carry the NCCL result code and the
//! plugin's last WARN line, which is usually the only real explanation a plugin gives.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use nccl_net_abi as abi;

/// An error from loading or driving a net plugin.
#[derive(Debug)]
pub enum NetError {
    /// The library could not be loaded (`dlopen` failed, or the table it exports is unusable).
    Open {
        /// The file or name that was tried (the first candidate when several were).
        path: PathBuf,
        /// `dlerror()`'s text, or what is wrong with the table.
        reason: String,
    },
    /// The library loaded but exports no usable `ncclNetPlugin_vN` symbol.
    MissingSymbol {
        /// The library (as resolved by the dynamic loader when known).
        path: PathBuf,
        /// The version asked for with `OpenOptions::force_abi`, if any.
        wanted: Option<u32>,
        /// The versions whose symbol the library does export.
        found: Vec<u32>,
    },
    /// A plugin entry point returned a non-success `ncclResult_t`, or an impossible result.
    Call {
        /// The entry point: "init", "listen", "isend", ...
        call: &'static str,
        /// The `ncclResult_t`.
        code: i32,
        /// Who the comm talks to (empty for calls that concern no peer).
        peer: String,
        /// More context, including the plugin's last WARN message if any.
        detail: String,
    },
    /// A connect/accept (or any wait) did not finish before its deadline.
    Timeout {
        /// What was waited for: "connect", "accept", ...
        what: &'static str,
        /// Who the comm talks to.
        peer: String,
        /// How long it was waited for.
        waited: Duration,
    },
    /// The caller broke a rule of this API (sizes the ABI cannot express, out-of-order consume,
    /// a request or memory registration from another comm, ...). The plugin was not called.
    Usage(String),
}

impl NetError {
    /// The `ncclResult_t` of a failed plugin call, if this is one.
    pub fn code(&self) -> Option<i32> {
        match self {
            NetError::Call { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// A failed call, with the plugin's last warning attached to `detail` when there is one.
    /// Cold path: allocating here is fine.
    #[cold]
    pub(crate) fn call(call: &'static str, code: i32, peer: &str, detail: impl Into<String>) -> NetError {
        let mut detail = detail.into();
        if let Some(w) = crate::logger::last_warning() {
            if !detail.is_empty() {
                detail.push_str("; ");
            }
            detail.push_str(&w);
        }
        NetError::Call {
            call,
            code,
            peer: peer.to_owned(),
            detail,
        }
    }
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetError::Open { path, reason } => write!(
                f,
                "cannot load net plugin '{}': {}; check --plugin / NCCL_NET_PLUGIN",
                path.display(),
                reason
            ),
            NetError::MissingSymbol { path, wanted: None, .. } => write!(
                f,
                "'{}' is not an NCCL net plugin: none of ncclNetPlugin_v12..v7 found (a wrong file?)",
                path.display()
            ),
            NetError::MissingSymbol {
                path,
                wanted: Some(v),
                found,
            } => {
                write!(
                    f,
                    "'{}' does not export ncclNetPlugin_v{v} (forced ABI v{v}); ",
                    path.display()
                )?;
                if found.is_empty() {
                    write!(
                        f,
                        "it exports none of ncclNetPlugin_v12..v7: not an NCCL net plugin (a wrong file?)"
                    )
                } else {
                    let list: Vec<String> = found.iter().map(|v| format!("ncclNetPlugin_v{v}")).collect();
                    write!(
                        f,
                        "it exports {}: force one of those or drop the forced ABI",
                        list.join(", ")
                    )
                }
            }
            NetError::Call {
                call,
                code,
                peer,
                detail,
            } => {
                write!(f, "{call} failed: {} ({code})", abi::result_name(*code))?;
                if !peer.is_empty() {
                    write!(f, " [peer {peer}]")?;
                }
                if !detail.is_empty() {
                    write!(f, ": {detail}")?;
                }
                Ok(())
            }
            NetError::Timeout { what, peer, waited } => write!(
                f,
                "{what} with {peer} timed out after {:.1} s (is the peer alive and calling its side?)",
                waited.as_secs_f64()
            ),
            NetError::Usage(msg) => write!(f, "net plugin misuse: {msg}"),
        }
    }
}

impl std::error::Error for NetError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_display_matches_the_documented_shape() {
        let e = NetError::Call {
            call: "isend",
            code: 3,
            peer: "rank 1 gpu 0".into(),
            detail: "plugin's last WARN: x.rs:1: boom".into(),
        };
        assert_eq!(
            e.to_string(),
            "isend failed: ncclInternalError (3) [peer rank 1 gpu 0]: plugin's last WARN: x.rs:1: boom"
        );
    }

    #[test]
    fn missing_symbol_lists_what_exists() {
        let e = NetError::MissingSymbol {
            path: "/p.so".into(),
            wanted: Some(9),
            found: vec![7],
        };
        let s = e.to_string();
        assert!(
            s.contains("ncclNetPlugin_v9") && s.contains("exports ncclNetPlugin_v7"),
            "{s}"
        );
    }
}
