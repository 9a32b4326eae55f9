//! Who ended the run: the blame graph of every rank's account (pure).
//!
//! When one rank dies, stops or fails, most of the others fail after it, each naming the peer
//! whose connection broke (`[peer rank 38 gpu 1 (node4) over eth1]: peer closed the
//! connection`). The first error rank 0 hears is often such a victim's. So every rank's account
//! goes into a graph: an edge from each rank whose own error is remote (a peer that closed,
//! reset or timed out) to the peer it names. The root of a chain is the culprit: a rank that
//! reported a local error (its own plugin or system call failed), one signalled by a process
//! other than its launcher, one that is blamed and blames nobody, or one blamed that said
//! nothing within the grace (silent; `killed` when the blamers saw its connections closed or
//! reset, as a kill -9 leaves them). A circle of blame has no such root: its most blamed member
//! stands for it. Victims are counted, never the headline.

use std::collections::BTreeSet;

/// What one rank's own error says about the cause ([`blame_of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blame {
    /// The other rank the error names (`[peer rank N ...]`, or `rank N failed ...` when the
    /// error echoes rank N's report).
    pub peer: Option<usize>,
    /// The rank's own plugin or system call failed for a local reason (not a peer that closed,
    /// reset or timed out).
    pub local: bool,
    /// The NIC of the comm involved (`... over eth1]`), when the error names it.
    pub nic: Option<String>,
}

/// Phrases of an error caused by the other side: the plugin's `ncclRemoteError` and
/// `ncclTimeout`, the socket's words for a peer gone, the engine's for a peer that never came.
const REMOTE: [&str; 16] = [
    "ncclremoteerror",
    "nccltimeout",
    "peer closed",
    "closed the connection",
    "reset by peer",
    "connection reset",
    "broken pipe",
    "timed out",
    "os error 104",
    "os error 110",
    "os error 32",
    // The peer's listener is gone: its process ended, or closed it after its own failure.
    "connection refused",
    "os error 111",
    "failed while the others waited",
    "did not finish within -t",
    "stalled",
];

/// Phrases of a connection that the peer's end closed or reset (a process gone: killed or
/// crashed), as opposed to one that went quiet.
const CLOSED: [&str; 8] = [
    "closed",
    "connection refused",
    "os error 111",
    "reset",
    "broken pipe",
    "os error 104",
    "os error 32",
    "unexpected eof",
];

/// What `rank`'s error (its first line) says: the peer it blames and whether it is local.
pub fn blame_of(rank: usize, error: &str) -> Blame {
    let lower = error.to_ascii_lowercase();
    let echo = error
        .strip_prefix("rank ")
        .and_then(|rest| rest.split_once(" failed"))
        .and_then(|(n, _)| n.parse::<usize>().ok());
    let (named, nic) = match error.find("[peer rank ") {
        Some(at) => {
            let rest = &error[at + "[peer rank ".len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let bracket = rest.split(']').next().unwrap_or("");
            let nic = bracket.rsplit_once(" over ").map(|(_, n)| n.trim().to_string());
            (digits.parse::<usize>().ok(), nic)
        }
        None => (None, None),
    };
    let remote = echo.is_some() || REMOTE.iter().any(|p| lower.contains(p));
    Blame {
        peer: echo.or(named).filter(|&p| p != rank),
        local: !remote,
        nic,
    }
}

/// One rank's account as the job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Account {
    /// Nothing heard and nothing awaited (a rank that did not fail).
    Unheard,
    /// It answered as the job ended, with no error of its own.
    Fine,
    /// Its own error, in `phase`.
    Failed { phase: String, error: String },
    /// A process other than its launcher signalled it.
    Signalled { signal: String, from: String },
    /// An answer was awaited (after the launcher's signal, after a timeout) and none came.
    Silent,
}

/// Why a root is the culprit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// It reported an error of its own (a local plugin or system call failure).
    LocalError,
    /// Blamed (or awaited) and said nothing: stopped, hung or unreachable.
    Silent,
    /// A process other than its launcher signalled it.
    Signalled,
    /// Blamed, said nothing, and its peers saw its connections closed or reset: the process
    /// is gone (kill -9, a crash, the OOM killer).
    Killed,
    /// Its own error names no peer (or the blame goes round in a circle), and this many ranks'
    /// errors name it.
    BlamedBy(usize),
}

