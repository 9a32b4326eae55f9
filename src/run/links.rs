//! Which comms are open while a size runs (`--connect all|rounds`), and the account of their
//! setup: every connect by round, this rank's peak threads and fds, and the time from launch to
//! the first timed iteration.
//!
//! `all` connects every comm of the job once, before the first byte, and holds them to the end.
//! `rounds` runs a size part by part: a part is `--connect-peers / --max-peers` consecutive
//! `--max-peers` rounds of the plan (at least one; [`crate::plan::rounds_per_connect`]), whose
//! comms alone are connected (unless they are the set already open: one-part patterns, or the
//! last part of a size and the first of the next when they are the same), its warm-up and timed
//! iterations run on its flows only (its rounds in turn, as `all` runs all of them), then they
//! are closed (send, receive and listen comms) before the next part connects. Sizes alternate the direction they walk their rounds in, so a size
//! starts with the round the previous one ended with. No connect is inside a timed iteration in
//! either mode.

use super::Fatal;
use crate::cli::ConnectMode;
use crate::collectives::Collectives;
use crate::engine::Engine;
use crate::mpi_boot::Mpi;
use crate::placement::dry_run::{RoundSetup, SetupReport};
use crate::placement::resources::limits::own_usage;
use crate::plan::{Plan, RoundPlan};
use std::sync::Arc;
use std::time::Instant;

/// This rank's open comms and the record of every connect.
pub(super) struct Links {
    mode: ConnectMode,
    /// With `--connect rounds`: the plan's rounds per part.
    rounds_per_part: usize,
    buffer_len: u64,
    channels: usize,
    /// The connections whose comms are open now.
    open: Option<Arc<Vec<(usize, usize)>>>,
    /// Per round index (rank 0's view of the slowest rank's connects).
    rounds: Vec<RoundSetup>,
    /// This rank's most threads and fds: after any connect, and after any round's iterations.
    after_setup: (u64, u64),
    peak: (u64, u64),
    /// This rank's first timed iteration, as it started.
    first_timed: Option<Instant>,
    /// Told the rounds so far after every connect ([`Self::on_connect`]).
    on_connect: Option<OnConnect>,
}

/// Whether `mine` holds on every rank (every rank asks at the same point: a sum over the ranks).
fn everyone(mpi: &Mpi, mine: bool) -> bool {
    let mut not = [u64::from(!mine)];
    mpi.sum_u64(&mut not);
    not[0] == 0
}

/// What [`Links::on_connect`] installs.
type OnConnect = Box<dyn Fn(&[RoundSetup])>;

/// One connect, the slowest rank's figures.
pub(super) struct Connect {
    /// Listen, handle exchange, connect/accept.
    pub seconds: f64,
    /// Of which the slowest endpoint's connect/accept.
    pub endpoint_seconds: f64,
    pub setup_threads: usize,
    pub comms: usize,
}

impl Links {
    pub fn new(mode: ConnectMode, rounds_per_part: usize, buffer_len: u64, channels: usize) -> Links {
        Links {
            mode,
            rounds_per_part: rounds_per_part.max(1),
            buffer_len,
            channels,
            open: None,
            rounds: Vec::new(),
            after_setup: (0, 0),
            peak: (0, 0),
            first_timed: None,
            on_connect: None,
        }
    }

    /// Runs `f` (the node verdicts' probe) with its connects left out of the run's
    /// account of connects (the peaks of threads and files stand: they were held).
    pub fn aside<T>(&mut self, f: impl FnOnce(&mut Links) -> T) -> T {
        let (rounds, hook) = (self.rounds.clone(), self.on_connect.take());
        let out = f(self);
        self.rounds = rounds;
        self.on_connect = hook;
        out
    }

    /// `f` sees the rounds' setup so far after every later connect (the run's record, which
    /// writes them to disk as they happen).
    pub fn on_connect(&mut self, f: impl Fn(&[RoundSetup]) + 'static) {
        self.on_connect = Some(Box::new(f));
    }

    /// The parts a size runs one after another: its groups of rounds with `--connect rounds`,
    /// else the whole plan at once (its rounds interleaved in every iteration).
    pub fn parts_of(&self, plan: &Arc<Plan>) -> usize {
        match self.mode {
            ConnectMode::All => 1,
            ConnectMode::Rounds => plan.rounds().div_ceil(self.rounds_per_part),
        }
    }

    /// The order a size runs its parts in: the rounds in order, or backwards when the last
    /// round's comms are the ones open (the previous size ended with them), so that a size
    /// boundary costs no connect. A size's figures do not depend on the order of its rounds.
    /// Every rank calls it at the same point: each knows only its own comms, so all decide
    /// together ([`everyone`]).
    pub fn order(&self, plan: &Arc<Plan>, mpi: &Mpi) -> Vec<usize> {
        let parts = self.parts_of(plan);
        let last_is_open = parts > 1
            && everyone(
                mpi,
                self.open.as_deref() == Some(&self.part(plan, parts - 1).plan.connections()),
            );
        if last_is_open {
            (0..parts).rev().collect()
        } else {
            (0..parts).collect()
        }
    }

    /// Part `part` of `plan` (see [`Self::parts_of`]).
    pub fn part(&self, plan: &Arc<Plan>, part: usize) -> RoundPlan {
        match self.mode {
            ConnectMode::All => RoundPlan {
                plan: plan.clone(),
                whole_index: (0..plan.flows.len() as u32).collect(),
            },
            ConnectMode::Rounds => {
                let first = part * self.rounds_per_part;
                plan.rounds_only(first..(first + self.rounds_per_part).min(plan.rounds()))
            }
        }
    }

