//! Safe layer over NCCL net plugins (`ncclNet_v7` .. `ncclNet_v12`), such as Google's
//! GPUDirect-TCPX `libnccl-net-tcpx.so`: one Rust API over every ABI version.
//!
//! ```text
//! let plugin = Plugin::open(&PluginSource::Path(path), &OpenOptions::default())?;
//! // receiver                                   // sender (handle shipped out of band)
//! let (mut lc, handle) = plugin.listen(0, "rank 1")?;   let sc = plugin.connect(0, handle, "rank 0").wait(deadline)?;
//! let mut rc = lc.accept(deadline)?;
//! let mr = unsafe { rc.register(buf, len, MemType::Host) }?;
//! let req = unsafe { rc.irecv(mr, buf, len, 0) }?;      // Ok(None): retry later
//! match rc.test(req)? { Poll::Done { recv: Some(d), .. } => rc.consume(d)?, Poll::Pending(r) => .., _ => .. }
//! ```
//!
//! Modules:
//! - [`loader`]: finding the library (NCCL's name rules), probing `ncclNetPlugin_v12..v7`, `init`;
//! - `table` (internal): the per-version function tables and the per-call conversions;
//! - [`props`]: device properties normalised over the versions' layouts;
//! - [`comm`]: listen/connect/accept, registration, isend/irecv/test/consume, counters;
//! - [`logger`]: the C-variadic logger plugins require (a C shim) and the plugin's last warnings;
//! - [`error`]: [`NetError`], worded for the person running the benchmark.
//!
//! Guarantees checked by the compiler (these snippets must not compile):
//!
//! A comm is driven by one thread at a time (`Send`, not `Sync`):
//! ```compile_fail
//! fn is_sync<T: Sync>() {}
//! is_sync::<nccl_net::SendComm>();
//! ```
//! A request cannot be tested twice (not `Clone`, consumed by `test`):
//! ```compile_fail
//! fn again(c: &mut nccl_net::SendComm, r: nccl_net::Request) {
//!     let _ = c.test(r);
//!     let _ = c.test(r);
//! }
//! ```

pub use nccl_net_abi as abi;

pub mod comm;
pub mod error;
pub mod loader;
pub mod logger;
pub mod props;
mod table;

pub use comm::{
    CommCounters, ListenComm, MemType, MrId, NetHandle, PendingConnect, Poll, RecvComm, RecvDone, Registrar, Request,
    SendComm,
};
pub use error::NetError;
pub use loader::{OpenOptions, Plugin, PluginSource};
pub use logger::LogLevel;
pub use props::Properties;

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}
    fn assert_send<T: Send>() {}

    #[test]
    fn thread_safety_is_as_documented() {
        assert_send_sync::<Plugin>();
        assert_send::<SendComm>();
        assert_send::<RecvComm>();
        assert_send::<ListenComm>();
        assert_send::<PendingConnect>();
        assert_send::<Request>();
    }
}
