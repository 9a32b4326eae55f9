//! What one iteration measures (time, bytes by every source, peers in flight), why it can fail,
//! and the per-size state it reuses from one iteration to the next.

use super::super::schedule::Schedule;
use std::time::{Duration, Instant};

/// What one endpoint measured in one iteration.
#[derive(Debug, Clone, Copy, Default)]
pub struct IterationTiming {
    /// From the start signal to the endpoint's last completion.
    pub elapsed: Duration,
    /// What the completed receives delivered, by each source that can see it.
    pub delivered: Delivered,
    /// The most distinct peers this endpoint had sends (receives) posted to at once.
    pub peers_in_flight: (u32, u32),
}

/// What completed receives delivered, as each source that can see the bytes counts them. The
/// planned total only says which receives completed; the other two are measurements (a source
/// that saw none of the receives counts nothing and says so in its `missed` count).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delivered {
    /// Receives completed.
    pub receives: u64,
    /// Bytes those receives were planned to hold.
    pub planned: u64,
    /// Sizes the plugin reported in `test` (TCPX never reports them).
    pub reported: u64,
    /// Receives the plugin reported no size for.
    pub reported_missed: u64,
    /// Byte totals of the device-unpack descriptors of the receives that went through unpack.
    pub unpacked: u64,
    /// Receives that did not go through device unpack.
    pub unpacked_missed: u64,
}

impl Delivered {
    pub fn add(&mut self, o: &Delivered) {
        self.receives += o.receives;
        self.planned += o.planned;
        self.reported += o.reported;
        self.reported_missed += o.reported_missed;
        self.unpacked += o.unpacked;
        self.unpacked_missed += o.unpacked_missed;
    }

    /// Sums of every field across `parts`.
    pub fn total<'a>(parts: impl IntoIterator<Item = &'a Delivered>) -> Delivered {
        let mut t = Delivered::default();
        for p in parts {
            t.add(p);
        }
        t
    }

    /// As a flat array, for an MPI sum.
    pub fn to_array(self) -> [u64; 6] {
        [
            self.receives,
            self.planned,
            self.reported,
            self.reported_missed,
            self.unpacked,
            self.unpacked_missed,
        ]
    }

    pub fn from_array(a: [u64; 6]) -> Delivered {
        let [receives, planned, reported, reported_missed, unpacked, unpacked_missed] = a;
        Delivered {
            receives,
            planned,
            reported,
            reported_missed,
            unpacked,
            unpacked_missed,
        }
    }
}

/// Why an iteration did not finish.
#[derive(Debug)]
pub enum IterationError {
    Plugin(nccl_net::NetError),
    /// A CUDA call failed (unpack launch, staging copy, event).
    Gpu(String),
    /// The deadline passed; the string is the per-comm state dump.
    Stalled(String),
    /// Another worker of this rank failed and asked everyone to stop.
    Aborted,
    /// The local copy threads could not be started.
    LocalCopy(String),
    /// A receive completed with a size other than the one planned, as `source` counts it.
    SizeMismatch {
        peer: String,
        source: &'static str,
        expected: u64,
        got: u64,
    },
}

impl std::fmt::Display for IterationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IterationError::Plugin(e) => write!(f, "{e}"),
            IterationError::Gpu(e) => write!(f, "CUDA: {e}"),
            IterationError::Stalled(dump) => write!(f, "no progress before the -T deadline\n{dump}"),
            IterationError::Aborted => write!(f, "stopped because another worker failed"),
            IterationError::LocalCopy(e) => write!(f, "local copy: {e}"),
            IterationError::SizeMismatch {
                peer,
                source,
                expected,
                got,
            } => {
                write!(
                    f,
                    "a receive from {peer} completed with {got} bytes as {source}, {expected} were planned"
                )
            }
        }
    }
}

impl From<String> for IterationError {
    fn from(e: String) -> Self {
        IterationError::Gpu(e)
    }
}

impl From<nccl_net::NetError> for IterationError {
    fn from(e: nccl_net::NetError) -> Self {
        IterationError::Plugin(e)
    }
}

/// How many distinct peers have requests posted to the plugin at once (`--max-peers` bounds it):
/// per peer, the lanes (channels) with requests in flight.
#[derive(Debug, Clone, Default)]
pub struct PeerGauge {
    busy: Vec<u32>,
    active: u32,
    /// The most peers busy at once since the last reset.
    pub max: u32,
}

impl PeerGauge {
    fn new(peers: usize) -> Self {
        PeerGauge {
            busy: vec![0; peers],
            ..PeerGauge::default()
        }
    }

    /// A lane of `peer` went from no request in flight to one.
    pub(super) fn up(&mut self, peer: usize) {
        self.busy[peer] += 1;
        if self.busy[peer] == 1 {
            self.active += 1;
            self.max = self.max.max(self.active);
        }
    }

