//! The schedulers against small models of the IPVS definitions (property tests), and the
//! connection counts against a `HashMap` model and under concurrent workers.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use proptest::prelude::*;

use super::*;

fn loads() -> impl Strategy<Value = Vec<Load>> {
    prop::collection::vec(
        (0u32..6, 0u32..600, prop_oneof![1 => Just(0u32), 4 => 1u32..5]).prop_map(|(active, inactive, weight)| Load {
            active,
            inactive,
            weight,
        }),
        0..12,
    )
}

/// The candidate a least-cost scheduler must return, by the definition: among endpoints of
/// non-zero weight, one whose `cost / weight` is least (compared as fractions), the first
/// such in list order.
fn model_least(loads: &[Load], cost: impl Fn(Load) -> u64, weighted: bool) -> Option<usize> {
    let w = |l: Load| if weighted { u128::from(l.weight) } else { 1 };
    let eligible: Vec<usize> = (0..loads.len()).filter(|&i| loads[i].weight > 0).collect();
    eligible.iter().copied().find(|&i| {
        eligible.iter().all(|&j| u128::from(cost(loads[i])) * w(loads[j]) <= u128::from(cost(loads[j])) * w(loads[i]))
    })
}

proptest! {
    /// `lc`: the least `(active << 8) + inactive` among eligible endpoints, ties to the first.
    #[test]
    fn lc_takes_the_first_least_overhead(l in loads()) {
        let got = least_connections(l.len(), |i| l[i]);
        prop_assert_eq!(got, model_least(&l, overhead, false));
        if let Some(i) = got {
            // With fewer than 256 inactive connections each, that is fewest active ones.
            if l.iter().all(|x| x.inactive < 256) {
                prop_assert!(l.iter().filter(|x| x.weight > 0).all(|x| x.active >= l[i].active));
            }
        }
    }

    /// `wlc`: the least overhead per weight, ties to the first.
    #[test]
    fn wlc_takes_the_first_least_overhead_per_weight(l in loads()) {
        prop_assert_eq!(weighted_least_connections(l.len(), |i| l[i]), model_least(&l, overhead, true));
    }

    /// `sed`: the least `(active + 1) / weight`, inactive connections not counted.
    #[test]
    fn sed_takes_the_first_shortest_expected_delay(l in loads()) {
        let got = shortest_expected_delay(l.len(), |i| l[i]);
        prop_assert_eq!(got, model_least(&l, |x| u64::from(x.active) + 1, true));
    }

    /// `nq`: the first idle eligible endpoint, else `sed`'s choice.
    #[test]
    fn nq_takes_an_idle_endpoint_first(l in loads()) {
        let idle = (0..l.len()).find(|&i| l[i].weight > 0 && l[i].active == 0);
        let want = idle.or_else(|| model_least(&l, |x| u64::from(x.active) + 1, true));
        prop_assert_eq!(never_queue(l.len(), |i| l[i]), want);
    }

    /// `wrr` against IPVS's stateful algorithm (`ip_vs_wrr_schedule`: a list position and a
    /// current weight lowered by the gcd each time the list wraps), over three periods.
    #[test]
    fn wrr_follows_the_interleaved_sequence(w in prop::collection::vec(0u32..6, 0..8)) {
        let model = ipvs_wrr(&w, 3 * w.iter().map(|&x| x as usize).sum::<usize>().max(1));
        for (turn, want) in model.iter().enumerate() {
            prop_assert_eq!(weighted_round_robin(w.len(), |i| w[i], turn as u32), *want, "turn {}", turn);
        }
    }

    /// `rr` cycles: `k` rounds over `n` endpoints give each `k` choices, in list order.
    #[test]
    fn rr_cycles(n in 1usize..20, k in 1u32..5, start in any::<u32>()) {
        let picks: Vec<usize> = (0..n as u32 * k).map(|t| round_robin(n, t).unwrap()).collect();
        for (t, &p) in picks.iter().enumerate() {
            prop_assert_eq!(p, t % n);
        }
        // From any turn on, n consecutive turns visit every endpoint once.
        let mut seen = vec![0; n];
        for t in 0..n as u32 {
            seen[round_robin(n, start.wrapping_add(t)).unwrap()] += 1;
        }
        // (Except across the 2^32 wrap, where the cycle restarts.)
        if start.checked_add(n as u32).is_some() {
            prop_assert!(seen.iter().all(|&s| s == 1), "{:?}", seen);
        }
        prop_assert_eq!(weighted_round_robin(n, |_| 1, start), round_robin(n, start));
    }

    /// `sh` and `dh` are functions of the address: stable, and the bucket tables deal the
    /// 256 buckets as IPVS's reassignment does.
    #[test]
    fn hashing_is_stable_per_address(a in any::<u32>(), b in any::<u128>(), w in prop::collection::vec(0u32..4, 1..10)) {
        let (v4, v6) = (IpAddr::V4(Ipv4Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b)));
        for addr in [v4, v6] {
            prop_assert_eq!(sh_bucket(addr), sh_bucket(addr));
            prop_assert!(sh_bucket(addr) < HASH_BUCKETS && dh_bucket(addr) < HASH_BUCKETS);
        }
        let table = ipvs_sh_table(&w);
        let dh = ipvs_dh_table(w.len());
        for bucket in 0..HASH_BUCKETS {
            let want = table[bucket].filter(|&i| w[i] > 0);
            prop_assert_eq!(sh_position(w.len(), bucket, |i| w[i]), want);
            prop_assert_eq!(dh_position(w.len(), bucket, |i| w[i]), Some(dh[bucket]).filter(|&i| w[i] > 0));
        }
    }

    /// The connection counts against a `HashMap` model, through any sequence of openings,
    /// state changes and closings of flows to a few endpoints.
    #[test]
    fn connection_counts_follow_a_model(ops in prop::collection::vec((0u8..3, 0usize..5, any::<bool>()), 0..200)) {
        let c = Connections::new();
        // Per endpoint, the flows' states (true: active).
        let mut model: HashMap<usize, Vec<bool>> = HashMap::new();
        for (op, e, x) in ops {
            let ep = endpoint(e as u8, 80);
            let flows = model.entry(e).or_default();
            match op {
                0 => {
                    prop_assert!(c.opened(&ep));
                    flows.push(false);
                }
                1 => {
                    // A flow changes state: `x` up to ESTABLISHED, else down.
                    if let Some(f) = flows.iter_mut().find(|f| **f != x) {
                        *f = x;
                        c.established(&ep, x);
                    }
                }
                _ => {
                    if let Some(f) = flows.pop() {
                        c.closed(&ep, f);
                    }
                }
            }
            for (e, flows) in &model {
                let active = flows.iter().filter(|f| **f).count() as u32;
                let want = Load { active, inactive: flows.len() as u32 - active, weight: 1 };
                prop_assert_eq!(c.load(&endpoint(*e as u8, 80)), want);
            }
        }
    }
}

