//! One endpoint: its buffer, its comms, and what it does in each phase.
//!
//! A worker owns everything the plugin hands out for its endpoint (comms, registrations), so all
//! plugin calls for a comm happen on one thread, as NCCL's proxy thread does and as TCPX requires.

use super::buffer::HostBuffer;
use super::copier::{self, Copier};
use super::gpu::{CudaPath, GpuState, UnpackRing};
use super::progress::{
    run_iteration, IterationError, IterationState, IterationTiming, LoopContext, RecvLane, SendLane,
};
use super::schedule::Schedule;
use super::setup::{self, Task};
use super::HandleKey;
use super::{EngineConfig, MemKind, Shared};
use crate::plan::Lanes;
use crate::plan::Plan;
use nccl_net::{ListenComm, MemType, NetHandle, Plugin, RecvComm, SendComm};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tcpx_gpu::pattern as check;

/// Registration granularity: sizes and CUDA addresses are whole 4 KiB pages.
const PAGE: usize = super::buffer::BUFFER_ALIGN;

/// Registers `[base, base + len)` on `comm` in segments of at most `segment` bytes (`len` and
/// `segment` are page multiples): one registration per segment, in order, as the schedule's
/// `reg` indices expect. With `dmabuf`, the buffer behind `base` (GPU memory) is handed over as
/// DMA-BUF file descriptors (`regMrDmaBuf`), one per segment, closed once registered (as NCCL).
///
/// # Safety
/// The range is one live allocation that outlives the comm's registrations.
unsafe fn register_segments<C: nccl_net::Registrar>(
    comm: &mut C,
    base: *mut u8,
    len: usize,
    mem: MemType,
    segment: u64,
    dmabuf: Option<&tcpx_gpu::DeviceBuffer>,
) -> Result<Vec<nccl_net::MrId>, String> {
    use std::os::fd::AsRawFd;
    let segment = usize::try_from(segment).unwrap_or(usize::MAX).max(PAGE);
    (0..len.div_ceil(segment).max(1))
        .map(|i| {
            let start = i * segment;
            let size = segment.min(len - start);
            let fd = match dmabuf {
                Some(buffer) => Some(buffer.dmabuf_fd(start..start + size).map_err(|e| e.to_string())?),
                None => None,
            };
            let mem = match &fd {
                Some(fd) => MemType::CudaDmaBuf {
                    fd: fd.as_raw_fd(),
                    offset: 0,
                },
                None => mem,
            };
            // SAFETY: the segment lies inside the caller's range (and `fd` exports exactly it).
            unsafe { comm.register(base.add(start), size, mem) }.map_err(|e| e.to_string())
        })
        .collect()
}

pub struct Worker {
    pub endpoint: usize,
    plugin: Arc<Plugin>,
    config: EngineConfig,
    shared: Arc<Shared>,
    lanes: Lanes,
    /// Plugin device per channel (placement).
    net_devs: Vec<usize>,
    /// Their names (interfaces for socket plugins), known once connected.
    nics: Vec<String>,
    /// Host memory with local copies: their threads (started at the first iteration). Declared
    /// before `memory` so that it is dropped (its threads joined) first.
    copier: Option<Copier>,
    memory: Option<Memory>,
    /// Host memory on a GPU host: the endpoint's GPU, kept open so its context stays current on
    /// this thread for every plugin call.
    context: Option<tcpx_gpu::Device>,
    listens: Vec<ListenComm>,
    send: Vec<SendLane>,
    recv: Vec<RecvLane>,
    plan: Option<Arc<Plan>>,
    schedule: Schedule,
    state: Option<IterationState>,
    /// This endpoint's flows of the size (global indices) with their sums over the timed
    /// iterations ([`Instants`]): each incoming flow's last chunk completed, each outgoing
    /// flow's first chunk posted. Only its own: a plan of 512 endpoints has 262144 flows.
    flow_done_sum: Vec<(u32, Instants)>,
    flow_posted_sum: Vec<(u32, Instants)>,
    wrong: u64,
}

/// An endpoint's buffer: host memory, or a GPU buffer with its staging and stream.
enum Memory {
    Host(HostBuffer),
    Gpu(Box<GpuState>),
}

