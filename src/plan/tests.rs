use super::*;
use crate::topology::Topology;

fn topo(ranks: usize, per_node: usize) -> Topology {
    Topology::with_ranks_per_node(ranks, per_node, 1, (0..ranks).map(|r| format!("h{r}")).collect())
}

fn build(p: Pattern, s: Scope, t: &Topology, size: u64) -> Plan {
    Plan::build(p, s, Direction::Bi, t, size, None).unwrap()
}

/// Rounds on their own cover the whole plan once, each with only its own round's
/// connections, and fill exactly the ranges they send.
#[test]
fn rounds_alone_cover_the_plan_once() {
    let t = topo(5, 5);
    let plan = Arc::new(Plan::build(Pattern::Fullmesh, Scope::All, Direction::Bi, &t, 5000, Some(1)).unwrap());
    assert_eq!(plan.rounds(), 4);
    let mut seen = vec![0; plan.flows.len()];
    for r in 0..plan.rounds() {
        let round = plan.rounds_only(r..r + 1);
        assert!(round.plan.flows.iter().all(|f| f.round == 0));
        for (f, &w) in round.plan.flows.iter().zip(&round.whole_index) {
            assert_eq!(
                (f.src, f.dst, f.len),
                (plan.flows[w as usize].src, plan.flows[w as usize].dst, f.len)
            );
            seen[w as usize] += 1;
        }
        assert_eq!(round.plan.connections().len(), 5, "one peer per endpoint in round {r}");
        for e in 0..5 {
            let filled: u64 = round.plan.fills[e].iter().map(|f| f.len).sum();
            let sent: u64 = round.plan.flows.iter().filter(|f| f.src == e).map(|f| f.len).sum();
            assert_eq!(filled, sent, "round {r} endpoint {e}");
        }
    }
    assert!(seen.iter().all(|&n| n == 1));
    let ring = Arc::new(build(Pattern::Ring, Scope::All, &topo(3, 3), 3000));
    assert!(Arc::ptr_eq(&ring.rounds_only(0..1).plan, &ring));
}

#[test]
fn sendrecv_factor_is_one() {
    let plan = build(Pattern::Sendrecv, Scope::All, &topo(4, 4), 1 << 20);
    assert_eq!(plan.flows.len(), 4);
    assert_eq!(plan.flows[3].dst, 0);
    assert_eq!(plan.busbw_factor(), 1.0);
}

#[test]
fn ring_factor_matches_allreduce() {
    let plan = build(Pattern::Ring, Scope::All, &topo(4, 4), 4096);
    assert!((plan.busbw_factor() - 2.0 * 3.0 / 4.0).abs() < 1e-12);
    assert_eq!(plan.flows.len(), 4 * 6);
}

#[test]
fn ring_forwards_what_it_received() {
    let plan = build(Pattern::Ring, Scope::All, &topo(3, 3), 3000);
    // Step k+1 of endpoint e sends the region step k of e-1 wrote into e, with the same origin.
    for f in plan.flows.iter().filter(|f| f.forwards) {
        let feeder = plan
            .flows
            .iter()
            .find(|g| g.dst == f.src && g.dst_off == f.src_off)
            .unwrap();
        assert_eq!(feeder.origin, f.origin);
        assert_eq!(feeder.len, f.len);
    }
}

#[test]
fn fullmesh_self_block_is_local_and_not_network() {
    let plan = build(Pattern::Fullmesh, Scope::All, &topo(4, 4), 4000);
    assert_eq!(plan.flows.iter().filter(|f| f.is_local()).count(), 4);
    assert_eq!(plan.network_bytes(), 4 * 3 * 1000);
    assert!((plan.busbw_factor() - 0.75).abs() < 1e-12);
}

