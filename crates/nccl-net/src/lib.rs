//! Safe layer over NCCL net plugins (`ncclNet_v7` .. `ncclNet_v12`), such as Google's
//! GPUDirect-TCPX `libnccl-net-tcpx.so`: one Rust API over every ABI version.
//!
//! One message over a plugin, both ends in one process (a real job puts them in two ranks and
//! ships the handle between them, e.g. over MPI). Compiled, not run here: it needs a plugin file.
//!
//! ```no_run
//! use nccl_net::{MemType, NetError, OpenOptions, Plugin, PluginSource, Poll};
//! use std::time::{Duration, Instant};
//!
//! fn one_message(path: &str) -> Result<(), NetError> {
//!     let plugin = Plugin::open(&PluginSource::Path(path.into()), &OpenOptions::default())?;
//!     let deadline = Instant::now() + Duration::from_secs(10);
//!     let (mut listen, handle) = plugin.listen(0, "receiver")?;
//!     // Both sides of the setup must make progress at once: connect in a thread.
//!     let p = plugin.clone();
//!     let sender = std::thread::spawn(move || p.connect(0, handle, "sender").wait(deadline));
//!     let mut recv = listen.accept(deadline)?;
//!     let mut send = sender.join().expect("connect thread")?;
//!     let (mut src, mut dst) = (vec![7u8; 1 << 20], vec![0u8; 1 << 20]);
//!     // SAFETY: the buffers outlive their registrations and every request on them.
//!     let (smr, rmr) = unsafe {
//!         (send.register(src.as_mut_ptr(), src.len(), MemType::Host)?,
//!          recv.register(dst.as_mut_ptr(), dst.len(), MemType::Host)?)
//!     };
//!     // `Ok(None)`: the plugin cannot take the request yet; post it again later.
//!     let mut rreq = None;
//!     while rreq.is_none() { rreq = unsafe { recv.irecv(rmr, dst.as_mut_ptr(), dst.len(), 0)? }; }
//!     let mut sreq = None;
//!     while sreq.is_none() { sreq = unsafe { send.isend(smr, src.as_ptr(), src.len(), 0)? }; }
//!     let (mut sreq, mut rreq) = (sreq, rreq);
//!     while sreq.is_some() || rreq.is_some() {
//!         // Progress happens inside `test` (TCPX): keep testing both ends.
//!         if let Some(r) = sreq.take() {
//!             if let Poll::Pending(r) = send.test(r)? { sreq = Some(r); }
//!         }
//!         if let Some(r) = rreq.take() {
//!             match recv.test(r)? {
//!                 Poll::Pending(r) => rreq = Some(r),
//!                 Poll::Done { recv: Some(done), .. } => recv.consume(done)?, // irecvConsumed
//!                 Poll::Done { .. } => {}
//!             }
//!         }
//!     }
//!     assert_eq!(src, dst);
//!     Ok(())
//! }
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
pub use loader::{Identity, OpenOptions, Plugin, PluginSource};
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