impl Memory {
    /// The pointer handed to the plugin and how it is registered.
    fn net_view(&mut self) -> (*mut u8, usize, MemType) {
        match self {
            Memory::Host(b) => (b.as_mut_ptr(), b.len(), MemType::Host),
            Memory::Gpu(g) => {
                let len = g.buffer.len();
                let mem = if g.path == CudaPath::Direct {
                    MemType::Cuda
                } else {
                    MemType::Host
                };
                (g.net_base(), len, mem)
            }
        }
    }
}

/// An instant of each timed iteration, summed over them, two ways: on this kernel's monotonic
/// clock ([`crate::clock::mono_secs`]: comparable with any rank on the same kernel), and as
/// seconds since the endpoint's start of the iteration (comparable across kernels, whose
/// iterations one barrier starts).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Instants {
    pub monotonic: f64,
    pub since_start: f64,
}

/// What a worker returns from a size: per-flow time sums and wrong bytes.
#[derive(Debug, Clone, Default)]
pub struct SizeTotals {
    /// Incoming flows: (flow, when its last byte was in the buffer).
    pub flow_done: Vec<(u32, Instants)>,
    /// Outgoing flows: (flow, when its first chunk was posted).
    pub flow_posted: Vec<(u32, Instants)>,
    pub wrong: u64,
}

impl Worker {
    pub fn new(
        endpoint: usize,
        plugin: Arc<Plugin>,
        config: EngineConfig,
        shared: Arc<Shared>,
        lanes: Lanes,
        net_devs: Vec<usize>,
    ) -> Self {
        Self {
            endpoint,
            plugin,
            config,
            shared,
            lanes,
            net_devs,
            nics: Vec::new(),
            memory: None,
            context: None,
            listens: Vec::new(),
            send: Vec::new(),
            recv: Vec::new(),
            plan: None,
            schedule: Schedule::default(),
            state: None,
            flow_done_sum: Vec::new(),
            flow_posted_sum: Vec::new(),
            wrong: 0,
            copier: None,
        }
    }

    fn label(&self, endpoint: usize) -> String {
        self.shared.topology.label(endpoint)
    }

    /// This endpoint as `rank R gpu G on host`.
    pub fn own_label(&self) -> String {
        let e = &self.shared.topology.endpoints[self.endpoint];
        let host = self.shared.topology.hostnames.get(e.rank).map_or("?", String::as_str);
        format!("rank {} gpu {} on {host}", e.rank, e.gpu)
    }

    /// This endpoint's NICs whose link is not up now, as `eth2 on node1 is lowerlayerdown`.
    pub fn dead_nics(&self) -> Vec<String> {
        let host = &self.shared.topology.hostnames[self.shared.topology.endpoints[self.endpoint].rank];
        let mut seen: Vec<&str> = Vec::new();
        let mut dead = Vec::new();
        for nic in &self.nics {
            if seen.contains(&nic.as_str()) {
                continue;
            }
            seen.push(nic);
            if let Some(state) = crate::wire::link_not_up(nic) {
                dead.push(format!("{nic} on {host} is {state}"));
            }
        }
        dead
    }

    /// Allocates the buffer (once) and opens one listen comm per incoming (peer, channel) of
    /// `connections`, whose lanes become this endpoint's. Returns ((sender, this endpoint,
    /// channel), handle) pairs for the MPI exchange.
    pub fn listen(
        &mut self,
        buffer_len: u64,
        connections: &[(usize, usize)],
    ) -> Result<Vec<(HandleKey, NetHandle)>, String> {
        if self.memory.is_none() {
            self.memory = Some(self.allocate(buffer_len)?);
        }
        self.lanes = Lanes::of(self.endpoint, connections, self.lanes.channels);
        let mut handles = Vec::new();
        for &peer in &self.lanes.recv_peers.clone() {
            for ch in 0..self.lanes.channels {
                let (comm, handle) = self
                    .plugin
                    .listen(self.net_devs[ch], &self.label(peer))
                    .map_err(|e| e.to_string())?;
                self.listens.push(comm);
                handles.push(((peer, self.endpoint, ch), handle));
            }
        }
        Ok(handles)
    }