#[test]
fn inter_node_scope_keeps_nccl_tests_busbw_and_counts_network_bytes_apart() {
    let plan = build(Pattern::Fullmesh, Scope::InterNode, &topo(4, 2), 4000);
    assert!(plan.flows.iter().all(|f| f.src / 2 != f.dst / 2));
    assert!((plan.busbw_factor() - 0.75).abs() < 1e-12, "alltoall's (n-1)/n");
    assert!(
        (plan.netbw_factor() - 0.5).abs() < 1e-12,
        "2 of 4 blocks cross the network"
    );
    for p in [Pattern::Sendrecv, Pattern::Ring, Pattern::Fullmesh] {
        let all = build(p, Scope::All, &topo(4, 2), 4000);
        assert!(
            (all.busbw_factor() - all.netbw_factor()).abs() < 1e-12,
            "{p}: equal with scope all"
        );
    }
    let ring = build(Pattern::Ring, Scope::InterNode, &topo(4, 2), 4000);
    assert!(ring.flows.iter().all(|f| f.src / 2 != f.dst / 2));
}

#[test]
fn pairs_uni_and_odd_counts() {
    let t = topo(4, 2);
    let plan = Plan::build(Pattern::Pairs, Scope::All, Direction::Uni, &t, 100, None).unwrap();
    assert_eq!(
        plan.flows.iter().map(|f| (f.src, f.dst)).collect::<Vec<_>>(),
        vec![(0, 2), (1, 3)]
    );
    let err = Plan::build(Pattern::Pairs, Scope::All, Direction::Bi, &topo(3, 3), 100, None).unwrap_err();
    assert!(err.contains("even number"));
}

#[test]
fn max_peers_makes_shifted_rounds() {
    let plan = Plan::build(Pattern::Fullmesh, Scope::All, Direction::Bi, &topo(5, 5), 5000, Some(2)).unwrap();
    let rounds: Vec<u32> = plan.flows.iter().filter(|f| f.src == 0).map(|f| f.round).collect();
    assert_eq!(rounds, vec![0, 0, 0, 1, 1]);
}

#[test]
fn max_peers_counts_only_peers_that_carry_traffic() {
    // 2 nodes x 8: each endpoint has 8 inter-node peers among 15 shifts; a bound of 8 keeps
    // them in one round instead of splitting them by shift.
    let plan = Plan::build(
        Pattern::Fullmesh,
        Scope::InterNode,
        Direction::Bi,
        &topo(16, 8),
        16 << 10,
        Some(8),
    )
    .unwrap();
    assert!(plan.flows.iter().all(|f| f.round == 0));
    // 8 nodes x 8 (56 peers of 63 shifts): rounds of 9 shifts, at most 9 peers at once for
    // any sender or receiver, 7 rounds.
    let plan = Plan::build(
        Pattern::Fullmesh,
        Scope::InterNode,
        Direction::Bi,
        &topo(64, 8),
        64 << 10,
        Some(8),
    )
    .unwrap();
    let rounds = plan.flows.iter().map(|f| f.round).max().unwrap() + 1;
    assert_eq!(rounds, 7);
    for r in 0..rounds {
        for e in 0..64 {
            let out = plan
                .flows
                .iter()
                .filter(|f| f.round == r && f.src == e && !f.is_local())
                .count();
            let inn = plan
                .flows
                .iter()
                .filter(|f| f.round == r && f.dst == e && !f.is_local())
                .count();
            assert!(out <= 9 && inn <= 9, "round {r} endpoint {e}: {out} out, {inn} in");
        }
    }
}

#[test]
fn single_endpoint_is_refused() {
    let err = Plan::build(Pattern::Sendrecv, Scope::All, Direction::Bi, &topo(1, 1), 8, None).unwrap_err();
    assert!(err.contains("at least 2 endpoints"));
}

/// The whole job's sums counted from its flows, as the held plans' closed forms must give them.
fn counted(plan: &Plan) -> Totals {
    let net = || plan.flows.iter().filter(|f| !f.is_local());
    let mut senders: Vec<usize> = net().filter(|f| f.len > 0).map(|f| f.src).collect();
    senders.sort_unstable();
    senders.dedup();
    Totals {
        network_bytes: net().map(|f| f.len).sum(),
        senders: senders.len(),
        links: plan.connections().len() as u64,
        rounds: plan.flows.iter().map(|f| f.round as usize + 1).max().unwrap_or(1),
    }
}

