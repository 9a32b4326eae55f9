//! Connection setup: [`Plugin::listen`] and [`Plugin::connect`], the [`ListenComm`] that accepts
//! and the [`PendingConnect`] that completes, both retried until the plugin returns a comm (v5+
//! setup is non-blocking) and both keeping what the plugin writes through at a fixed address.

use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nccl_net_abi as abi;

use super::{Core, DevSlot, Kind, NetHandle, RecvComm, SendComm};
use crate::error::NetError;
use crate::loader::Plugin;
use crate::logger;

/// A listening endpoint; [`Plugin::listen`] returns it with the handle to give the peer.
pub struct ListenComm {
    plugin: Arc<Plugin>,
    comm: *mut c_void,
    peer: String,
    /// The device-handle slot of the accept in progress (kept across retries).
    pending: Option<Box<DevSlot>>,
}

// SAFETY: as for the comms: the listen comm is only used through `&mut self`.
unsafe impl Send for ListenComm {}

impl ListenComm {
    /// One non-blocking accept attempt: `Ok(None)` until the peer's connect arrives.
    ///
    /// TCPX keeps per-accept state in the listen comm and never resets it: accept one connection
    /// per listen comm with it.
    pub fn poll_accept(&mut self) -> Result<Option<RecvComm>, NetError> {
        let slot = self.pending.get_or_insert_with(DevSlot::new);
        let mut rc_comm: *mut c_void = std::ptr::null_mut();
        // SAFETY: the listen comm is open; `slot.ptr` points to the slot's own handle, and the slot
        // lives in a Box that is never freed while the plugin may still use it.
        let rc = unsafe { self.plugin.table.accept(self.comm, &mut rc_comm, &raw mut slot.ptr) };
        if rc != abi::NCCL_SUCCESS {
            return Err(NetError::call("accept", rc, &self.peer, ""));
        }
        if rc_comm.is_null() {
            return Ok(None);
        }
        let Some(mut slot) = self.pending.take() else {
            return Err(NetError::Usage("accept: lost its device-handle slot".into()));
        };
        slot.settle();
        Ok(Some(RecvComm {
            core: Core::new(self.plugin.clone(), rc_comm, Kind::Recv, self.peer.clone(), slot),
        }))
    }

    /// Accepts, polling until `deadline`; [`NetError::Timeout`] names the peer.
    pub fn accept(&mut self, deadline: Instant) -> Result<RecvComm, NetError> {
        let start = Instant::now();
        let mut backoff = Backoff::default();
        loop {
            if let Some(c) = self.poll_accept()? {
                return Ok(c);
            }
            if Instant::now() >= deadline {
                return Err(NetError::Timeout {
                    what: "accept",
                    peer: self.peer.clone(),
                    waited: start.elapsed(),
                });
            }
            backoff.wait(deadline);
        }
    }

    /// The peer label given at listen time.
    pub fn peer(&self) -> &str {
        &self.peer
    }
}

impl Drop for ListenComm {
    fn drop(&mut self) {
        // An accept in progress may have handed the plugin a pointer into its slot: leak the slot
        // (a few dozen bytes) rather than free memory a plugin thread might still write.
        if let Some(slot) = self.pending.take() {
            Box::leak(slot);
        }
        // SAFETY: the listen comm is open and closed exactly once.
        let rc = unsafe { self.plugin.table.close_listen(self.comm) };
        if rc != abi::NCCL_SUCCESS {
            logger::local_warn(format_args!(
                "closeListen ({}) failed: {} ({rc})",
                self.peer,
                abi::result_name(rc)
            ));
        }
    }
}

/// A connect in progress. Owns the handle at a fixed address across retries.
///
/// Dropping it before completion closes nothing (there is no comm yet). Plugin-side state of the
/// attempt (TCPX: a detached thread and its arguments, reached through the handle) is leaked, as it
/// is in NCCL; the handle and device-handle slot are leaked too, since that thread may still use them.
pub struct PendingConnect {
    plugin: Arc<Plugin>,
    /// `None` when the device index does not fit an `int`: reported by the first poll.
    dev: Option<c_int>,
    handle: Option<Box<NetHandle>>,
    slot: Option<Box<DevSlot>>,
    peer: String,
    started: Instant,
}

// SAFETY: as for the comms: only used through `&mut self`/`self`.
unsafe impl Send for PendingConnect {}