    /// The endpoint's buffer, sized for every lane of the job (the GPU path's batches), whichever
    /// of them are open at a time.
    fn allocate(&mut self, buffer_len: u64) -> Result<Memory, String> {
        // Registrations cover whole pages (NCCL rounds registration sizes up to the page; TCPX
        // imports CUDA ranges page by page), so the buffer has the slack.
        let buffer_len = buffer_len.max(1).div_ceil(PAGE as u64) * PAGE as u64;
        Ok(match self.config.mem {
            MemKind::Host => {
                // TCPX takes its GPU from the calling thread's CUDA context in listen, connect,
                // accept and regMr, host-memory comms included: make this endpoint's current.
                self.bind_gpu_context()?;
                Memory::Host(HostBuffer::new(buffer_len as usize)?)
            }
            MemKind::Cuda(path) => {
                let lanes = self.lanes.send_peers.len() + self.lanes.recv_peers.len();
                let batches = lanes * self.lanes.channels * self.config.window + 8;
                let gpu = self.shared.topology.endpoints[self.endpoint].gpu;
                // Opening the GPU also makes its context current on this thread, where the
                // plugin (TCPX-style) takes the device from in listen/connect/accept/regMr.
                let state = GpuState::new(gpu, buffer_len as usize, path, batches)
                    .map_err(|e| format!("GPU {gpu} for endpoint {}: {e}", self.endpoint))?;
                Memory::Gpu(Box::new(state))
            }
        })
    }

    /// The endpoint's GPU, once its buffer is allocated, where CUDA has that GPU (host memory:
    /// the context the plugin's calls read; CUDA memory: the buffer's device).
    fn device(&self) -> Option<&tcpx_gpu::Device> {
        match self.memory.as_ref()? {
            Memory::Host(_) => self.context.as_ref(),
            Memory::Gpu(state) => Some(&state.device),
        }
    }

    /// Makes the endpoint's GPU context current on this thread where a GPU exists (host memory;
    /// the CUDA path opens the GPU with its buffer). Without CUDA there is nothing to bind.
    fn bind_gpu_context(&mut self) -> Result<(), String> {
        let gpu = self.shared.topology.endpoints[self.endpoint].gpu;
        self.context = bind_gpu(gpu).map_err(|e| format!("GPU {gpu} for endpoint {}: {e}", self.endpoint))?;
        Ok(())
    }

    /// Whether GPU memory goes to the plugin as DMA-BUF, as NCCL decides: the plugin offers
    /// `NCCL_PTR_DMABUF` and `regMrDmaBuf`, the GPU's driver exports DMA-BUFs, and
    /// `NCCL_DMABUF_ENABLE` is not 0.
    fn use_dmabuf(&self, gpu: &GpuState, dev: usize) -> Result<bool, String> {
        let props = self.plugin.properties(dev).map_err(|e| e.to_string())?;
        Ok(crate::contracts::prefers_dmabuf(
            &props,
            self.plugin.has_reg_mr_dma_buf(),
            gpu.device.info().dmabuf_supported,
            std::env::var("NCCL_DMABUF_ENABLE").ok().as_deref(),
        ))
    }