    /// Makes the comms of `connections` (round `round`'s) the open set: nothing when they are
    /// already, else the open ones closed and these connected. Every rank calls it at the same
    /// point (the handle exchange and the gather of the timings are collective). A failure
    /// names the round (the engine's error names the peer and its host).
    pub fn open(
        &mut self,
        engine: &Engine,
        mpi: &Mpi,
        round: usize,
        connections: Vec<(usize, usize)>,
    ) -> Result<Option<Connect>, Fatal> {
        // The same comms open on every rank, or a connect on every rank: a rank whose own
        // comms are the same in two rounds (none in either) still connects with the others.
        if everyone(mpi, self.open.as_deref() == Some(&connections)) {
            return Ok(None);
        }
        let which = match self.mode {
            ConnectMode::All => String::new(),
            ConnectMode::Rounds if self.rounds_per_part == 1 => format!("--connect rounds, round {round}: "),
            ConnectMode::Rounds => {
                let first = round * self.rounds_per_part;
                format!(
                    "--connect rounds, part {round} (rounds {first}-{}): ",
                    first + self.rounds_per_part - 1
                )
            }
        };
        if self.open.take().is_some() {
            // No rank closes a comm its peer may still be reading from (a warm-up's last
            // iteration has no barrier after it).
            engine
                .meet(mpi, "barrier before closing a round's comms")
                .map_err(Fatal::Stalled)?;
            engine
                .release()
                .map_err(|e| Fatal::Here(format!("{which}closing the comms: {e}")))?;
        }
        let start = Instant::now();
        let connections = Arc::new(connections);
        let timing = engine
            .connect(mpi, &connections, self.buffer_len)
            .map_err(|e| Fatal::Here(format!("{which}{e}")))?;
        // This rank's comms: a send comm where it sends, a receive comm where it receives (a
        // connection between two of its own endpoints is both); the job's are every rank's.
        let mine = engine.shared().topology.endpoints_of(mpi.rank());
        let ends: usize = connections
            .iter()
            .map(|(s, d)| usize::from(mine.contains(s)) + usize::from(mine.contains(d)))
            .sum();
        self.open = Some(connections);
        let (threads, fds) = own_usage();
        self.after_setup = (self.after_setup.0.max(threads), self.after_setup.1.max(fds));
        self.note_usage((threads, fds));
        let all = mpi.gather_f64(&[
            start.elapsed().as_secs_f64(),
            timing.connect.as_secs_f64(),
            timing.threads as f64,
            (ends * self.channels) as f64,
        ]);
        let max = |i: usize| all.iter().skip(i).step_by(4).copied().fold(0.0, f64::max);
        let connect = Connect {
            seconds: max(0),
            endpoint_seconds: max(1),
            setup_threads: max(2) as usize,
            comms: all.iter().skip(3).step_by(4).sum::<f64>() as usize,
        };
        let comms = connect.comms;
        if self.rounds.len() <= round {
            self.rounds.resize_with(round + 1, RoundSetup::default);
        }
        let r = &mut self.rounds[round];
        r.round = round;
        r.connects += 1;
        r.comms = r.comms.max(comms);
        r.seconds_total += connect.seconds;
        r.seconds_max = r.seconds_max.max(connect.seconds);
        if let Some(f) = &self.on_connect {
            f(&self.rounds);
        }
        Ok(Some(connect))
    }

    /// Samples this rank's threads and fds (after a round's iterations: helper threads that
    /// start at a comm's first transfer are running).
    pub fn sample(&mut self) {
        self.note_usage(own_usage());
    }

    fn note_usage(&mut self, (threads, fds): (u64, u64)) {
        self.peak = (self.peak.0.max(threads), self.peak.1.max(fds));
    }

    /// The first timed iteration of the run is starting on this rank.
    pub fn timed_start(&mut self, at: Instant) {
        if self.first_timed.is_none() {
            crate::trace::trace("first timed iteration");
        }
        self.first_timed.get_or_insert(at);
    }

    /// The run's setup in `report` (every rank calls it; rank 0's is the one written): the
    /// connects by round, the peaks by rank and the slowest rank's time to its first timed
    /// iteration.
    pub fn complete(&self, mpi: &Mpi, report: &mut SetupReport) {
        let first = self
            .first_timed
            .and_then(|t| Some(crate::trace::process_age()? - t.elapsed().as_secs_f64()))
            .unwrap_or(-1.0);
        let all = mpi.gather_f64(&[
            self.after_setup.0 as f64,
            self.after_setup.1 as f64,
            self.peak.0 as f64,
            self.peak.1 as f64,
            first,
        ]);
        let each = |i: usize| all.iter().skip(i).step_by(5).map(|&x| x as u64).collect();
        report.threads_after_setup = each(0);
        report.fds_after_setup = each(1);
        report.threads_peak = each(2);
        report.fds_peak = each(3);
        let firsts: Vec<f64> = all.iter().skip(4).step_by(5).copied().collect();
        report.first_timed_s = firsts
            .iter()
            .all(|&f| f >= 0.0)
            .then(|| firsts.iter().copied().fold(0.0, f64::max));
        report.connect = match self.mode {
            ConnectMode::All => "all",
            ConnectMode::Rounds => "rounds",
        }
        .to_string();
        report.rounds.clone_from(&self.rounds);
        report.connect_seconds_total = self.rounds.iter().map(|r| r.seconds_total).sum();
    }
}