impl Reason {
    /// `local-error`, `silent`, `signalled`, `killed`, `blamed-by-N` (summary.json's words).
    pub fn name(self) -> String {
        match self {
            Reason::LocalError => "local-error".into(),
            Reason::Silent => "silent".into(),
            Reason::Signalled => "signalled".into(),
            Reason::Killed => "killed".into(),
            Reason::BlamedBy(n) => format!("blamed-by-{n}"),
        }
    }

    /// Which of two roots with as many victims is the headline: a cause stated outright first.
    fn rank_order(self) -> u8 {
        match self {
            Reason::Signalled => 0,
            Reason::LocalError => 1,
            Reason::Killed => 2,
            Reason::Silent => 3,
            Reason::BlamedBy(_) => 4,
        }
    }
}

/// A root of the blame graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    pub rank: usize,
    pub reason: Reason,
    /// Ranks whose own (remote) error names this rank.
    pub blamed_by: Vec<usize>,
    /// Failing ranks whose chain of blame ends here (`blamed_by` among them), in rank order.
    pub victims: Vec<usize>,
    /// The NIC of the comms involved: the one its own error names, else the one every
    /// blamer's error names (their side), if they agree.
    pub nic: Option<String>,
}

/// The roots of `accounts` (index: rank), the headline first: most victims, then a cause
/// stated outright (signalled, local error, killed, silent, blamed), then the lowest rank.
/// Empty when no rank failed, was signalled or fell silent.
pub fn roots(accounts: &[Account]) -> Vec<Root> {
    let blames: Vec<Option<Blame>> = accounts
        .iter()
        .enumerate()
        .map(|(r, a)| match a {
            Account::Failed { error, .. } => Some(blame_of(r, error)),
            _ => None,
        })
        .collect();
    let edge: Vec<Option<usize>> = blames
        .iter()
        .map(|b| b.as_ref().filter(|b| !b.local).and_then(|b| b.peer))
        .map(|p| p.filter(|&p| p < accounts.len()))
        .collect();
    let mut blamers = vec![Vec::new(); accounts.len()];
    for (r, p) in edge.iter().enumerate() {
        if let Some(p) = p {
            blamers[*p].push(r);
        }
    }
    let graph = Graph {
        accounts,
        blames: &blames,
        edge: &edge,
        blamers: &blamers,
    };
    let mut found: Vec<Root> = Vec::new();
    for (r, account) in accounts.iter().enumerate() {
        let Some((root, reason)) = graph.resolve(r) else {
            continue;
        };
        let at = found.iter().position(|f| f.rank == root).unwrap_or_else(|| {
            found.push(graph.root(root, reason));
            found.len() - 1
        });
        if r != root && matches!(account, Account::Failed { .. }) {
            found[at].victims.push(r);
        }
    }
    found.sort_by_key(|f| (std::cmp::Reverse(f.victims.len()), f.reason.rank_order(), f.rank));
    found
}

struct Graph<'a> {
    accounts: &'a [Account],
    blames: &'a [Option<Blame>],
    edge: &'a [Option<usize>],
    blamers: &'a [Vec<usize>],
}