    /// Connects to every outgoing peer and accepts every incoming one, all at once (both sides
    /// of every pair must make progress together), on setup threads ([`setup`]) until the
    /// deadline. Returns the setup time and the setup threads used.
    pub fn connect(&mut self, handles: &HashMap<HandleKey, NetHandle>) -> Result<(Duration, usize), String> {
        let deadline = Instant::now() + self.config.timeout;
        let mut tasks = Vec::new();
        let mut send_peers = Vec::new();
        for &peer in &self.lanes.send_peers {
            for ch in 0..self.lanes.channels {
                let handle = handles
                    .get(&(self.endpoint, peer, ch))
                    .ok_or_else(|| format!("no handle from {} arrived in the exchange", self.label(peer)))?;
                let connect = self.plugin.connect(self.net_devs[ch], *handle, &self.label(peer));
                tasks.push(Task::Connect(send_peers.len(), connect));
                send_peers.push(peer);
            }
        }
        // Each endpoint starts with the peers above it: connects wait their turn
        // (`setup::connects_in_flight`), and in ascending order every endpoint's first turn would
        // go to the same few peers, whose accepts would then take the whole job's first turn.
        let first = self
            .lanes
            .send_peers
            .iter()
            .position(|&p| p > self.endpoint)
            .unwrap_or(0);
        tasks.rotate_left(first * self.lanes.channels);
        let accepts = self.listens.len();
        tasks.extend(
            std::mem::take(&mut self.listens)
                .into_iter()
                .enumerate()
                .map(|(i, l)| Task::Accept(i, l)),
        );
        // Setup threads only make the endpoint's context current (cuCtxSetCurrent): it was
        // opened with the buffer and is held to the end. Opening the GPU again per setup thread
        // (a stream, buffers, the kernels' module) took the driver's locks once per thread per
        // connect, what 128 ranks sharing 4 GPUs queued behind for ~30 s per connect phase.
        let gpu = self.shared.topology.endpoints[self.endpoint].gpu;
        let device = self.device().cloned();
        let init = move || -> Result<(), String> {
            match &device {
                Some(device) => device
                    .make_current()
                    .map_err(|e| format!("GPU {gpu} on a setup thread: {e}")),
                None => Ok(()),
            }
        };
        let describe = |t: &Task| match t {
            Task::Connect(i, _) => format!("connect to {}", self.label(send_peers[*i])),
            Task::Accept(i, _) => format!(
                "accept from {}",
                self.label(self.lanes.recv_peers[i / self.lanes.channels])
            ),
        };
        let mut done = setup::establish(
            tasks,
            send_peers.len(),
            accepts,
            self.config.setup_threads,
            self.config.connects_in_flight,
            deadline,
            &self.shared.abort,
            &init,
            &describe,
        )
        .map_err(|e| {
            // Only a deadline that passed is a timeout; a plugin's error is its own.
            if e.starts_with(setup::STILL_WAITING) {
                format!(
                    "connection setup did not finish within -T {} s: {e}",
                    self.config.timeout.as_secs()
                )
            } else {
                format!("connection setup failed: {e}")
            }
        })?;
        let (sends, recvs) = (std::mem::take(&mut done.sends), std::mem::take(&mut done.recvs));
        // Closed with the comms (`close`): the peak of open files is then every socket and
        // every listener, as the resource model plans, whatever the timing of the accepts.
        self.listens = std::mem::take(&mut done.listens);
        self.register_lanes(sends, recvs, &send_peers)?;
        Ok((done.elapsed, done.threads))
    }

    /// Registers the buffer with every connected comm and makes its lane.
    fn register_lanes(
        &mut self,
        sends: Vec<SendComm>,
        recvs: Vec<RecvComm>,
        send_peers: &[usize],
    ) -> Result<(), String> {
        let memory = self.memory.as_mut().expect("listen allocated the buffer");
        let (base, len, mem) = memory.net_view();
        if mem == MemType::Cuda && !(base as usize).is_multiple_of(PAGE) {
            return Err(format!(
                "the GPU buffer at {base:p} is not {PAGE}-byte aligned, as GPUDirect plugins require of CUDA registrations"
            ));
        }
        let segment = self.config.reg_segment;
        let window = self.config.window;
        // Per channel (each channel's comms are on one plugin device): DMA-BUF or not.
        let mut dmabuf = Vec::with_capacity(self.lanes.channels);
        for ch in 0..self.lanes.channels {
            dmabuf.push(match self.memory.as_ref() {
                Some(Memory::Gpu(g)) if mem == MemType::Cuda && self.use_dmabuf(g, self.net_devs[ch])? => {
                    Some(&g.buffer)
                }
                _ => None,
            });
        }
        // The stall dump names each comm's NIC (this endpoint's side), so a dead one is named.
        let mut nics = Vec::with_capacity(self.lanes.channels);
        for ch in 0..self.lanes.channels {
            let props = self.plugin.properties(self.net_devs[ch]).map_err(|e| e.to_string())?;
            nics.push(props.name);
        }
        self.nics.clone_from(&nics);
        for (i, mut comm) in sends.into_iter().enumerate() {
            // SAFETY: the buffer lives in this worker and is dropped after the comms (field order
            // in `close`).
            let via = dmabuf[i % self.lanes.channels];
            let mrs = unsafe { register_segments(&mut comm, base, len, mem, segment, via) }?;
            let peer = format!("{} over {}", self.label(send_peers[i]), nics[i % self.lanes.channels]);
            let lane = SendLane::new(comm, i / self.lanes.channels, mrs, peer, window);
            self.shared.watch(("send", lane.peer.clone(), lane.stats.clone()));
            self.send.push(lane);
        }
        for (i, mut comm) in recvs.into_iter().enumerate() {
            // SAFETY: as above.
            let via = dmabuf[i % self.lanes.channels];
            let mrs = unsafe { register_segments(&mut comm, base, len, mem, segment, via) }?;
            let peer = format!(
                "{} over {}",
                self.label(self.lanes.recv_peers[i / self.lanes.channels]),
                nics[i % self.lanes.channels]
            );
            let unpack = match (self.memory.as_ref(), comm.device_handle()) {
                (Some(Memory::Gpu(g)), Some(handle)) if g.path == CudaPath::Direct => {
                    UnpackRing::from_handle(&g.device, handle).map_err(|e| format!("receive comm from {peer}: {e}"))?
                }
                _ => None,
            };
            let mut lane = RecvLane::new(comm, i / self.lanes.channels, mrs, peer, window, unpack);
            if let Some(Memory::Gpu(g)) = self.memory.as_ref() {
                let props = self
                    .plugin
                    .properties(self.net_devs[i % self.lanes.channels])
                    .map_err(|e| e.to_string())?;
                let gpudirect = g.path == CudaPath::Direct && lane.unpack.is_none();
                lane.flush = crate::contracts::needs_flush(&props, gpudirect, g.device.info().compute_capability.0);
            }
            self.shared.watch(("recv", lane.peer.clone(), lane.stats.clone()));
            self.recv.push(lane);
        }
        Ok(())
    }