/// Every rank's held plan is exactly the whole plan's flows that touch its endpoints, in the
/// whole plan's order, with its fills, and the job's totals in closed form equal those counted
/// from the whole plan: on even and uneven nodes, every pattern and scope, -g 1 and 2, rounds.
#[test]
fn held_plans_are_the_job_plans_flows_of_their_endpoints() {
    let uneven = |g: usize| {
        // Nodes of 3, 1 and 2 ranks.
        let ids: Vec<String> = ["a", "a", "a", "b", "c", "c"].iter().map(ToString::to_string).collect();
        Topology::by_host_identity(&ids, g, (0..6).map(|r| format!("h{r}")).collect())
    };
    let even = |g: usize| Topology::with_ranks_per_node(8, 2, g, (0..8).map(|r| format!("h{r}")).collect());
    let mut checked = 0;
    for g in [1, 2] {
        for topo in [even(g), uneven(g)] {
            for pattern in [Pattern::Sendrecv, Pattern::Pairs, Pattern::Ring, Pattern::Fullmesh] {
                for scope in [Scope::All, Scope::InterNode] {
                    for max_peers in [None, Some(1), Some(3)] {
                        let Ok(whole) = Plan::build(pattern, scope, Direction::Bi, &topo, 6000, max_peers) else {
                            continue;
                        };
                        assert_eq!(whole.totals, counted(&whole), "{pattern} {scope} g{g} {max_peers:?}");
                        for rank in 0..topo.ranks() {
                            let holder = Holder::Endpoints(topo.endpoints_of(rank));
                            let held = Plan::build_held(&holder, pattern, scope, Direction::Bi, &topo, 6000, max_peers)
                                .unwrap();
                            let expect: Vec<&Flow> =
                                whole.flows.iter().filter(|f| holder.keeps(f.src, f.dst)).collect();
                            assert_eq!(
                                held.flows.iter().collect::<Vec<_>>(),
                                expect,
                                "{pattern} {scope} rank {rank}"
                            );
                            assert_eq!(held.totals, whole.totals);
                            assert_eq!(held.buffer_len, whole.buffer_len);
                            for e in topo.endpoints_of(rank) {
                                assert_eq!(held.fills[e], whole.fills[e]);
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 200, "{checked}");
}

/// The probe's node pairs held by one rank: the flows of its endpoints, the job's totals.
#[test]
fn held_node_pairs_are_the_job_pairs_of_their_endpoints() {
    let t = topo(8, 2);
    let pairs = [(0, 3), (1, 2), (3, 0), (2, 1)];
    let whole = Plan::node_pairs(&t, &pairs, 4096, &Holder::Job);
    assert_eq!(whole.totals, counted(&whole));
    assert_eq!(whole.flows.len(), 8);
    for rank in 0..8 {
        let holder = Holder::Endpoints(t.endpoints_of(rank));
        let held = Plan::node_pairs(&t, &pairs, 4096, &holder);
        let expect: Vec<&Flow> = whole.flows.iter().filter(|f| holder.keeps(f.src, f.dst)).collect();
        assert_eq!(held.flows.iter().collect::<Vec<_>>(), expect);
        assert_eq!(held.totals, whole.totals);
    }
}

/// A rank's plan of a 512-node job costs its own flows: one endpoint of 4096 in a fullmesh
/// holds its 2 x 4088 flows (not the job's 16.7 million), and the job's totals are still whole.
#[test]
fn a_rank_of_4096_endpoints_holds_its_own_flows() {
    let t = Topology::with_ranks_per_node(4096, 8, 1, (0..4096).map(|r| format!("h{r}")).collect());
    let holder = Holder::Endpoints(t.endpoints_of(9));
    let plan = Plan::build_held(
        &holder,
        Pattern::Fullmesh,
        Scope::InterNode,
        Direction::Bi,
        &t,
        8 << 20,
        Some(8),
    )
    .unwrap();
    assert_eq!(plan.flows.len(), 2 * 4088);
    assert_eq!(plan.totals.links, 4096 * 4088);
    assert_eq!(plan.totals.network_bytes, 4096 * 4088 * (8 << 20) / 4096);
    assert_eq!(plan.connections().len(), 2 * 4088);
}
