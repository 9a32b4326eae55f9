//! Chunk striping: which chunks of which jobs a helper thread moves, in order, with one chunk
//! of look-ahead ([`Chunks::peek`]) for the send pipeline's prefetch.

use super::{Fetch, Job, MAX_REQUESTS};

/// One chunk of a job, as a helper thread moves it.
#[derive(Debug, Clone, Copy)]
pub struct Chunk {
    pub job: Job,
    /// Index of the chunk in its job.
    pub j: u64,
    /// Offset and length of the chunk in the job's buffer.
    pub off: usize,
    pub len: usize,
}

impl Chunk {
    pub(super) fn slot(&self) -> usize {
        self.job.seq as usize % MAX_REQUESTS
    }

    /// Same request, same chunk.
    pub fn same(&self, other: &Chunk) -> bool {
        self.job.seq == other.job.seq && self.j == other.j
    }
}

/// What [`Chunks::next`] found.
#[derive(Debug, Clone, Copy)]
pub enum Step {
    Chunk(Chunk),
    /// No chunk available yet (non-blocking calls only).
    Empty,
    Closed,
    /// The next job is hit by the `stall` fault.
    Stall,
}

/// A helper thread's cursor over its chunks, in job order: chunk `j` of a job whose first chunk
/// has the comm-wide number `first_chunk` belongs to socket `(first_chunk + j) % nsocks`.
/// [`peek`](Self::peek) looks one chunk ahead without blocking, fetching at most one job early
/// (kept in `ahead`, so nothing is skipped).
#[derive(Debug)]
pub struct Chunks {
    idx: u64,
    nsocks: u64,
    cs: usize,
    cur: Option<Job>,
    /// The next chunk index of `cur` to hand out.
    j: u64,
    ahead: Option<Job>,
}

impl Chunks {
    pub fn new(idx: usize, nsocks: usize, chunk_size: usize) -> Self {
        Self {
            idx: idx as u64,
            nsocks: nsocks as u64,
            cs: chunk_size,
            cur: None,
            j: 0,
            ahead: None,
        }
    }

    /// First chunk `j` of `job` with `(first_chunk + j) % nsocks == idx` (then every nsocks-th).
    fn first(&self, job: &Job) -> u64 {
        (self.idx + self.nsocks - job.first_chunk % self.nsocks) % self.nsocks
    }

    fn get(&self, job: &Job, j: u64) -> Option<Chunk> {
        if j >= job.len.div_ceil(self.cs) as u64 {
            return None;
        }
        let off = j as usize * self.cs;
        Some(Chunk {
            job: *job,
            j,
            off,
            len: self.cs.min(job.len - off),
        })
    }

    /// The next chunk; `fetch(block)` supplies jobs. Entering a job for which `stall(seq)` holds
    /// returns [`Step::Stall`].
    pub fn next(&mut self, fetch: &mut impl FnMut(bool) -> Fetch, block: bool, stall: &impl Fn(u64) -> bool) -> Step {
        loop {
            if let Some(job) = self.cur {
                if let Some(c) = self.get(&job, self.j) {
                    self.j += self.nsocks;
                    return Step::Chunk(c);
                }
                self.cur = None;
            }
            let job = match self.ahead.take() {
                Some(job) => job,
                None => match fetch(block) {
                    Fetch::Job(job) => job,
                    Fetch::Empty => return Step::Empty,
                    Fetch::Closed => return Step::Closed,
                },
            };
            if stall(job.seq) {
                return Step::Stall;
            }
            self.j = self.first(&job);
            self.cur = Some(job);
        }
    }