fn endpoint(last: u8, port: u16) -> Endpoint {
    let mut addr = Ipv4Addr::new(10, 70, 0, last).to_ipv6_mapped().octets();
    addr[15] = last;
    Endpoint { protocol: 6, addr, port }
}

/// IPVS's weighted round robin, stateful as in `ip_vs_wrr.c`: the first `count` choices.
fn ipvs_wrr(w: &[u32], count: usize) -> Vec<Option<usize>> {
    let positive: Vec<u32> = w.iter().copied().filter(|&x| x > 0).collect();
    let Some(&max) = positive.iter().max() else { return vec![None; count] };
    let gcd = positive.iter().copied().fold(0, |a, b| if a == 0 { b } else { gcd_of(a, b) });
    // `cl` is the last chosen position (`None`: the list head), `cw` the current weight.
    let (mut cl, mut cw): (Option<usize>, i64) = (None, 0);
    (0..count)
        .map(|_| loop {
            let next = cl.map_or(0, |c| c + 1);
            if next >= w.len() {
                // Wrapped around to the head: lower the current weight.
                cl = None;
                cw -= i64::from(gcd);
                if cw <= 0 {
                    cw = i64::from(max);
                }
                continue;
            }
            if cl.is_none() && cw <= 0 {
                cw = i64::from(max);
            }
            cl = Some(next);
            if i64::from(w[next]) >= cw {
                break Some(next);
            }
        })
        .collect()
}

/// `ip_vs_sh_reassign`: bucket → endpoint, each endpoint taking max(weight, 1) consecutive buckets in turn.
fn ipvs_sh_table(w: &[u32]) -> Vec<Option<usize>> {
    let (mut p, mut count) = (0, 0);
    (0..HASH_BUCKETS)
        .map(|_| {
            let d = p;
            count += 1;
            if count >= w[d] {
                p = (p + 1) % w.len();
                count = 0;
            }
            Some(d)
        })
        .collect()
}

