//! What serves a comm besides its caller: the helper-thread model taken at the first transfer
//! (per-socket threads or the shared event loops, [`crate::threads`]), and the CUDA-only
//! resources made at the first CUDA registration ([`crate::gpu`]). Both are decided late, on the
//! caller's thread, because only then is it known whether the comm moves CUDA memory.

use std::sync::Arc;

use super::{Caller, Comm};
use crate::config::ZeroCopy;
use crate::error::{NetError, NetResult};
use crate::fault::FaultKind;
use crate::threads::{self, Model};
use crate::worker::{self, evloop, Dir};

impl Comm {
    /// Whether this comm must keep per-socket helper threads whatever `TCPXEMU_THREADS` says:
    /// CUDA memory (staging pipelines), zero-copy (acknowledgements read by the sending
    /// thread), and the faults that block or slow a thread on purpose.
    fn needs_per_socket(&self, cuda: bool) -> bool {
        cuda || self.shared.gpu.as_ref().is_some_and(|g| g.cuda().is_some())
            || self.shared.zerocopy != ZeroCopy::Off
            || self
                .shared
                .fault
                .is_some_and(|f| matches!(f.kind, FaultKind::Stall | FaultKind::Slow))
    }

    /// At the first transfer: picks the comm's thread model and starts its helper threads or
    /// hands its sockets to the event loops. A later CUDA transfer on a shared comm is refused
    /// (the loops move host memory only).
    pub(super) fn start(&self, c: &mut Caller, cuda: bool) -> NetResult<()> {
        match c.model {
            Some(Model::Shared) if cuda => return Err(self.cuda_on_shared()),
            Some(_) => return Ok(()),
            None => {}
        }
        let open = threads::data_sockets_open();
        let model = threads::choose(&self.threads, self.needs_per_socket(cuda), open);
        let started = match model {
            Model::Shared => evloop::attach(&self.shared, self.threads.shared_threads),
            Model::PerSocket => self.spawn_workers(c, open),
        };
        if let Err(e) = started {
            // Sticky: a retry must not start a second set of threads for the same sockets (the
            // ones already started stop when the comm closes).
            self.shared.set_error(e.clone());
            return Err(e);
        }
        c.model = Some(model);
        threads::log_choice(model, &self.threads, open);
        Ok(())
    }

    /// The per-socket model: one helper thread per data socket.
    fn spawn_workers(&self, c: &mut Caller, open: usize) -> NetResult<()> {
        let tag = match self.dir {
            Dir::Send => "tx",
            Dir::Recv => "rx",
        };
        for idx in 0..self.shared.socks.len() {
            let s = Arc::clone(&self.shared);
            let h = std::thread::Builder::new()
                .name(format!("tcpxemu-{tag}{idx}"))
                .spawn(move || worker::run(s, idx))
                .map_err(|e| {
                    NetError::system(format!(
                        "spawning helper thread: {e} ({open} data sockets open in this process: TCPXEMU_THREADS=shared serves them from TCPXEMU_SHARED_THREADS threads)"
                    ))
                })?;
            c.workers.push(h);
        }
        Ok(())
    }

    fn cuda_on_shared(&self) -> NetError {
        NetError::invalid_usage(format!(
            "CUDA memory on {} comm with peer {}, which already moves host memory on the shared event loops: set TCPXEMU_THREADS=per-socket, or register CUDA buffers before the comm's first transfer",
            self.dir_name(),
            self.peer()
        ))
    }

    /// A CUDA buffer is registered on this comm (`regMr` with `NCCL_PTR_CUDA`, or a DMA-BUF):
    /// makes the comm's CUDA-only resources (staging, the bounce region of a receive comm) now,
    /// on the caller's thread and CUDA context, if this is the first. Host registrations cost
    /// nothing. Fails on a host-mode comm.
    pub fn register_cuda(&self) -> NetResult<()> {
        let c = self.lock();
        if c.model == Some(Model::Shared) {
            return Err(self.cuda_on_shared());
        }
        self.cuda_ready().map(|_| ())
    }

    /// The comm's CUDA-only resources, made on first use (see [`crate::gpu`]).
    pub(super) fn cuda_ready(&self) -> NetResult<&crate::gpu::CudaRes> {
        let g = self.shared.gpu.as_ref().ok_or_else(|| {
            NetError::invalid_argument(
                "CUDA memory on a host-mode comm: set TCPXEMU_MODE=unpack (or auto on a GPU host)",
            )
        })?;
        g.cuda_res(crate::threads::open_comms())
    }
}