impl Graph<'_> {
    /// Why `r` is a root, if it is one.
    fn reason(&self, r: usize) -> Option<Reason> {
        let blamed = self.blamers[r].len();
        match &self.accounts[r] {
            Account::Signalled { .. } => Some(Reason::Signalled),
            Account::Failed { .. } if self.blames[r].as_ref().is_some_and(|b| b.local) => Some(Reason::LocalError),
            Account::Failed { .. } if self.edge[r].is_none() => Some(Reason::BlamedBy(blamed)),
            Account::Fine if blamed > 0 => Some(Reason::BlamedBy(blamed)),
            Account::Silent => Some(self.gone_or_silent(r)),
            Account::Unheard if blamed > 0 => Some(self.gone_or_silent(r)),
            _ => None,
        }
    }

    /// A rank that said nothing: `killed` when a blamer saw its connection closed or reset.
    fn gone_or_silent(&self, r: usize) -> Reason {
        let closed = self.blamers[r].iter().any(|&b| match &self.accounts[b] {
            Account::Failed { error, .. } => {
                let lower = error.to_ascii_lowercase();
                CLOSED.iter().any(|p| lower.contains(p))
            }
            _ => false,
        });
        if closed {
            Reason::Killed
        } else {
            Reason::Silent
        }
    }

    /// The root `r`'s chain of blame ends at, and why (a circle: its most blamed member).
    fn resolve(&self, r: usize) -> Option<(usize, Reason)> {
        let mut seen = BTreeSet::new();
        let mut at = r;
        loop {
            if let Some(reason) = self.reason(at) {
                return Some((at, reason));
            }
            seen.insert(at);
            match self.edge[at] {
                Some(next) if !seen.contains(&next) => at = next,
                Some(next) => {
                    // A circle: every member blames the next; the most blamed stands for it.
                    let mut circle = vec![next];
                    let mut c = self.edge[next]?;
                    while c != next {
                        circle.push(c);
                        c = self.edge[c]?;
                    }
                    let head = circle
                        .into_iter()
                        .min_by_key(|&m| (std::cmp::Reverse(self.blamers[m].len()), m))?;
                    return Some((head, Reason::BlamedBy(self.blamers[head].len())));
                }
                None => return None,
            }
        }
    }

    fn root(&self, rank: usize, reason: Reason) -> Root {
        let own = self.blames[rank].as_ref().and_then(|b| b.nic.clone());
        let theirs: BTreeSet<Option<String>> = self.blamers[rank]
            .iter()
            .map(|&b| self.blames[b].as_ref().and_then(|b| b.nic.clone()))
            .collect();
        let agreed = (theirs.len() == 1)
            .then(|| theirs.into_iter().next().flatten())
            .flatten();
        Root {
            rank,
            reason,
            blamed_by: self.blamers[rank].clone(),
            victims: Vec::new(),
            nic: own.or(agreed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(error: &str) -> Account {
        Account::Failed {
            phase: "sweep".into(),
            error: error.into(),
        }
    }

    /// `rank N`'s peer closed on this rank: a remote error naming N (over eth1).
    fn closed_by(n: usize) -> Account {
        failed(&format!(
            "endpoint 3: irecv failed: ncclRemoteError (6) [peer rank {n} gpu 0 (node{n}) over eth1]: peer {n} closed the connection with 1 receive(s) outstanding"
        ))
    }

    fn timed_out_on(n: usize) -> Account {
        failed(&format!(
            "endpoint 1: isend failed: ncclRemoteError (6) [peer rank {n} gpu 1 (node{n}) over eth2]: ctrl socket sending to peer: Connection timed out (os error 110)"
        ))
    }

    #[test]
    fn errors_say_whom_they_blame_and_whether_they_are_local() {
        let b = blame_of(
            0,
            "endpoint 0: irecv failed: ncclRemoteError (6) [peer rank 75 gpu 3 (node9) over eth3]: peer closed",
        );
        assert_eq!((b.peer, b.local, b.nic.as_deref()), (Some(75), false, Some("eth3")));
        let b = blame_of(
            2,
            "connection setup failed: accept: TCPXEMU_FAULT=accept (injected failure) (ncclSystemError)",
        );
        assert_eq!((b.peer, b.local), (None, true));
        // A peer named by an error of this rank's own plugin is not blamed for it.
        let b = blame_of(1, "isend failed: ncclInternalError (3) [peer rank 4 gpu 0]: boom");
        assert_eq!((b.peer, b.local), (Some(4), true));
        // The echo of another rank's report blames that rank.
        let b = blame_of(0, "rank 5 failed while the others waited in the barrier: x");
        assert_eq!((b.peer, b.local), (Some(5), false));
        let b = blame_of(0, "rank 5 failed (sweep): x");
        assert_eq!(b.peer, Some(5));
        // A comm of two endpoints of one rank: no one else to blame.
        assert_eq!(blame_of(3, "x [peer rank 3 gpu 1 (n)]: reset by peer").peer, None);
    }

    #[test]
    fn a_chain_ends_at_the_rank_that_blames_nobody() {
        // 0 -> 1 -> 2, and 2's own error is local.
        let accounts = vec![
            closed_by(1),
            timed_out_on(2),
            failed("spawning helper thread: Resource temporarily unavailable"),
            Account::Unheard,
        ];
        let r = roots(&accounts);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!((r[0].rank, r[0].reason), (2, Reason::LocalError));
        assert_eq!(r[0].victims, [0, 1]);
        assert_eq!(r[0].blamed_by, [1]);
    }

    #[test]
    fn a_silent_rank_blamed_by_many_is_the_root_not_the_rank_heard_first() {
        // The 128-rank run: rank 38 printed nothing; rank 0 blamed 75, 75 and ten others 38.
        let mut accounts = vec![Account::Unheard; 128];
        accounts[0] = closed_by(75);
        accounts[75] = timed_out_on(38);
        for account in &mut accounts[40..50] {
            *account = closed_by(38);
        }
        let r = roots(&accounts);
        assert_eq!(r[0].rank, 38, "{r:?}");
        assert_eq!(r[0].reason, Reason::Killed, "its connections were seen closed");
        assert_eq!(r[0].victims.len(), 12);
        assert_eq!(r[0].blamed_by.len(), 11);
        assert_eq!(r[0].nic.as_deref(), None, "the blamers name eth1 and eth2");
        // Only timeouts: silent (stopped or hung), not gone.
        let mut quiet = vec![Account::Unheard; 4];
        quiet[1] = timed_out_on(3);
        quiet[2] = timed_out_on(3);
        let r = roots(&quiet);
        assert_eq!((r[0].rank, r[0].reason), (3, Reason::Silent));
        assert_eq!(r[0].nic.as_deref(), Some("eth2"), "every blamer names eth2");
    }

    #[test]
    fn a_circle_is_stood_for_by_its_most_blamed_member() {
        // 1 <-> 2 blame each other, 3 blames 2 too.
        let accounts = vec![Account::Fine, timed_out_on(2), timed_out_on(1), closed_by(2)];
        let r = roots(&accounts);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!((r[0].rank, r[0].reason), (2, Reason::BlamedBy(2)));
        assert_eq!(r[0].victims, [1, 3]);
        // A circle of three with no extra blame: the lowest member.
        let accounts = vec![timed_out_on(1), timed_out_on(2), timed_out_on(0)];
        let r = roots(&accounts);
        assert_eq!((r[0].rank, r[0].reason), (0, Reason::BlamedBy(1)));
        assert_eq!(r[0].victims, [1, 2]);
    }

    #[test]
    fn two_roots_the_one_with_more_victims_is_the_headline() {
        let mut accounts = vec![Account::Unheard; 8];
        accounts[1] = failed("cudaMalloc: out of memory");
        accounts[2] = closed_by(1);
        accounts[5] = Account::Silent;
        accounts[6] = timed_out_on(5);
        accounts[7] = timed_out_on(5);
        let r = roots(&accounts);
        assert_eq!(r.iter().map(|r| r.rank).collect::<Vec<_>>(), [5, 1]);
        assert_eq!(r[0].reason, Reason::Silent);
        assert_eq!(r[1].reason, Reason::LocalError);
        // As many victims: the cause stated outright first.
        accounts[7] = Account::Unheard;
        let r = roots(&accounts);
        assert_eq!(r.iter().map(|r| r.rank).collect::<Vec<_>>(), [1, 5]);
    }

    #[test]
    fn everyone_blaming_rank_0_makes_it_the_root() {
        let accounts = vec![Account::Fine, closed_by(0), closed_by(0), timed_out_on(0)];
        let r = roots(&accounts);
        assert_eq!((r[0].rank, r[0].reason), (0, Reason::BlamedBy(3)));
        assert_eq!(r[0].victims, [1, 2, 3]);
        // Rank 0 blaming one of them back: a circle, still rank 0.
        let accounts = vec![closed_by(2), closed_by(0), closed_by(0), timed_out_on(0)];
        let r = roots(&accounts);
        assert_eq!((r[0].rank, r[0].reason), (0, Reason::BlamedBy(3)));
        // Rank 0 silent (stopped): silent.
        let accounts = vec![Account::Silent, Account::Fine, Account::Fine];
        let r = roots(&accounts);
        assert_eq!((r[0].rank, r[0].reason, r[0].victims.len()), (0, Reason::Silent, 0));
    }

    #[test]
    fn a_signalled_rank_and_a_killed_one_are_roots_and_a_quiet_job_has_none() {
        let mut accounts = vec![Account::Fine; 4];
        assert!(
            roots(&accounts).is_empty(),
            "mpirun's SIGTERM to every rank: no culprit"
        );
        accounts[2] = Account::Signalled {
            signal: "SIGTERM".into(),
            from: "sh (pid 7)".into(),
        };
        let r = roots(&accounts);
        assert_eq!((r[0].rank, r[0].reason), (2, Reason::Signalled));
        // kill -9 that no one noticed yet: the one that did not answer.
        let accounts = vec![Account::Fine, Account::Fine, Account::Silent, Account::Fine];
        assert_eq!(roots(&accounts)[0].rank, 2);
        assert!(roots(&[Account::Unheard, Account::Unheard]).is_empty());
    }

    #[test]
    fn reasons_have_their_documented_names() {
        let names: Vec<String> = [
            Reason::LocalError,
            Reason::Silent,
            Reason::Signalled,
            Reason::Killed,
            Reason::BlamedBy(12),
        ]
        .into_iter()
        .map(Reason::name)
        .collect();
        assert_eq!(names, ["local-error", "silent", "signalled", "killed", "blamed-by-12"]);
    }
}
