use super::*;
use crate::plan::{Direction, Holder, Pattern, Scope};

fn topo(ranks: usize, per_node: usize) -> Topology {
    Topology::with_ranks_per_node(
        ranks,
        per_node,
        1,
        (0..ranks).map(|r| format!("h{}", r / per_node)).collect(),
    )
}

/// `per_node` endpoints a node, on `nics` NICs round robin (eth1, eth2, ...).
fn rails(t: &Topology, nics: usize) -> Vec<String> {
    t.endpoints.iter().map(|e| format!("eth{}", e.gpu % nics + 1)).collect()
}

/// Flow times a synthetic job would measure: every flow of endpoint pair (s, d) posted at
/// `s / 1000` s and done at `1 + d / 1000` s, on both clocks.
fn times(plan: &Plan) -> Vec<FlowTimes> {
    plan.flows
        .iter()
        .map(|f| {
            let posted = f.src as f64 / 1000.0;
            let done = 1.0 + f.dst as f64 / 1000.0;
            FlowTimes {
                part: 0,
                posted: Some((posted, posted)),
                done: Some((done, done)),
            }
        })
        .collect()
}

/// Every rank's halves, each from its own held plan.
fn every_rank(t: &Topology, m: &Matrix, p: Pattern, scope: Scope) -> Vec<Halves> {
    (0..t.ranks())
        .map(|r| {
            let held = Plan::build_held(
                &Holder::Endpoints(t.endpoints_of(r)),
                p,
                scope,
                Direction::Bi,
                t,
                1 << 20,
                Some(3),
            )
            .unwrap();
            let h = m.halves(&held, &times(&held));
            // Through the wire format rank 0 receives them in.
            Halves::decode(&h.encode()).expect("decodes")
        })
        .collect()
}

/// Joined from every rank's own halves, the matrix is the whole plan's, link by link: each
/// endpoint pair's bytes, its time from the sender's first post to the receiver's last byte.
#[test]
fn halves_from_every_rank_join_into_the_whole_plans_pairs() {
    let t = topo(12, 3);
    for (p, scope) in [
        (Pattern::Fullmesh, Scope::InterNode),
        (Pattern::Ring, Scope::All),
        (Pattern::Sendrecv, Scope::InterNode),
    ] {
        let whole = Plan::build(p, scope, Direction::Bi, &t, 1 << 20, Some(3)).unwrap();
        let m = Matrix::new(&t, &rails(&t, 2), &[Some(0); 12], whole.totals.links);
        assert_eq!(m.level, Level::Endpoint);
        let pairs = m.merge(&every_rank(&t, &m, p, scope));
        assert_eq!(pairs.len() as u64, whole.totals.links, "{p}");
        for pr in &pairs {
            let (s, d) = (pr.src_rank.unwrap(), pr.dst_rank.unwrap());
            let bytes: u64 = whole
                .flows
                .iter()
                .filter(|f| (f.src, f.dst) == (s, d))
                .map(|f| f.len)
                .sum();
            assert_eq!(pr.bytes, bytes, "{p} {s}->{d}");
            let expect_us = (1.0 + d as f64 / 1000.0 - s as f64 / 1000.0) * 1e6;
            assert!((pr.time_us - expect_us).abs() < 1e-3, "{p} {s}->{d}: {}", pr.time_us);
            assert_eq!(pr.rail.as_deref(), Some(if d % 3 % 2 == 0 { "eth1" } else { "eth2" }));
            assert_eq!(pr.src_host, format!("h{}", s / 3));
        }
    }
}

/// Past [`LINKS_MAX`] endpoint pairs a link is a NIC's: its bytes are its endpoint pairs', its
/// time spans their earliest post to their latest byte; past it again, a node pair's.
#[test]
fn large_jobs_are_judged_per_nic_then_per_node() {
    assert_eq!(choose(LINKS_MAX, 64, 4), Level::Endpoint);
    assert_eq!(choose(258_048, 64, 4), Level::Nic, "64 x 8 x 4 fullmesh");
    assert_eq!(choose(4096 * 4088, 512, 4), Level::Node, "512 x 8 x 4 fullmesh");
    let t = topo(12, 3);
    let whole = Plan::build(Pattern::Fullmesh, Scope::InterNode, Direction::Bi, &t, 1 << 20, Some(3)).unwrap();
    for level in [Level::Nic, Level::Node] {
        let m = Matrix::new(&t, &rails(&t, 2), &[Some(0); 12], whole.totals.links).at(level);
        let links = m.merge(&every_rank(&t, &m, Pattern::Fullmesh, Scope::InterNode));
        // 4 nodes: 12 node pairs, each over 2 rails as NIC links.
        assert_eq!(links.len(), if level == Level::Nic { 24 } else { 12 }, "{level:?}");
        let total: u64 = links.iter().map(|l| l.bytes).sum();
        assert_eq!(total, whole.totals.network_bytes);
        assert_eq!(links.iter().map(|l| l.endpoint_pairs).sum::<u64>(), whole.totals.links);
        for l in &links {
            assert_eq!(l.level(), level);
            assert!(l.src_rank.is_none() && l.src_host != l.dst_host);
            // Node a's endpoints are 3a..3a+2: the earliest post is 3a's, the latest byte at
            // the last receiver of the link's rail (or node).
            let (a, b): (usize, usize) = (l.src_host[1..].parse().unwrap(), l.dst_host[1..].parse().unwrap());
            let last = match l.rail.as_deref() {
                Some("eth2") => 3 * b + 1,
                _ => 3 * b + 2,
            };
            let expect_us = (1.0 + last as f64 / 1000.0 - (3 * a) as f64 / 1000.0) * 1e6;
            assert!(
                (l.time_us - expect_us).abs() < 1e-3,
                "{level:?} {a}->{b}: {}",
                l.time_us
            );
        }
    }
}