    /// Builds this endpoint's post sequences for a new size (before any clock runs).
    pub fn prepare(&mut self, plan: Arc<Plan>) {
        self.schedule = Schedule::build(
            &plan,
            self.endpoint,
            &self.lanes,
            self.config.chunk,
            self.config.reg_segment,
        );
        self.state = Some(IterationState::new(
            &self.schedule,
            plan.flows.len(),
            self.lanes.send_peers.len(),
            self.lanes.recv_peers.len(),
        ));
        let own = |end: fn(&crate::plan::Flow) -> usize| {
            let flows = plan.flows.iter().enumerate();
            flows
                .filter(|(_, f)| end(f) == self.endpoint)
                .map(|(i, _)| (i as u32, Instants::default()))
                .collect()
        };
        self.flow_done_sum = own(|f| f.dst);
        self.flow_posted_sum = own(|f| f.src);
        self.wrong = 0;
        self.plan = Some(plan);
    }

    /// Writes this endpoint's pattern for iteration `iter` into its send ranges.
    pub fn fill(&mut self, iter: u32) -> Result<(), String> {
        let plan = self.plan.as_ref().expect("prepared");
        let origin = self.endpoint as u32;
        match self.memory.as_mut().expect("allocated") {
            Memory::Host(b) => {
                let buffer = b.as_mut_slice();
                for f in &plan.fills[self.endpoint] {
                    let range = f.off as usize..(f.off + f.len) as usize;
                    check::fill(&mut buffer[range], origin, iter, f.origin_off);
                }
            }
            Memory::Gpu(g) => {
                for f in &plan.fills[self.endpoint] {
                    g.fill(f.off, f.len, origin, iter, f.origin_off)?;
                }
            }
        }
        Ok(())
    }