    /// A lane of `peer` has no request in flight any more.
    pub(super) fn down(&mut self, peer: usize) {
        self.busy[peer] -= 1;
        if self.busy[peer] == 0 {
            self.active -= 1;
        }
    }

    pub(super) fn reset(&mut self) {
        self.busy.fill(0);
        self.active = 0;
        self.max = 0;
    }
}

/// Per-iteration mutable state, allocated once per size (not per iteration).
pub struct IterationState {
    pub received: Vec<bool>,
    /// When each incoming flow's last chunk completed (its data in the buffer).
    pub flow_done: Vec<Option<Instant>>,
    /// When each outgoing flow's first chunk was posted: its first byte offered to the network.
    /// A pair's time runs from here to the receiver's `flow_done`, so no pair can look faster
    /// than its link (docs/measurements.md#per-pair-figures).
    pub flow_posted: Vec<Option<Instant>>,
    pub round_left: Vec<u32>,
    pub send_peers: PeerGauge,
    pub recv_peers: PeerGauge,
    /// Per round of the schedule, its fastest stretch in the iterations of this size so far
    /// (warm-up included; from the completion that opened it to the one that closed it), for the
    /// adaptive wait. One round: the fastest iteration.
    pub fastest: Vec<Option<Duration>>,
    /// This iteration's stretch per round, folded into `fastest` when it succeeds.
    pub(super) stretches: Vec<Option<Duration>>,
    /// The lanes a pass visits ([`Active`]).
    pub(super) active: Active,
}

/// The lanes a pass of the progress loop visits: those with requests in hand or a next request
/// in the current round. A lane done for the iteration, or waiting for a later round, costs a
/// pass nothing: at 16 x 8 x 4 an endpoint holds 254 lanes and 18 are busy at a time, and a
/// pass over all of them took most of the endpoint threads' user time
/// (docs/runs/h200x4-20261128-issue43).
pub struct Active {
    pub(super) send: LaneSet,
    pub(super) recv: LaneSet,
    /// Rounds activated so far this iteration.
    rounds_on: usize,
}

/// One direction's active lanes.
pub struct LaneSet {
    /// The lanes a pass visits, in the order they joined.
    pub(super) lanes: Vec<u32>,
    /// Per lane, whether it is in `lanes`.
    on: Vec<bool>,
    /// Per round, the lanes with a request in it.
    of_round: Vec<Vec<u32>>,
}

impl LaneSet {
    /// From each lane's ops' rounds (`rounds` rounds in all).
    fn new(lane_rounds: impl ExactSizeIterator<Item = Vec<u32>>, rounds: usize) -> Self {
        let mut of_round = vec![Vec::new(); rounds];
        let lanes = lane_rounds.len();
        for (lane, rs) in lane_rounds.enumerate() {
            for r in rs {
                let list: &mut Vec<u32> = &mut of_round[r as usize];
                if list.last() != Some(&(lane as u32)) {
                    list.push(lane as u32);
                }
            }
        }
        LaneSet {
            lanes: Vec::with_capacity(lanes),
            on: vec![false; lanes],
            of_round,
        }
    }

    fn clear(&mut self) {
        self.lanes.clear();
        self.on.fill(false);
    }

    /// Adds the lanes of round `r` not in the set.
    fn open(&mut self, r: usize) {
        for &l in &self.of_round[r] {
            if !std::mem::replace(&mut self.on[l as usize], true) {
                self.lanes.push(l);
            }
        }
    }

    /// Takes the lane at position `at` off the list, keeping the others' order (the order the
    /// loop posts and tests in).
    pub(super) fn drop(&mut self, at: usize) {
        let l = self.lanes.remove(at);
        self.on[l as usize] = false;
    }
}

impl Active {
    fn new(schedule: &Schedule) -> Self {
        let rounds = schedule.ops_per_round.len();
        let send = schedule.send.iter().map(|ops| ops.iter().map(|o| o.round).collect());
        let recv = schedule.recv.iter().map(|ops| ops.iter().map(|o| o.round).collect());
        Active {
            send: LaneSet::new(send, rounds),
            recv: LaneSet::new(recv, rounds),
            rounds_on: 0,
        }
    }

    fn reset(&mut self) {
        self.send.clear();
        self.recv.clear();
        self.rounds_on = 0;
    }

    /// Adds the lanes of every round up to `round` not added yet this iteration.
    pub(super) fn open_through(&mut self, round: u32) {
        let upto = (round as usize + 1).min(self.send.of_round.len());
        for r in self.rounds_on..upto {
            self.send.open(r);
            self.recv.open(r);
        }
        self.rounds_on = self.rounds_on.max(upto);
    }