/// Across kernels each end's time counts from its own start of the iteration, on one kernel
/// the shared monotonic clock: never a mix within one link.
#[test]
fn each_link_reads_the_clock_both_its_ends_share() {
    let t = topo(4, 2);
    let whole = Plan::build(Pattern::Sendrecv, Scope::InterNode, Direction::Bi, &t, 1 << 20, None).unwrap();
    let m = Matrix::new(
        &t,
        &rails(&t, 1),
        &[Some(0), Some(0), Some(1), Some(1)],
        whole.totals.links,
    );
    let at = |mono: f64, since: f64| Some((mono, since));
    let times: Vec<FlowTimes> = whole
        .flows
        .iter()
        .map(|_| FlowTimes {
            part: 0,
            posted: at(100.0, 0.001),
            done: at(200.0, 0.003),
        })
        .collect();
    let pairs = m.merge(&[m.halves(&whole, &times)]);
    assert!(
        pairs.iter().all(|p| (p.time_us - 2000.0).abs() < 1e-6),
        "since each end's start"
    );
    let one = Matrix::new(&t, &rails(&t, 1), &[Some(0); 4], whole.totals.links);
    let pairs = one.merge(&[one.halves(&whole, &times)]);
    assert!(
        pairs.iter().all(|p| (p.time_us - 100e6).abs() < 1e-3),
        "the shared clock"
    );
}

#[test]
fn a_message_of_another_shape_is_refused() {
    assert_eq!(Halves::decode(&[]), None);
    assert_eq!(Halves::decode(&[2.0, 1.0, 2.0]), None);
    assert_eq!(
        Halves::decode(&[0.0, 1.0, 2.0, 3.0]),
        None,
        "a received half is 4 numbers"
    );
    assert_eq!(Halves::decode(&[0.5]), None, "a count is a whole number");
    assert_eq!(Halves::decode(&[f64::NAN]), None);
    assert_eq!(Halves::decode(&[1e300]), None, "a count past any message");
    assert_eq!(Halves::decode(&[0.0, 1.5, 2.0, 0.0, 7.0]), None, "a key is whole");
    assert_eq!(Halves::decode(&[0.0]), Some(Halves::default()));
}

/// `--connect rounds`: a NIC's link whose endpoint pairs ran in two parts of the size, each part
/// timed from its own start: the link's time is its two parts' times added, never the span from
/// the first part's first post to the other part's last byte (on other kernels each part's
/// clock restarts: that read 8.4 GB/s for a 1 GB/s link in review).
#[test]
fn a_link_over_several_parts_adds_its_parts_times() {
    let t = topo(4, 2);
    let whole = Plan::build(Pattern::Fullmesh, Scope::InterNode, Direction::Bi, &t, 4 << 20, Some(1)).unwrap();
    assert_eq!(whole.rounds(), 2);
    let m = Matrix::new(
        &t,
        &rails(&t, 1),
        &[Some(0), Some(0), Some(1), Some(1)],
        whole.totals.links,
    )
    .at(Level::Nic);
    // Every flow 1 ms after its part's start, each part from 0 on its own clock.
    let times: Vec<FlowTimes> = whole
        .flows
        .iter()
        .map(|f| FlowTimes {
            part: f.round,
            posted: Some((0.0, 0.0)),
            done: Some((0.001, 0.001)),
        })
        .collect();
    let links = m.merge(&[m.halves(&whole, &times)]);
    for l in &links {
        // node0 -> node1 on eth1: endpoints 0, 1 to 2, 3 over 2 rounds of one peer each.
        let parts: std::collections::BTreeSet<u32> = whole
            .flows
            .iter()
            .filter(|f| format!("h{}", f.src / 2) == l.src_host && format!("h{}", f.dst / 2) == l.dst_host)
            .map(|f| f.round)
            .collect();
        let expect = parts.len() as f64 * 1000.0;
        assert!(
            (l.time_us - expect).abs() < 1e-6,
            "{} -> {}: {} us, {expect} expected",
            l.src_host,
            l.dst_host,
            l.time_us
        );
    }
    assert!(
        links.iter().any(|l| l.time_us > 1500.0),
        "some link spans both parts: {links:?}"
    );
}