    /// Runs one iteration from `start` (the instant the start signal arrived).
    pub fn run(&mut self, start: Instant, timed: bool) -> Result<IterationTiming, IterationError> {
        let memory = self.memory.as_mut().expect("allocated");
        if self.copier.is_none() && matches!(memory, Memory::Host(_)) && !self.schedule.local.is_empty() {
            let copier = Copier::new(copier::THREADS)
                .map_err(|e| IterationError::LocalCopy(format!("starting copy threads: {e}")))?;
            self.copier = Some(copier);
        }
        let base = memory.net_view().0;
        let gpu = match memory {
            Memory::Gpu(g) => Some(&mut **g),
            Memory::Host(_) => None,
        };
        let ctx = LoopContext {
            schedule: &self.schedule,
            window: self.config.window,
            copier: self.copier.as_ref(),
            base,
            epoch: self.shared.epoch,
            deadline: self.config.timeout,
            abort: &self.shared.abort,
            poll: self.config.poll,
        };
        let state = self.state.as_mut().expect("prepared");
        let unpacking = self.recv.iter().any(|l| l.unpack.is_some());
        let timing = run_iteration(&ctx, &mut self.send, &mut self.recv, state, gpu, start)?;
        if unpacking {
            // Every iteration, with or without the data check: a skipped descriptor is a byte
            // range that never reached the buffer.
            if let Some(Memory::Gpu(g)) = self.memory.as_ref() {
                let skipped = g.take_unpack_errors()?;
                if skipped > 0 {
                    return Err(IterationError::Gpu(format!(
                        "the unpack kernel skipped {skipped} descriptor(s) pointing outside their buffers: the plugin's unpack metadata is wrong"
                    )));
                }
            }
        }
        if timed {
            // The run's pair figures take a flow's time from its sender's first post to its
            // receiver's last byte (docs/measurements.md#per-pair-figures).
            let add = |sum: &mut Instants, t: Instant| {
                sum.monotonic += crate::clock::mono_secs(t);
                sum.since_start += t.saturating_duration_since(start).as_secs_f64();
            };
            for (flow, sum) in &mut self.flow_done_sum {
                if let Some(t) = state.flow_done[*flow as usize] {
                    add(sum, t);
                }
            }
            for (flow, sum) in &mut self.flow_posted_sum {
                if let Some(t) = state.flow_posted[*flow as usize] {
                    add(sum, t);
                }
            }
        }
        Ok(timing)
    }

    /// Counts wrong bytes in every range this endpoint received in iteration `iter`.
    pub fn verify(&mut self, iter: u32) -> Result<u64, String> {
        let plan = self.plan.as_ref().expect("prepared");
        let mut wrong = 0;
        for f in plan.flows.iter().filter(|f| f.dst == self.endpoint) {
            wrong += match self.memory.as_ref().expect("allocated") {
                Memory::Host(b) => {
                    let range = f.dst_off as usize..(f.dst_off + f.len) as usize;
                    check::verify(&b.as_slice()[range], f.origin as u32, iter, f.origin_off)
                }
                Memory::Gpu(g) => g.verify(f.dst_off, f.len, f.origin as u32, iter, f.origin_off)?,
            };
        }
        self.wrong += wrong;
        Ok(wrong)
    }

    /// Per-flow time sums and wrong bytes for the size just measured.
    pub fn totals(&self) -> SizeTotals {
        SizeTotals {
            flow_done: self.flow_done_sum.clone(),
            flow_posted: self.flow_posted_sum.clone(),
            wrong: self.wrong,
        }
    }

    /// Asks this rank's other workers to leave their progress loops (this one failed).
    pub fn abort_rank(&self) {
        self.shared.abort.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn mark_stalled(&self) {
        self.shared.stalled.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Deregisters and closes every comm (send, receive, listen), keeping the buffer: the next
    /// `listen` opens another set on it. The schedule of the size goes with its lanes.
    pub fn release(&mut self) {
        self.send.clear();
        self.recv.clear();
        self.listens.clear();
        self.state = None;
        self.schedule = Schedule::default();
    }

    /// Deregisters and closes every comm, then frees the buffer (the order the plugin needs).
    pub fn close(&mut self) {
        self.release();
        self.memory = None;
    }
}

/// Makes GPU `gpu`'s context current on the calling thread where CUDA has that GPU: TCPX takes
/// the GPU from the calling thread in listen, connect, accept and regMr. The device is returned
/// so the caller keeps the context alive.
fn bind_gpu(gpu: usize) -> Result<Option<tcpx_gpu::Device>, String> {
    match tcpx_gpu::Gpu::probe() {
        Ok(Some(info)) if gpu < info.count() => {
            // Lazy: a host-memory endpoint launches no kernel, so NVRTC never runs for it.
            let device = tcpx_gpu::Device::open_lazy(gpu).map_err(|e| e.to_string())?;
            device.make_current().map_err(|e| e.to_string())?;
            Ok(Some(device))
        }
        _ => Ok(None),
    }
}