    /// The chunk the next [`next`](Self::next) call will return, if it is known without blocking:
    /// in the current job, or in the first already published job with a chunk for this socket
    /// (None if a stalled job comes first). Jobs without a chunk for this socket are consumed
    /// here, exactly as `next` would skip them; the job holding the answer is kept in `ahead`.
    pub fn peek(&mut self, fetch: &mut impl FnMut(bool) -> Fetch, stall: &impl Fn(u64) -> bool) -> Option<Chunk> {
        if let Some(job) = self.cur {
            if let Some(c) = self.get(&job, self.j) {
                return Some(c);
            }
        }
        loop {
            if self.ahead.is_none() {
                match fetch(false) {
                    Fetch::Job(job) => self.ahead = Some(job),
                    Fetch::Empty | Fetch::Closed => return None,
                }
            }
            let job = self.ahead?;
            if stall(job.seq) {
                return None;
            }
            if let Some(c) = self.get(&job, self.first(&job)) {
                return Some(c);
            }
            // No chunk of this job is ours (e.g. 4 chunks per request over 8 sockets): `next`
            // would skip it as well, so drop it and look at the following one.
            self.ahead = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use tcpx_gpu::unpack::Rng;

    /// the comm numbers them.
    fn jobs(rng: &mut Rng, n: usize, cs: usize) -> Vec<Job> {
        let mut first_chunk = 0;
        (0..n as u64)
            .map(|seq| {
                let len = match rng.below(4) {
                    0 => 0,
                    1 => 1 + rng.below(cs as u64) as usize,
                    _ => rng.below(6 * cs as u64) as usize,
                };
                let job = Job {
                    seq,
                    ptr: 0,
                    len,
                    first_chunk,
                    cuda: rng.below(4) != 0,
                };
                first_chunk += len.div_ceil(cs) as u64;
                job
            })
            .collect()
    }

    /// The chunks of socket `idx`, as the pre-pipelining worker enumerated them.
    fn reference(jobs: &[Job], idx: usize, nsocks: usize, cs: usize) -> Vec<(u64, u64, usize, usize)> {
        let (idx, nsocks) = (idx as u64, nsocks as u64);
        let mut out = Vec::new();
        for job in jobs {
            let nchunks = job.len.div_ceil(cs) as u64;
            let mut j = (idx + nsocks - job.first_chunk % nsocks) % nsocks;
            while j < nchunks {
                let off = j as usize * cs;
                out.push((job.seq, j, off, cs.min(job.len - off)));
                j += nsocks;
            }
        }
        out
    }

    fn key(c: &Chunk) -> (u64, u64, usize, usize) {
        (c.job.seq, c.j, c.off, c.len)
    }

    /// A job source that publishes jobs one at a time at random moments; `Closed` at the end.
    struct Source<'a> {
        rng: Rng,
        jobs: VecDeque<Job>,
        published: usize,
        all: &'a [Job],
    }

    impl<'a> Source<'a> {
        fn new(all: &'a [Job], seed: u64) -> Self {
            Self {
                rng: Rng::new(seed),
                jobs: VecDeque::new(),
                published: 0,
                all,
            }
        }

        fn fetch(&mut self, block: bool) -> Fetch {
            if self.published < self.all.len() && (block || self.rng.below(2) == 0) {
                self.jobs.push_back(self.all[self.published]);
                self.published += 1;
            }
            match self.jobs.pop_front() {
                Some(j) => Fetch::Job(j),
                None if self.published == self.all.len() => Fetch::Closed,
                None => Fetch::Empty,
            }
        }
    }

    #[test]
    fn chunks_match_the_striping_and_peek_is_exact() {
        let mut rng = Rng::new(7);
        for round in 0..300 {
            let cs = 1 + rng.below(5000) as usize;
            let nsocks = 1 + rng.below(8) as usize;
            let njobs = rng.below(40) as usize;
            let all = jobs(&mut rng, njobs, cs);
            let stall_at = if round % 5 == 0 {
                rng.below(all.len() as u64 + 1)
            } else {
                u64::MAX
            };
            let stall = |seq: u64| seq >= stall_at;
            let mut seen = std::collections::HashSet::new();
            for idx in 0..nsocks {
                let mut src = Source::new(&all, round * 8 + idx as u64);
                let mut fetch = |block: bool| src.fetch(block);
                let mut cur = Chunks::new(idx, nsocks, cs);
                let mut got = Vec::new();
                let mut peeked: Option<Chunk> = None;
                let end = loop {
                    let step = match cur.next(&mut fetch, false, &stall) {
                        Step::Empty => cur.next(&mut fetch, true, &stall),
                        s => s,
                    };
                    let c = match step {
                        Step::Chunk(c) => c,
                        s => break s,
                    };
                    if let Some(p) = peeked.take() {
                        assert_eq!(key(&p), key(&c), "peek announced another chunk");
                    }
                    assert!(!stall(c.job.seq));
                    got.push(key(&c));
                    if rng.below(2) == 0 {
                        peeked = cur.peek(&mut fetch, &stall);
                        if let Some(p) = peeked {
                            assert!(!stall(p.job.seq));
                            // Peeking twice gives the same answer.
                            assert_eq!(cur.peek(&mut fetch, &stall).map(|q| key(&q)), Some(key(&p)));
                        }
                    }
                };
                let upto: Vec<Job> = all.iter().copied().filter(|j| !stall(j.seq)).collect();
                assert_eq!(
                    got,
                    reference(&upto, idx, nsocks, cs),
                    "socket {idx} of {nsocks}, chunk {cs}"
                );
                assert!(peeked.is_none(), "peek announced a chunk that never came");
                if stall_at < all.len() as u64 {
                    assert!(matches!(end, Step::Stall));
                } else {
                    assert!(matches!(end, Step::Closed));
                }
                for k in got {
                    assert!(seen.insert((k.0, k.1)), "chunk handed to two sockets");
                }
            }
            let total: u64 = all
                .iter()
                .filter(|j| !stall(j.seq))
                .map(|j| j.len.div_ceil(cs) as u64)
                .sum();
            assert_eq!(seen.len() as u64, total, "every chunk on exactly one socket");
        }
    }

    #[test]
    fn peek_looks_past_jobs_without_a_chunk_for_this_socket() {
        // 4 chunks per request over 8 sockets: socket 1 owns chunk 1 of every other request.
        let cs = 1 << 20;
        let all: Vec<Job> = (0..6)
            .map(|seq| Job {
                seq,
                ptr: 0,
                len: 4 * cs,
                first_chunk: 4 * seq,
                cuda: true,
            })
            .collect();
        let mut queue: VecDeque<Job> = all.iter().copied().collect();
        let mut fetch = |_block: bool| queue.pop_front().map_or(Fetch::Closed, Fetch::Job);
        let no_stall = |_: u64| false;
        let mut cur = Chunks::new(1, 8, cs);
        for seq in [0u64, 2, 4] {
            let Step::Chunk(c) = cur.next(&mut fetch, false, &no_stall) else {
                panic!("chunk of request {seq} expected")
            };
            assert_eq!((c.job.seq, c.j), (seq, 1));
            let p = cur.peek(&mut fetch, &no_stall);
            assert_eq!(p.map(|p| (p.job.seq, p.j)), (seq < 4).then_some((seq + 2, 1)));
        }
        // A stalled request in between hides the next chunk.
        let mut queue: VecDeque<Job> = all.iter().copied().collect();
        let mut fetch = |_block: bool| queue.pop_front().map_or(Fetch::Closed, Fetch::Job);
        let stall = |seq: u64| seq >= 1;
        let mut cur = Chunks::new(1, 8, cs);
        assert!(matches!(cur.next(&mut fetch, false, &stall), Step::Chunk(_)));
        assert!(cur.peek(&mut fetch, &stall).is_none());
        assert!(matches!(cur.next(&mut fetch, false, &stall), Step::Stall));
    }
}
