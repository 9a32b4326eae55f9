//! The collective operations the layers above need from the launcher (MPI in production,
//! [`crate::mpi_boot::Mpi`]): a trait of its own at the bottom, so the engine, the byte check and
//! the NCCL baseline use MPI without knowing it, and `mpi_boot` implements it without knowing them.

/// The collective operations the engine, the byte check and the baseline need from the launcher.
pub trait Collectives {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    fn barrier(&self);
    /// A barrier that gives up after `limit`, or (rank 0) when another rank reports it failed.
    fn barrier_within(&self, limit: std::time::Duration) -> Result<(), BarrierError> {
        let _ = limit;
        self.barrier();
        Ok(())
    }
    /// Bitwise OR of `buf` across ranks, in place (handle exchange: each rank fills its slots).
    fn or_bytes(&self, buf: &mut [u8]);
    fn sum_u64(&self, buf: &mut [u64]);
    fn sum_f64(&self, buf: &mut [f64]);
    /// Every rank's `local` (all the same length), concatenated in rank order.
    fn gather_f64(&self, local: &[f64]) -> Vec<f64>;
    /// Every rank's `local` (any length) on rank 0, in rank order; `None` on the other ranks.
    /// What only rank 0 reads goes here, not to every rank: a size's link halves.
    fn gather_f64_to_root(&self, local: &[f64]) -> Option<Vec<Vec<f64>>>;
    /// Point-to-point exchange with the listed ranks only: `sends` (rank, bytes) go out, and one
    /// message of the given length comes in from each rank of `recvs`, returned in that order.
    fn exchange(&self, sends: &[(usize, Vec<u8>)], recvs: &[(usize, usize)]) -> Vec<Vec<u8>>;
    /// Ends the whole job now (after this rank printed why).
    fn abort(&self, code: i32) -> !;
    /// Rank 0: the first error another rank reported, taking any that has arrived (None on the
    /// other ranks): rank 0 asks while it waits for its own workers, which may wait for a peer
    /// that is gone.
    fn peer_failure(&self) -> Option<PeerFailure> {
        None
    }
}

/// Another rank's error as rank 0 received it: the rank, the phase it failed in, its own words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerFailure {
    pub rank: usize,
    /// `setup`, `connect`, `sweep`, `probe` or `close` (see the run's phases).
    pub phase: String,
    pub error: String,
}

/// Why a bounded barrier gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BarrierError {
    /// `limit` passed; `absent` lists the ranks that had not arrived where this rank can know
    /// them (rank 0 tracks arrivals), empty elsewhere.
    TimedOut { absent: Vec<usize> },
    /// Rank 0 only: `rank` failed while the others waited, and said why.
    PeerFailed { rank: usize, message: String },
}