impl PendingConnect {
    /// One non-blocking connect attempt: `Ok(Some)` once connected; then the value is spent.
    pub fn poll(&mut self) -> Result<Option<SendComm>, NetError> {
        let (Some(handle), Some(slot)) = (self.handle.as_mut(), self.slot.as_mut()) else {
            return Err(NetError::Usage(format!("connect to {} already completed", self.peer)));
        };
        let Some(dev) = self.dev else {
            return Err(NetError::Usage(format!(
                "connect to {}: device index out of range",
                self.peer
            )));
        };
        let mut sc: *mut c_void = std::ptr::null_mut();
        // SAFETY: the handle box stays at one address across retries; the slot (config and
        // device-handle) lives as long as the resulting comm.
        let rc = unsafe {
            self.plugin.table.connect(
                self.plugin.ctx,
                dev,
                &raw mut slot.config,
                handle.as_mut_ptr().cast(),
                &mut sc,
                &raw mut slot.ptr,
            )
        };
        if rc != abi::NCCL_SUCCESS {
            return Err(NetError::call(
                "connect",
                rc,
                &self.peer,
                format!("after {:.3} s", self.started.elapsed().as_secs_f64()),
            ));
        }
        if sc.is_null() {
            return Ok(None);
        }
        self.handle = None; // the plugin is done with it
        let Some(mut slot) = self.slot.take() else {
            return Err(NetError::Usage("connect: lost its device-handle slot".into()));
        };
        slot.settle();
        Ok(Some(SendComm {
            core: Core::new(self.plugin.clone(), sc, Kind::Send, self.peer.clone(), slot),
        }))
    }

    /// Connects, polling until `deadline`; [`NetError::Timeout`] names the peer.
    pub fn wait(mut self, deadline: Instant) -> Result<SendComm, NetError> {
        let mut backoff = Backoff::default();
        loop {
            if let Some(c) = self.poll()? {
                return Ok(c);
            }
            if Instant::now() >= deadline {
                return Err(NetError::Timeout {
                    what: "connect",
                    peer: self.peer.clone(),
                    waited: self.started.elapsed(),
                });
            }
            backoff.wait(deadline);
        }
    }

    /// The peer label.
    pub fn peer(&self) -> &str {
        &self.peer
    }
}

impl Drop for PendingConnect {
    fn drop(&mut self) {
        // Not completed: see the type's documentation for why these are leaked.
        if let Some(h) = self.handle.take() {
            Box::leak(h);
        }
        if let Some(s) = self.slot.take() {
            Box::leak(s);
        }
    }
}

/// Polling pace for connect/accept: yield for the first few misses (loopback connects finish in
/// microseconds), then sleep 1 ms (real plugins take 100s of ms), never past the deadline.
#[derive(Default)]
struct Backoff {
    misses: u32,
}

impl Backoff {
    fn wait(&mut self, deadline: Instant) {
        self.misses += 1;
        if self.misses < 64 {
            std::thread::yield_now();
        } else {
            let left = deadline.saturating_duration_since(Instant::now());
            std::thread::sleep(left.min(Duration::from_millis(1)));
        }
    }
}

impl Plugin {
    /// Opens a listening endpoint on device `dev`. Returns the listen comm and the handle to send to
    /// the peer. `peer` labels errors, e.g. `"rank 3 gpu 0 (host-b)"`.
    pub fn listen(self: &Arc<Self>, dev: usize, peer: &str) -> Result<(ListenComm, NetHandle), NetError> {
        let d = self.dev_index(dev)?;
        let mut handle: NetHandle = [0; abi::NET_HANDLE_MAXSIZE];
        let mut lc: *mut c_void = std::ptr::null_mut();
        // SAFETY: the plugin is initialised; `handle` is 128 writable bytes; ctx is the v11 context.
        let rc = unsafe { self.table.listen(self.ctx, d, handle.as_mut_ptr().cast(), &mut lc) };
        if rc != abi::NCCL_SUCCESS {
            return Err(NetError::call("listen", rc, peer, format!("device {dev}")));
        }
        if lc.is_null() {
            return Err(NetError::call(
                "listen",
                abi::NCCL_INTERNAL_ERROR,
                peer,
                "plugin returned success but no listen comm",
            ));
        }
        Ok((
            ListenComm {
                plugin: self.clone(),
                comm: lc,
                peer: peer.to_owned(),
                pending: None,
            },
            handle,
        ))
    }

    /// Starts connecting to the listener that produced `handle`. Nothing is called yet: drive the
    /// result with [`PendingConnect::poll`] or [`PendingConnect::wait`].
    pub fn connect(self: &Arc<Self>, dev: usize, handle: NetHandle, peer: &str) -> PendingConnect {
        PendingConnect {
            plugin: self.clone(),
            dev: c_int::try_from(dev).ok(),
            handle: Some(Box::new(handle)),
            slot: Some(DevSlot::new()),
            peer: peer.to_owned(),
            started: Instant::now(),
        }
    }
}