    /// No lane of either direction has work in hand or in the rounds opened.
    pub(super) fn is_empty(&self) -> bool {
        self.send.lanes.is_empty() && self.recv.lanes.is_empty()
    }
}

impl IterationState {
    pub fn new(schedule: &Schedule, flows: usize, send_peers: usize, recv_peers: usize) -> Self {
        Self {
            received: vec![false; schedule.recv_slots],
            flow_done: vec![None; flows],
            flow_posted: vec![None; flows],
            round_left: schedule.ops_per_round.clone(),
            send_peers: PeerGauge::new(send_peers),
            recv_peers: PeerGauge::new(recv_peers),
            fastest: vec![None; schedule.ops_per_round.len()],
            stretches: vec![None; schedule.ops_per_round.len()],
            active: Active::new(schedule),
        }
    }

    pub(super) fn reset(&mut self, schedule: &Schedule) {
        self.received.fill(false);
        self.flow_done.fill(None);
        self.flow_posted.fill(None);
        self.round_left.copy_from_slice(&schedule.ops_per_round);
        self.send_peers.reset();
        self.recv_peers.reset();
        self.stretches.fill(None);
        self.active.reset();
    }

    /// Round `round`'s stretch this iteration: it lasted `took`.
    pub(super) fn close_stretch(&mut self, round: u32, took: Duration) {
        if let Some(s) = self.stretches.get_mut(round as usize) {
            *s = Some(took);
        }
    }

    /// Keeps the faster of each round's stretch (after an iteration that succeeded).
    pub(super) fn keep_fastest(&mut self) {
        for (f, s) in self.fastest.iter_mut().zip(&self.stretches) {
            if let Some(s) = *s {
                *f = Some(f.map_or(s, |f| f.min(s)));
            }
        }
    }

    pub(super) fn current_round(&self) -> u32 {
        self.round_left
            .iter()
            .position(|&left| left > 0)
            .unwrap_or(self.round_left.len()) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::schedule::{RecvOp, SendOp};

    fn send(round: u32) -> SendOp {
        SendOp {
            off: 0,
            len: 1,
            reg: 0,
            dep: None,
            flow: 0,
            round,
        }
    }

    fn recv(round: u32) -> RecvOp {
        RecvOp {
            off: 0,
            len: 1,
            reg: 0,
            slot: 0,
            flow: 0,
            round,
        }
    }

    /// Four send lanes over three rounds (lane 3 in rounds 0 and 2) and two receive lanes: a
    /// round's opening adds each of its lanes once, a dropped lane comes back with its next
    /// round, and a new iteration starts from round 0 again.
    #[test]
    fn lanes_join_with_their_round_and_once() {
        let schedule = Schedule {
            send: vec![vec![send(0)], vec![send(1)], vec![send(2)], vec![send(0), send(2)]],
            recv: vec![vec![recv(0)], vec![recv(2), recv(2)]],
            ops_per_round: vec![3, 1, 4],
            ..Schedule::default()
        };
        let mut a = Active::new(&schedule);
        a.open_through(0);
        assert_eq!((a.send.lanes.clone(), a.recv.lanes.clone()), (vec![0, 3], vec![0]));
        a.open_through(0);
        assert_eq!(a.send.lanes, [0, 3], "opening a round twice adds nothing");
        // Lane 3 is done with round 0 and waits for round 2: it leaves; then lane 0.
        a.send.drop(1);
        assert_eq!(a.send.lanes, [0]);
        a.send.drop(0);
        assert!(a.send.lanes.is_empty());
        a.open_through(2);
        assert_eq!(
            a.send.lanes,
            [1, 2, 3],
            "rounds 1 and 2 at once (a round can end in the same pass)"
        );
        assert_eq!(a.recv.lanes, [0, 1]);
        a.reset();
        assert!(a.send.lanes.is_empty() && a.recv.lanes.is_empty());
        a.open_through(0);
        assert_eq!(a.send.lanes, [0, 3], "the next iteration starts over");
    }

    #[test]
    fn the_fastest_stretch_of_each_round_is_kept() {
        let schedule = Schedule {
            ops_per_round: vec![1, 1],
            ..Schedule::default()
        };
        let mut s = IterationState::new(&schedule, 0, 0, 0);
        let ms = Duration::from_millis;
        s.stretches = vec![Some(ms(5)), Some(ms(9))];
        s.keep_fastest();
        s.reset(&schedule);
        assert_eq!(s.stretches, [None, None]);
        s.stretches = vec![Some(ms(7)), Some(ms(3))];
        s.keep_fastest();
        assert_eq!(s.fastest, [Some(ms(5)), Some(ms(3))]);
        // A failed iteration keeps nothing: `keep_fastest` is called only after a success.
    }
}