/// `ip_vs_dh_reassign`: bucket → endpoint, one each in turn.
fn ipvs_dh_table(n: usize) -> Vec<usize> {
    (0..HASH_BUCKETS).map(|b| b % n).collect()
}

#[test]
fn hash_buckets_of_known_addresses() {
    // 10.0.0.1 is 0x0a000001: dh takes the low byte of its product with 2654435761, sh the
    // top byte of its product with 0x61c88647 (both modulo 2^32).
    let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    assert_eq!(dh_bucket(a), (0x0a00_0001u32.wrapping_mul(2_654_435_761) & 0xff) as usize);
    assert_eq!(sh_bucket(a), (0x0a00_0001u32.wrapping_mul(0x61c8_8647) >> 24) as usize);
    // An IPv6 address folds its four words: ::ffff:10.0.0.1 folds to 0x0000ffff ^ 0x0a000001.
    let mapped = IpAddr::V6(Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped());
    assert_eq!(dh_bucket(mapped), ((0x0000_ffffu32 ^ 0x0a00_0001).wrapping_mul(2_654_435_761) & 0xff) as usize);
    // Equal weights: every endpoint gets 256 / n buckets, give or take one.
    for n in 1..=10 {
        let mut per = vec![0; n];
        for b in 0..HASH_BUCKETS {
            per[sh_position(n, b, |_| 1).unwrap()] += 1;
            assert_eq!(sh_position(n, b, |_| 1), dh_position(n, b, |_| 1));
        }
        assert!(per.iter().max().unwrap() - per.iter().min().unwrap() <= 1, "{per:?}");
    }
}

#[test]
fn no_endpoint_no_choice() {
    assert_eq!(least_connections(0, |_| Load::default()), None);
    assert_eq!(never_queue(2, |_| Load { weight: 0, ..Load::default() }), None);
    assert_eq!(round_robin(0, 5), None);
    assert_eq!(weighted_round_robin(3, |_| 0, 0), None);
    assert_eq!(sh_position(0, 7, |_| 1), None);
    assert_eq!(dh_position(0, 7, |_| 1), None);
}

#[test]
fn names_and_kinds() {
    let consistent: Vec<&str> = Scheduler::ALL.iter().filter(|s| s.is_consistent()).map(|s| s.name()).collect();
    assert_eq!(consistent, ["dh", "sh", "maglev"]);
    let counting: Vec<&str> = Scheduler::ALL.iter().filter(|s| s.counts_connections()).map(|s| s.name()).collect();
    assert_eq!(counting, ["lc", "wlc", "sed", "nq"]);
    assert_eq!(Scheduler::default(), Scheduler::Maglev);
}

/// Workers counting flows of the same endpoints at once end where the sums say, with no
/// count lost between a claim and the lock-free updates.
#[test]
fn concurrent_workers_keep_exact_counts() {
    let c = Arc::new(Connections::new());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let c = Arc::clone(&c);
            std::thread::spawn(move || {
                for round in 0..2000u32 {
                    let ep = endpoint((round % 7) as u8, 80);
                    assert!(c.opened(&ep));
                    c.established(&ep, true);
                    if (round + t) % 3 != 0 {
                        c.established(&ep, false);
                        c.closed(&ep, false);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Each thread leaves open, as active, the rounds with (round + t) % 3 == 0.
    let mut want = [0u32; 7];
    for t in 0..4u32 {
        for round in 0..2000u32 {
            if (round + t) % 3 == 0 {
                want[(round % 7) as usize] += 1;
            }
        }
    }
    for (e, &active) in want.iter().enumerate() {
        assert_eq!(c.load(&endpoint(e as u8, 80)), Load { active, inactive: 0, weight: 1 });
    }
}

/// An endpoint at zero gives its slot up to another, and endpoints that hold connections
/// keep theirs however many others come and go.
#[test]
fn slots_at_zero_are_reused() {
    let c = Connections::new();
    let keep = endpoint(1, 443);
    assert!(c.opened(&keep));
    for i in 0..100_000u32 {
        let mut addr = [0u8; 16];
        addr[..4].copy_from_slice(&i.to_be_bytes());
        let ep = Endpoint { protocol: 17, addr, port: 53 };
        assert!(c.opened(&ep), "endpoint {i}");
        c.closed(&ep, false);
    }
    assert_eq!(c.load(&keep), Load { active: 0, inactive: 1, weight: 1 });
}
