//! Tests for the conntrack table: unit tests, a model-based property test against a
//! `HashMap` for both address families, and fixed-capacity checks with adversarially
//! similar keys.

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::index::{self, decode, Index, EMPTY};
use super::*;

const TCP: u8 = 6;
const UDP: u8 = 17;

/// Nanoseconds in `t` milliseconds: deadlines have millisecond resolution.
const fn ms(t: u64) -> u64 {
    t * NS_PER_MS
}

fn key(protocol: u8, src: [u8; 4], src_port: u16, dst: [u8; 4], dst_port: u16) -> FlowKey {
    FlowKey { protocol, src_addr: Ipv4Addr::from(src), src_port, dst_addr: Ipv4Addr::from(dst), dst_port }
}

/// A flow with state `frontend` 42, expiring at `deadline_ms` milliseconds.
fn flow<A: Address>(original: FlowKey<A>, reply: FlowKey<A>, deadline_ms: u64) -> Flow<A> {
    Flow { original, reply, state: FlowState::new(42, 0, Deadline::at(ms(deadline_ms))) }
}

/// The SNAT addresses of [`similar_flow`]s: 192.0.2.0 ..= 192.0.2.3.
fn similar_snat() -> Vec<Ipv4Addr> {
    (0..4).map(|i| Ipv4Addr::new(192, 0, 2, i)).collect()
}

/// A table for [`similar_flow`]s.
fn table(capacity: usize, seed: u64) -> Conntrack {
    Conntrack::new(capacity, seed, &similar_snat())
}

/// Flow number `i` of a family of distinct flows whose tuples differ from each other's in as
/// few bits as possible: one client address, sequential client ports (then addresses), one
/// VIP, one endpoint, sequential SNAT ports (then SNAT addresses).
fn similar_flow(i: u32, deadline_ms: u64) -> Flow {
    let client_port = (i % 60_000) as u16 + 1024;
    let client_addr = [198, 51, 100 + (i / 60_000 / 256) as u8, (i / 60_000 % 256) as u8];
    let snat_port = (i % 60_000) as u16 + 1024;
    let snat_addr = [192, 0, 2, (i / 60_000) as u8];
    flow(
        key(TCP, client_addr, client_port, [203, 0, 113, 10], 443),
        key(TCP, [10, 1, 2, 3], 8443, snat_addr, snat_port),
        deadline_ms,
    )
}

/// A table whose stored displacements saturate at `disp_cap`, so deletion takes the re-hashing
/// path for every entry more than `disp_cap` slots from home.
fn table_with_displacement_cap<A: Address>(capacity: usize, seed: u64, snat: &[A], disp_cap: u64) -> Conntrack<A> {
    Conntrack::with_index(capacity, seed, snat, Index::with_displacement_cap(index_slots(capacity), disp_cap))
}

/// Checks the table's internal invariants: every indexed tuple belongs to a live flow and is
/// reachable from its home slot without crossing an empty slot, its stored fingerprint and
/// displacement are right, every live flow is indexed exactly twice, and the bitmap, the free
/// chain and `len` agree.
fn check_invariants<A: Address>(ct: &Conntrack<A>, disp_cap: u64) {
    let slots = ct.index.raw();
    let n = slots.len();
    let mut seen = HashSet::new();
    for (pos, &slot) in slots.iter().enumerate() {
        if slot == EMPTY {
            continue;
        }
        let (tag, fingerprint, displacement) = decode(slot);
        let (id, _) = untag(tag);
        assert!(ct.is_live(id), "slot {pos}: tag {tag:#x} of a dead flow");
        assert!(seen.insert(tag), "tag {tag:#x} indexed twice");
        let hash = ct.hash(&key_of(&ct.records, &ct.snat, tag));
        assert_eq!(fingerprint, (hash >> 40) as u32, "slot {pos}: fingerprint");
        let home = index::home(n, hash);
        let actual = (pos + n - home) % n;
        assert_eq!(displacement, (actual as u64).min(disp_cap), "slot {pos}: displacement");
        for step in 0..actual {
            assert_ne!(slots[(home + step) % n], EMPTY, "slot {pos}: unreachable from home {home}");
        }
    }
    assert_eq!(seen.len(), 2 * ct.len());
    let live = (0..ct.capacity() as u32).filter(|&id| ct.is_live(id)).count();
    assert_eq!(live, ct.len());
    let mut free = 0;
    let mut next = ct.free_head;
    while next != NO_FREE {
        assert!(!ct.is_live(next), "live record {next} on the free chain");
        free += 1;
        assert!(free <= ct.capacity(), "free chain loops");
        next = ct.records[next as usize].state.frontend;
    }
    assert_eq!(ct.len() + free + (ct.capacity() - ct.never_used as usize), ct.capacity());
}

#[test]
fn reversed_swaps_source_and_destination() {
    let k = key(UDP, [1, 2, 3, 4], 53, [5, 6, 7, 8], 1234);
    assert_eq!(k.reversed(), key(UDP, [5, 6, 7, 8], 1234, [1, 2, 3, 4], 53));
    assert_eq!(k.reversed().reversed(), k);
}

#[test]
fn insert_then_lookup_both_directions() {
    let mut ct = table(16, 1);
    assert!(ct.is_empty());
    let f = similar_flow(0, 100);
    let id = ct.insert(f).unwrap();
    assert_eq!(ct.len(), 1);
    assert_eq!(ct.lookup(&f.original), Some((id, Direction::Original)));
    assert_eq!(ct.lookup(&f.reply), Some((id, Direction::Reply)));
    assert_eq!(ct.get(id), f);
    // The tuples the gateway sends are not the ones it receives.
    assert_eq!(ct.lookup(&f.original.reversed()), None);
    assert_eq!(ct.lookup(&f.reply.reversed()), None);
    assert_eq!(ct.lookup(&similar_flow(1, 100).original), None);

    let g = similar_flow(1, 100);
    let gid = ct.insert(g).unwrap();
    assert_ne!(gid, id);
    assert_eq!(ct.lookup(&g.reply), Some((gid, Direction::Reply)));
    assert_eq!(ct.lookup(&f.reply), Some((id, Direction::Reply)));
    assert_eq!(ct.iter().collect::<Vec<_>>(), vec![(id, f), (gid, g)]);
    check_invariants(&ct, index::DISP_CAP);
}

#[test]
fn state_updates_are_seen_by_lookup_and_expiry() {
    let mut ct = table(4, 2);
    let f = similar_flow(0, 10);
    let id = ct.insert(f).unwrap();
    {
        let state = ct.state_mut(id);
        state.deadline = Deadline::at(ms(1_000));
        state.tcp_state = TcpState::Established;
        state.set_seen_reply(true);
        state.frontend = 9;
    }
    let (found, _) = ct.lookup(&f.reply).unwrap();
    assert_eq!(ct.state(found).tcp_state, TcpState::Established);
    assert!(ct.get(found).state.seen_reply());
    assert_eq!(ct.get(found).state.frontend, 9);
    assert_eq!(ct.get(found).reply, f.reply, "the tuples are untouched");
    assert_eq!(ct.expire(ms(1_000) - 1, 4, |_| panic!("deadline was extended")), 0);
    assert_eq!(ct.expire(ms(1_000), 4, |_| {}), 1);
}

#[test]
fn duplicate_original_or_reply_is_refused_without_change() {
    let mut ct = table(8, 3);
    let f = similar_flow(0, 100);
    let id = ct.insert(f).unwrap();
    let other = similar_flow(1, 100);

    // Same original tuple, new reply tuple.
    assert_eq!(ct.insert(Flow { reply: other.reply, ..f }), Err(InsertError::Exists));
    // New original tuple, same reply tuple (a SNAT port handed out twice).
    assert_eq!(ct.insert(Flow { original: other.original, ..f }), Err(InsertError::Exists));
    // A tuple already used in the other direction.
    assert_eq!(ct.insert(flow(f.reply, other.reply, 1)), Err(InsertError::Exists));
    // Exactly the same flow.
    assert_eq!(ct.insert(f), Err(InsertError::Exists));
    // Both tuples equal.
    assert_eq!(ct.insert(flow(other.reply, other.reply, 1)), Err(InsertError::Exists));

    assert_eq!(ct.len(), 1);
    assert_eq!(ct.lookup(&other.original), None);
    assert_eq!(ct.lookup(&other.reply), None);
    assert_eq!(ct.lookup(&f.original), Some((id, Direction::Original)));
    check_invariants(&ct, index::DISP_CAP);
    assert_eq!(ct.insert(other).map(|_| ()), Ok(()));
}

#[test]
fn full_at_capacity_and_usable_again_after_remove() {
    let capacity = 5;
    let mut ct = table(capacity, 4);
    let ids: Vec<_> = (0..capacity as u32).map(|i| ct.insert(similar_flow(i, 1)).unwrap()).collect();
    assert_eq!(ct.len(), capacity);
    assert_eq!(ct.insert(similar_flow(99, 1)), Err(InsertError::Full));
    // An existing tuple is reported as such even when full.
    assert_eq!(ct.insert(similar_flow(0, 1)), Err(InsertError::Exists));
    assert_eq!(ct.lookup(&similar_flow(99, 1).original), None);

    let removed = ct.remove(ids[2]);
    assert_eq!(removed, similar_flow(2, 1));
    let id = ct.insert(similar_flow(99, 1)).unwrap();
    assert_eq!(id, ids[2], "the freed record is reused");
    assert_eq!(ct.lookup(&similar_flow(99, 1).reply), Some((id, Direction::Reply)));
    assert_eq!(ct.insert(similar_flow(100, 1)), Err(InsertError::Full));
    check_invariants(&ct, index::DISP_CAP);
}

#[test]
fn remove_unindexes_both_tuples() {
    let mut ct = table(64, 5);
    let flows: Vec<_> = (0..64).map(|i| similar_flow(i, 1)).collect();
    let ids: Vec<_> = flows.iter().map(|&f| ct.insert(f).unwrap()).collect();
    for (i, (&id, f)) in ids.iter().zip(&flows).enumerate() {
        if i % 3 == 0 {
            assert_eq!(ct.remove(id), *f);
        }
    }
    check_invariants(&ct, index::DISP_CAP);
    for (i, (&id, f)) in ids.iter().zip(&flows).enumerate() {
        if i % 3 == 0 {
            assert_eq!(ct.lookup(&f.original), None);
            assert_eq!(ct.lookup(&f.reply), None);
        } else {
            assert_eq!(ct.lookup(&f.original), Some((id, Direction::Original)));
            assert_eq!(ct.lookup(&f.reply), Some((id, Direction::Reply)));
        }
    }
    assert_eq!(ct.len(), 64 - 22);
    // Removed tuples can be tracked again, by a new flow.
    let again = ct.insert(flow(flows[0].original, similar_flow(1000, 1).reply, 1)).unwrap();
    assert_eq!(ct.lookup(&flows[0].original), Some((again, Direction::Original)));
}

#[test]
fn renew_leaves_what_remove_then_insert_leaves() {
    // Two tables alike; flow 5 of one renewed with a new state, of the other removed and
    // the same new flow inserted: the same id, lookups, contents, windows and length.
    let (mut renewed, mut reinserted) = (table(64, 9), table(64, 9));
    let flows: Vec<_> = (0..64).map(|i| similar_flow(i, 1)).collect();
    for &f in &flows {
        assert_eq!(renewed.insert(f), reinserted.insert(f));
    }
    let id = renewed.lookup(&flows[5].original).expect("flow 5").0;
    // The old flow's windows and state moved on (what a new flow must not inherit).
    for ct in [&mut renewed, &mut reinserted] {
        let (state, mut windows) = ct.tcp_mut(id);
        state.set_assured(true);
        windows.make_liberal();
    }
    let mut new = flows[5];
    new.state = FlowState::new(7, 3, Deadline::at(ms(9)));
    renewed.renew(id, &new);
    let _ = reinserted.remove(id);
    assert_eq!(reinserted.insert(new), Ok(id));
    check_invariants(&renewed, index::DISP_CAP);
    assert_eq!(renewed.len(), reinserted.len());
    for f in &flows {
        assert_eq!(renewed.lookup(&f.original), reinserted.lookup(&f.original));
        assert_eq!(renewed.lookup(&f.reply), reinserted.lookup(&f.reply));
    }
    assert_eq!(renewed.get(id), new);
    assert_eq!(renewed.tcp_windows(id), reinserted.tcp_windows(id));
    assert!(!renewed.state(id).assured());
}

#[test]
#[should_panic(expected = "not live")]
fn renew_of_a_stale_id_panics() {
    let mut ct = table(4, 6);
    let f = similar_flow(0, 1);
    let id = ct.insert(f).unwrap();
    let _ = ct.remove(id);
    ct.renew(id, &f);
}

#[test]
#[should_panic(expected = "not live")]
fn remove_of_a_stale_id_panics() {
    let mut ct = table(4, 6);
    let id = ct.insert(similar_flow(0, 1)).unwrap();
    let _ = ct.remove(id);
    let _ = ct.remove(id);
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "not live")]
fn get_of_a_stale_id_panics_in_debug_builds() {
    let mut ct = table(4, 7);
    let id = ct.insert(similar_flow(0, 1)).unwrap();
    let _ = ct.remove(id);
    let _ = ct.get(id);
}

#[test]
fn expiry_with_a_virtual_clock_is_exact_and_budgeted() {
    let capacity = 1000;
    let budget = 64;
    let mut ct = table(capacity, 8);
    // Deadlines 0, 10, 20, ... in a scrambled order over the ids; 900 flows, 100 free records.
    let flows: Vec<_> = (0..900u32).map(|i| similar_flow(i, u64::from(i * 7 % 900) * 10)).collect();
    let ids: Vec<_> = flows.iter().map(|&f| ct.insert(f).unwrap()).collect();
    let mut expired_total = HashSet::new();
    for now in [0u64, 2_500, 2_505, 9_000] {
        let mut reaped = Vec::new();
        let mut removed = 0;
        // One full sweep: ⌈capacity / budget⌉ calls.
        for _ in 0..capacity.div_ceil(budget) {
            removed += ct.expire(ms(now), budget, |f| reaped.push(*f));
        }
        assert_eq!(removed, reaped.len());
        for f in &reaped {
            assert!(f.state.deadline.is_due(ms(now)), "reaped a flow before its deadline");
            assert!(expired_total.insert(f.original), "on_expired called twice for one flow");
        }
        let due = |f: &Flow| f.state.deadline.is_due(ms(now));
        let expected: HashSet<_> = flows.iter().filter(|f| due(f)).map(|f| f.original).collect();
        assert_eq!(expired_total, expected, "at now = {now} ms");
        for (&id, f) in ids.iter().zip(&flows) {
            let hit = ct.lookup(&f.original);
            if due(f) {
                assert_eq!(hit, None);
                assert_eq!(ct.lookup(&f.reply), None);
            } else {
                assert_eq!(hit, Some((id, Direction::Original)));
            }
        }
        check_invariants(&ct, index::DISP_CAP);
    }
    assert!(ct.is_empty());
}

#[test]
fn expiry_examines_at_most_budget_records_per_call() {
    let mut ct = table(100, 9);
    for i in 0..100 {
        let _ = ct.insert(similar_flow(i, 0)).unwrap();
    }
    assert_eq!(ct.expire(1, 0, |_| {}), 0);
    for call in 1..=10 {
        assert_eq!(ct.expire(1, 10, |_| {}), 10);
        assert_eq!(ct.len(), 100 - 10 * call);
    }
    // A budget above the capacity examines each record once.
    for i in 0..100 {
        let _ = ct.insert(similar_flow(i, 0)).unwrap();
    }
    assert_eq!(ct.expire(1, usize::MAX, |_| {}), 100);
    // The cursor wraps: a flow behind it is reaped on the next sweep.
    let mut ct = table(100, 10);
    for i in 0..100 {
        let _ = ct.insert(similar_flow(i, 50)).unwrap();
    }
    assert_eq!(ct.expire(0, 30, |_| {}), 0);
    assert_eq!(ct.expire_cursor, 30);
    ct.state_mut(5).deadline = Deadline::at(0);
    ct.state_mut(95).deadline = Deadline::at(0);
    assert_eq!(ct.expire(0, 65, |_| {}), 0, "records 30..95");
    assert_eq!(ct.expire(0, 2, |f| assert_eq!(*f, similar_flow(95, 0))), 1, "records 95..97");
    assert_eq!(ct.expire(0, 8, |_| {}), 0, "records 97..100, 0..5");
    assert_eq!(ct.expire(0, 1, |f| assert_eq!(*f, similar_flow(5, 0))), 1, "record 5");
}

#[test]
fn lookup_returns_expired_flows_until_they_are_reaped() {
    let mut ct = table(4, 11);
    let f = similar_flow(0, 10);
    let id = ct.insert(f).unwrap();
    // `now` is far past the deadline, but nothing has reaped the flow yet.
    assert_eq!(ct.lookup(&f.original), Some((id, Direction::Original)));
    assert!(ct.state(id).deadline.is_due(ms(1_000)));
}

#[test]
fn capacity_zero_one_and_large_construct() {
    let mut ct = table(0, 12);
    assert_eq!(ct.capacity(), 0);
    assert_eq!(ct.lookup(&similar_flow(0, 0).original), None);
    assert_eq!(ct.insert(similar_flow(0, 0)), Err(InsertError::Full));
    assert_eq!(ct.expire(10, 10, |_| {}), 0);

    let mut ct = table(1, 13);
    assert_eq!(ct.capacity(), 1);
    let id = ct.insert(similar_flow(0, 5)).unwrap();
    assert_eq!(ct.insert(similar_flow(1, 5)), Err(InsertError::Full));
    assert_eq!(ct.lookup(&similar_flow(0, 5).reply), Some((id, Direction::Reply)));
    assert_eq!(ct.expire(ms(5), 1, |_| {}), 1);
    assert_eq!(ct.insert(similar_flow(1, 5)), Ok(id));
    check_invariants(&ct, index::DISP_CAP);

    let ct = table(1 << 20, 14);
    assert_eq!(ct.capacity(), 1 << 20);
    assert!(ct.is_empty());
    let per_flow = ct.memory_bytes() as f64 / (1 << 20) as f64;
    assert!((93.0..94.0).contains(&per_flow), "{per_flow} bytes per IPv4 flow");
    let ct6 = Conntrack6::new(1 << 20, 14, &[Ipv6Addr::LOCALHOST]);
    let per_flow = ct6.memory_bytes() as f64 / (1 << 20) as f64;
    assert!((129.0..130.0).contains(&per_flow), "{per_flow} bytes per IPv6 flow");
}

#[test]
#[should_panic(expected = "exceeds the maximum")]
fn capacity_above_the_maximum_is_refused() {
    let _ = table(MAX_CAPACITY + 1, 0);
}

#[test]
fn a_table_without_snat_addresses_tracks_nothing() {
    let mut ct = Conntrack::<Ipv6Addr>::new(4, 0, &[]);
    let f = flow(
        FlowKey {
            protocol: TCP,
            src_addr: Ipv6Addr::LOCALHOST,
            src_port: 1,
            dst_addr: Ipv6Addr::LOCALHOST,
            dst_port: 2,
        },
        FlowKey {
            protocol: TCP,
            src_addr: Ipv6Addr::LOCALHOST,
            src_port: 3,
            dst_addr: Ipv6Addr::LOCALHOST,
            dst_port: 4,
        },
        1,
    );
    assert_eq!(ct.insert(f), Err(InsertError::NotFullNat));
    assert!(ct.is_empty());
}

#[test]
#[should_panic(expected = "at most 256 SNAT addresses")]
fn more_than_256_snat_addresses_are_refused() {
    let many: Vec<Ipv4Addr> = (0..257u32).map(|i| Ipv4Addr::from(0x0a00_0000 + i)).collect();
    let _ = Conntrack::new(4, 0, &many);
}

#[test]
fn a_reply_not_to_a_snat_address_or_of_another_protocol_is_refused() {
    let mut ct = table(4, 0);
    let f = similar_flow(0, 1);
    let elsewhere = FlowKey { dst_addr: Ipv4Addr::new(192, 0, 2, 200), ..f.reply };
    assert_eq!(ct.insert(Flow { reply: elsewhere, ..f }), Err(InsertError::NotFullNat));
    let udp = FlowKey { protocol: UDP, ..f.reply };
    assert_eq!(ct.insert(Flow { reply: udp, ..f }), Err(InsertError::NotFullNat));
    assert!(ct.is_empty());
    assert_eq!(ct.snat_addresses(), &similar_snat()[..]);
}

#[test]
fn deadlines_round_up_compare_with_wraparound_and_cap_timeouts() {
    // Rounded up to the millisecond: never early, at most 1 ms late.
    let d = Deadline::at(1_500_000);
    assert!(!d.is_due(1_999_999));
    assert!(d.is_due(2_000_000));
    assert_eq!(Deadline::after(0, 0), Deadline::at(0));
    assert!(Deadline::after(7, 0).is_due(ms(1)));
    // Across the 2^32 ms wrap of the stored value (≈ 49.7 days of uptime).
    let wrap = ms(1 << 32);
    let d = Deadline::after(wrap - ms(10), ms(30));
    assert!(!d.is_due(wrap - ms(10)));
    assert!(!d.is_due(wrap + ms(19)));
    assert!(d.is_due(wrap + ms(20)));
    assert_eq!(d.remaining_ms(wrap), 20);
    assert_eq!(d.remaining_ms(wrap + ms(25)), 0);
    // Timeouts beyond the representable range are capped, not turned into "already due".
    let d = Deadline::after(ms(5), u64::MAX);
    assert!(!d.is_due(ms(5)));
    assert!(!d.is_due(ms(5) + Deadline::MAX_TIMEOUT_NS - 1));
    assert!(d.is_due(ms(5) + Deadline::MAX_TIMEOUT_NS));
}

/// Inserting `capacity` flows with keys that differ in few bits never reallocates anything
/// (the storage is boxed slices, which have no growing operation; this shows the addresses and
/// sizes stay put), every flow stays findable, and probe runs stay short.
#[test]
fn fixed_capacity_with_adversarially_similar_keys() {
    let capacity = 1 << 17;
    let mut ct = table(capacity, 0x1234_5678_9abc_def0);
    let addresses = (ct.records.as_ptr(), ct.live.as_ptr(), ct.index.as_ptr());
    let memory = ct.memory_bytes();
    for i in 0..capacity as u32 {
        assert_eq!(ct.insert(similar_flow(i, u64::from(i))), Ok(i), "ids are handed out in order");
    }
    assert_eq!(ct.insert(similar_flow(capacity as u32, 0)), Err(InsertError::Full));
    assert_eq!((ct.records.as_ptr(), ct.live.as_ptr(), ct.index.as_ptr()), addresses);
    assert_eq!(ct.memory_bytes(), memory);
    for i in 0..capacity as u32 {
        let f = similar_flow(i, u64::from(i));
        assert_eq!(ct.lookup(&f.original), Some((i, Direction::Original)));
        assert_eq!(ct.lookup(&f.reply), Some((i, Direction::Reply)));
    }
    let longest = ct.index.raw().iter().filter(|&&s| s != EMPTY).map(|&s| decode(s).2).max().unwrap();
    assert!(longest < index::DISP_CAP, "longest displacement {longest} at load 3/4");
    check_invariants(&ct, index::DISP_CAP);
    // Churn at capacity: expire half, refill, still no reallocation.
    assert_eq!(ct.expire(ms(capacity as u64 / 2), capacity, |_| {}), capacity / 2 + 1);
    for i in 0..(capacity / 2 + 1) as u32 {
        let _ = ct.insert(similar_flow(capacity as u32 + i, 1 << 31)).unwrap();
    }
    assert_eq!(ct.len(), capacity);
    assert_eq!((ct.records.as_ptr(), ct.live.as_ptr(), ct.index.as_ptr()), addresses);
    check_invariants(&ct, index::DISP_CAP);
}

#[test]
fn saturated_displacements_are_recomputed_on_delete() {
    // With a displacement cap of 1, nearly every shift in a full small table re-hashes.
    for seed in 0..50 {
        let mut ct = table_with_displacement_cap(24, seed, &similar_snat(), 1);
        let ids: Vec<_> = (0..24).map(|i| ct.insert(similar_flow(i, u64::from(i % 5))).unwrap()).collect();
        check_invariants(&ct, 1);
        for &id in ids.iter().step_by(2) {
            let _ = ct.remove(id);
            check_invariants(&ct, 1);
        }
        let _ = ct.expire(ms(2), 24, |_| {});
        check_invariants(&ct, 1);
        for (i, &id) in ids.iter().enumerate() {
            let f = similar_flow(i as u32, u64::from(i as u32 % 5));
            let expected = (i % 2 == 1 && !f.state.deadline.is_due(ms(2))).then_some((id, Direction::Original));
            assert_eq!(ct.lookup(&f.original), expected);
        }
    }
}

#[test]
fn early_drop_evicts_near_the_new_flow_what_is_worth_least() {
    let capacity = 64;
    let mut ct = table(capacity, 15);
    let flows: Vec<_> = (0..capacity as u32).map(|i| similar_flow(i, 1_000)).collect();
    for f in &flows {
        let id = ct.insert(*f).unwrap();
        ct.state_mut(id).set_assured(true);
        ct.state_mut(id).tcp_state = TcpState::Established;
    }
    let newcomer = similar_flow(500, 1_000);
    assert_eq!(ct.insert(newcomer), Err(InsertError::Full));
    // Every flow assured, established and live: nothing may go.
    assert_eq!(ct.early_drop(&newcomer.original, ms(10)), None);
    assert_eq!(ct.len(), capacity);
    // Make every flow a candidate, one reason each in turn, and check that the victim is
    // one of the flows in the window and that it is removed from the table.
    let window: HashSet<FlowId> =
        ct.index.tags_near(ct.hash(&newcomer.original), EARLY_DROP_SLOTS).map(|t| untag(t).0).collect();
    assert!(!window.is_empty());
    let reasons: [fn(&mut FlowState); 3] =
        [|s| s.set_assured(false), |s| s.tcp_state = TcpState::TimeWait, |s| s.deadline = Deadline::at(0)];
    for reason in reasons {
        for &id in &window {
            reason(ct.state_mut(id));
        }
        let victim = ct.early_drop(&newcomer.original, ms(10)).expect("a candidate in the window");
        let id = flows.iter().position(|f| f.original == victim.original).unwrap() as FlowId;
        assert!(window.contains(&id), "victim {id} outside the window");
        assert_eq!(ct.lookup(&victim.original), None);
        assert_eq!(ct.lookup(&victim.reply), None);
        assert_eq!(ct.len(), capacity - 1);
        let new_id = ct.insert(newcomer).unwrap();
        assert_eq!(new_id, id, "the evicted record is reused");
        let _ = ct.remove(new_id);
        let _ = ct.insert(flows[id as usize]).unwrap();
        ct.state_mut(id).set_assured(true);
        ct.state_mut(id).tcp_state = TcpState::Established;
        for &other in &window {
            *ct.state_mut(other) =
                FlowState { tcp_state: TcpState::Established, ..FlowState::new(42, 0, Deadline::at(ms(1_000))) };
            ct.state_mut(other).set_assured(true);
        }
        check_invariants(&ct, index::DISP_CAP);
    }
}

#[test]
fn hashed_lookups_and_prefetches_agree_with_lookup() {
    let mut ct = table(256, 16);
    let flows: Vec<_> = (0..200).map(|i| similar_flow(i, 1)).collect();
    for f in &flows {
        let _ = ct.insert(*f).unwrap();
    }
    for i in 0..300 {
        let key = similar_flow(i, 1).reply;
        let hash = ct.hash_key(&key);
        ct.prefetch_index(hash);
        let ahead = ct.prefetch_record(hash);
        assert_eq!(ct.lookup_hashed(&key, hash), ct.lookup(&key));
        assert_eq!(ct.lookup(&key).is_some(), i < 200);
        match ct.lookup(&key) {
            Some(found) => {
                // A hit is the candidate found ahead (fingerprints of 24 bits: a false
                // candidate among 400 tuples is not expected).
                assert_eq!(ahead, Candidate::Flow(found.0, found.1));
                assert_eq!(ct.peek(found.0), ct.get(found.0));
            }
            None => assert!(matches!(ahead, Candidate::Absent(_)), "{i}: a miss ends at a vacancy"),
        }
        // Any candidate (right, of another flow, the other direction, none) gives the lookup's answer.
        let other = Candidate::Flow(i * 7 % 200, Direction::Original);
        let original = match ahead {
            Candidate::Flow(id, _) => Candidate::Flow(id, Direction::Original),
            absent => absent,
        };
        for candidate in [Some(ahead), Some(other), Some(original), None] {
            assert_eq!(ct.lookup_candidate(&key, hash, candidate), ct.lookup(&key), "{i} {candidate:?}");
        }
    }
    // A removed flow's record still holds its tuples: as a candidate it is not found.
    let key = flows[3].original;
    let hash = ct.hash_key(&key);
    let candidate = ct.prefetch_record(hash);
    let Candidate::Flow(id, _) = candidate else { panic!("flow 3 is tracked") };
    let _ = ct.remove(id);
    assert_eq!(ct.lookup_candidate(&key, hash, Some(candidate)), None);
}

/// The reply tuple's hash and vacancy from [`Conntrack::lookup_or_vacancy`] (what the SNAT
/// port search found), and its SNAT address's position, right or wrong, index it as
/// [`Conntrack::insert`] would: a table fed the hints and one
/// fed none hold the same flows at the same ids, with the same index, whether the hint still
/// holds, was made stale by an insertion into its run (the same reply tuple inserted twice is
/// refused) or by a removal.
#[test]
fn reply_vacancies_index_as_the_plain_insert() {
    let (mut hinted, mut plain) = (table(512, 16), table(512, 16));
    for i in 0..300u32 {
        let flow = similar_flow(i, 1);
        let reply = match hinted.lookup_or_vacancy(&flow.reply) {
            Ok(found) => panic!("{i}: {found:?} has the reply tuple"),
            Err(hint) => hint,
        };
        assert_eq!(reply.0, hinted.hash_key(&flow.reply));
        // The SNAT address's position: none, right, or wrong (then searched for).
        let right = similar_snat().iter().position(|a| *a == flow.reply.dst_addr).unwrap() as u8;
        let snat = [None, Some(right), Some(right.wrapping_add(1)), Some(u8::MAX)][i as usize % 4];
        if i % 7 == 3 {
            // Stale by a removal between the search and the insert.
            let gone = hinted.lookup(&similar_flow(i - 2, 1).original).unwrap().0;
            assert_eq!(plain.lookup(&similar_flow(i - 2, 1).original).unwrap().0, gone);
            let _ = (hinted.remove(gone), plain.remove(gone));
        }
        let hash = hinted.hash_key(&flow.original);
        let id = hinted.insert_hashed(&flow, hash, None, ReplyHint { slot: Some(reply), snat }).unwrap();
        assert_eq!(plain.insert(flow).unwrap(), id, "{i}");
        assert_eq!(hinted.lookup(&flow.reply), Some((id, Direction::Reply)));
        // Stale by the insertion that filled its slot: the tuple is found, not placed twice.
        let again = Flow { original: similar_flow(i + 100_000, 1).original, ..flow };
        let hash = hinted.hash_key(&again.original);
        assert_eq!(
            hinted.insert_hashed(&again, hash, None, ReplyHint { slot: Some(reply), snat }),
            Err(InsertError::Exists)
        );
        assert_eq!(plain.insert(again), Err(InsertError::Exists));
    }
    assert_eq!(hinted.index.raw(), plain.index.raw());
    assert_eq!(hinted.iter().collect::<Vec<_>>(), plain.iter().collect::<Vec<_>>());
    check_invariants(&hinted, index::DISP_CAP);
}

/// Both tuples' vacancies and the SNAT address's position handed to
/// [`Conntrack::insert_hashed`] (a new flow's common case, placed without a search) index
/// the flow as [`Conntrack::insert`] would, and so does every hint gone stale or wrong,
/// which sends the insert to its searches: a vacancy stale by a removal, or by the insertion
/// that filled it (the original's, then the reply's), a wrong SNAT position, a flow whose
/// tuples are equal, a full table. Two tables, one fed the hints and one none, hold the
/// same flows at the same ids with the same index.
#[test]
fn hinted_inserts_with_both_vacancies_index_as_the_plain_insert() {
    let (mut hinted, mut plain) = (table(512, 16), table(512, 16));
    let absent = |ct: &Conntrack, key: &FlowKey| match ct.lookup_or_vacancy(key) {
        Err(found) => found,
        Ok(found) => panic!("{key:?} is tracked: {found:?}"),
    };
    let position = |a: Ipv4Addr| similar_snat().iter().position(|b| *b == a).map(|i| i as u8);
    for i in 0..300u32 {
        let flow = similar_flow(i, 1);
        let (hash, original) = absent(&hinted, &flow.original);
        let reply = absent(&hinted, &flow.reply);
        let right = position(flow.reply.dst_addr).unwrap();
        let snat = Some(if i % 5 == 4 { right.wrapping_add(1) } else { right });
        if i % 7 == 3 {
            // Stale by a removal between the lookups and the insert.
            let gone = hinted.lookup(&similar_flow(i - 2, 1).original).unwrap().0;
            let _ = (hinted.remove(gone), plain.remove(gone));
        }
        let expected = plain.insert(flow);
        let id = hinted.insert_hashed(&flow, hash, Some(original), ReplyHint { slot: Some(reply), snat });
        assert_eq!(id, expected, "{i}");
        assert_eq!(hinted.lookup(&flow.reply), Some((id.unwrap(), Direction::Reply)));
        // Stale by the insertion that filled their slots: the tuple is found, not placed
        // twice (the same original with another reply, then another original with the same
        // reply).
        let same_original = Flow { reply: similar_flow(i + 100_000, 1).reply, ..flow };
        let fresh = absent(&hinted, &same_original.reply);
        let hint = ReplyHint { slot: Some(fresh), snat: position(same_original.reply.dst_addr) };
        assert_eq!(hinted.insert_hashed(&same_original, hash, Some(original), hint), Err(InsertError::Exists));
        assert_eq!(plain.insert(same_original), Err(InsertError::Exists));
        let same_reply = Flow { original: similar_flow(i + 100_000, 1).original, ..flow };
        let (other, vacancy) = absent(&hinted, &same_reply.original);
        let hint = ReplyHint { slot: Some(reply), snat };
        assert_eq!(hinted.insert_hashed(&same_reply, other, Some(vacancy), hint), Err(InsertError::Exists));
        assert_eq!(plain.insert(same_reply), Err(InsertError::Exists));
    }
    // A flow whose two tuples are equal, every hint holding: refused as by the plain insert.
    let mut same = similar_flow(500, 1);
    same.original.dst_addr = similar_snat()[0];
    same.reply = same.original;
    let (hash, original) = absent(&hinted, &same.original);
    let hint = ReplyHint { slot: Some((hash, original)), snat: Some(0) };
    assert_eq!(hinted.insert_hashed(&same, hash, Some(original), hint), Err(InsertError::Exists));
    assert_eq!(plain.insert(same), Err(InsertError::Exists));
    // Up to a full table, then refused with every hint holding.
    for i in 1000.. {
        let flow = similar_flow(i, 1);
        let (hash, original) = absent(&hinted, &flow.original);
        let hint = ReplyHint { slot: Some(absent(&hinted, &flow.reply)), snat: position(flow.reply.dst_addr) };
        let expected = plain.insert(flow);
        assert_eq!(hinted.insert_hashed(&flow, hash, Some(original), hint), expected, "{i}");
        if expected.is_err() {
            assert_eq!(expected, Err(InsertError::Full));
            break;
        }
    }
    assert_eq!(hinted.index.raw(), plain.index.raw());
    assert_eq!(hinted.iter().collect::<Vec<_>>(), plain.iter().collect::<Vec<_>>());
    check_invariants(&hinted, index::DISP_CAP);
}

/// [`Conntrack::lookup_or_vacancy`] (the run read by fingerprint first, the records read
/// only on a match) answers as the lookup and the prefetch's vacancy do: a tracked tuple's
/// flow and direction, an absent one's hash and the vacancy where its run ends, in a table
/// whose runs changed by insertions and removals.
#[test]
fn lookup_or_vacancy_is_the_lookup_and_the_run_end() {
    let mut ct = table(512, 16);
    for i in 0..400u32 {
        let _ = ct.insert(similar_flow(i, 1)).unwrap();
        if i % 3 == 0 {
            let _ = ct.remove(ct.lookup(&similar_flow(i / 2, 1).original).unwrap().0);
        }
    }
    for i in 0..800u32 {
        let flow = similar_flow(i, 1);
        for key in [flow.original, flow.reply] {
            let hash = ct.hash_key(&key);
            match (ct.lookup_or_vacancy(&key), ct.lookup(&key)) {
                (Ok(found), Some(expected)) => assert_eq!(found, expected, "{i}"),
                (Err((h, v)), None) => {
                    assert_eq!(h, hash, "{i}");
                    assert_eq!(ct.prefetch_record(hash), Candidate::Absent(v), "{i}");
                }
                (found, expected) => panic!("{i}: {found:?}, the lookup says {expected:?}"),
            }
        }
    }
}

/// A vacancy found ahead is used only while it still holds: after an insertion into its
/// run or any removal, the lookup and the insert walk the run again, with the same results
/// as without it.
#[test]
fn vacancies_hold_until_the_run_changes() {
    let mut ct = table(256, 16);
    for i in 0..150 {
        let _ = ct.insert(similar_flow(i, 1)).unwrap();
    }
    let vacancy_of = |ct: &Conntrack, key: &FlowKey| match ct.prefetch_record(ct.hash_key(key)) {
        Candidate::Absent(v) => v,
        c => panic!("{key:?} is not tracked: {c:?}"),
    };
    // Held: the new flow goes where the run ended, and is found there.
    let new = similar_flow(200, 1);
    let hash = ct.hash_key(&new.original);
    let v = vacancy_of(&ct, &new.original);
    assert_eq!(ct.lookup_candidate(&new.original, hash, Some(Candidate::Absent(v))), None);
    let id = ct.insert_hashed(&new, hash, Some(v), ReplyHint::default()).unwrap();
    assert_eq!(ct.lookup(&new.original), Some((id, Direction::Original)));
    assert_eq!(ct.lookup(&new.reply), Some((id, Direction::Reply)));
    // Stale after an insertion filled its slot: the same flow inserted again is found, not
    // placed twice.
    assert_eq!(ct.lookup_candidate(&new.original, hash, Some(Candidate::Absent(v))), Some((id, Direction::Original)));
    assert_eq!(ct.insert_hashed(&new, hash, Some(v), ReplyHint::default()), Err(InsertError::Exists));
    // Stale after a removal: a vacancy taken before it is not trusted.
    let next = similar_flow(201, 1);
    let hash = ct.hash_key(&next.original);
    let v = vacancy_of(&ct, &next.original);
    let _ = ct.remove(ct.lookup(&similar_flow(7, 1).original).unwrap().0);
    assert_eq!(ct.lookup_candidate(&next.original, hash, Some(Candidate::Absent(v))), None);
    let id = ct.insert_hashed(&next, hash, Some(v), ReplyHint::default()).unwrap();
    assert_eq!(ct.lookup(&next.original), Some((id, Direction::Original)));
    check_invariants(&ct, index::DISP_CAP);
}

#[test]
fn seeds_change_the_layout() {
    let mut a = table(64, 1);
    let mut b = table(64, 2);
    for i in 0..64 {
        let _ = a.insert(similar_flow(i, 0)).unwrap();
        let _ = b.insert(similar_flow(i, 0)).unwrap();
    }
    assert_ne!(a.index.raw(), b.index.raw());
}

// --- Model-based property test ---------------------------------------------------------

/// Test addresses of both families from two small numbers.
trait SmallAddress: Address {
    /// `10.0.net.host` or `2001:db8::net:host`.
    fn small(net: u8, host: u8) -> Self;
}

impl SmallAddress for Ipv4Addr {
    fn small(net: u8, host: u8) -> Self {
        Ipv4Addr::new(10, 0, net, host)
    }
}

impl SmallAddress for Ipv6Addr {
    fn small(net: u8, host: u8) -> Self {
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, u16::from(net), u16::from(host))
    }
}

/// The model's SNAT addresses: every destination address of [`small_key`].
fn small_snat<A: SmallAddress>() -> Vec<A> {
    vec![A::small(1, 0), A::small(1, 1)]
}

/// A key from a deliberately tiny space (2 · 2 · 3 · 2 · 3 = 72 keys), so that inserts clash,
/// tuples recur in both roles and probe runs in small tables are long. Every destination is a
/// SNAT address, so any key can be a reply tuple.
fn small_key<A: SmallAddress>() -> impl Strategy<Value = FlowKey<A>> {
    (prop::sample::select(vec![TCP, UDP]), 0u8..2, 0u16..3, 0u8..2, 0u16..3).prop_map(|(protocol, a, sp, b, dp)| {
        FlowKey { protocol, src_addr: A::small(0, a), src_port: 1000 + sp, dst_addr: A::small(1, b), dst_port: 80 + dp }
    })
}

fn all_small_keys<A: SmallAddress>() -> Vec<FlowKey<A>> {
    let mut keys = Vec::new();
    for protocol in [TCP, UDP] {
        for a in 0..2 {
            for sp in 0..3 {
                for b in 0..2 {
                    for dp in 0..3 {
                        keys.push(FlowKey {
                            protocol,
                            src_addr: A::small(0, a),
                            src_port: 1000 + sp,
                            dst_addr: A::small(1, b),
                            dst_port: 80 + dp,
                        });
                    }
                }
            }
        }
    }
    keys
}

#[derive(Debug, Clone)]
enum Op<A: Address> {
    /// Marks the `n % len`-th live flow assured, or not.
    Assure(usize, bool),
    /// Evicts near a key, at `now_ms`.
    EarlyDrop {
        near: FlowKey<A>,
        now_ms: u64,
    },
    /// Inserts a flow; `same_protocol` forces the reply's protocol to the original's (else
    /// they may differ, which the table refuses).
    Insert {
        original: FlowKey<A>,
        reply: FlowKey<A>,
        same_protocol: bool,
        deadline_ms: u64,
    },
    Lookup(FlowKey<A>),
    /// Removes the `n % len`-th live flow in id order, if any.
    Remove(usize),
    /// Sets the deadline (ms) of the `n % len`-th live flow.
    Touch(usize, u64),
    Expire {
        now_ms: u64,
        budget: usize,
    },
}

fn op<A: SmallAddress>() -> impl Strategy<Value = Op<A>> {
    prop_oneof![
        4 => (small_key(), small_key(), prop::bool::weighted(0.9), 0u64..20).prop_map(
            |(original, reply, same_protocol, deadline_ms)| Op::Insert { original, reply, same_protocol, deadline_ms }
        ),
        2 => small_key().prop_map(Op::Lookup),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(n, a)| Op::Assure(n, a)),
        1 => (small_key(), 0u64..20).prop_map(|(near, now_ms)| Op::EarlyDrop { near, now_ms }),
        2 => any::<usize>().prop_map(Op::Remove),
        1 => (any::<usize>(), 0u64..20).prop_map(|(n, d)| Op::Touch(n, d)),
        2 => (0u64..20, 0usize..12).prop_map(|(now_ms, budget)| Op::Expire { now_ms, budget }),
    ]
}

/// The specification, in the most obvious terms.
struct Model<A: Address> {
    flows: HashMap<FlowId, Flow<A>>,
    keys: HashMap<FlowKey<A>, (FlowId, Direction)>,
    cursor: usize,
}

impl<A: Address> Model<A> {
    fn nth_live(&self, n: usize) -> Option<FlowId> {
        let mut ids: Vec<_> = self.flows.keys().copied().collect();
        ids.sort_unstable();
        (!ids.is_empty()).then(|| ids[n % ids.len()])
    }

    fn remove(&mut self, id: FlowId) -> Flow<A> {
        let f = self.flows.remove(&id).unwrap();
        self.keys.remove(&f.original);
        self.keys.remove(&f.reply);
        f
    }
}

fn run<A: SmallAddress>(capacity: usize, seed: u64, disp_cap: u64, ops: &[Op<A>]) -> Result<(), TestCaseError> {
    let mut ct = table_with_displacement_cap(capacity, seed, &small_snat::<A>(), disp_cap);
    let mut model = Model { flows: HashMap::new(), keys: HashMap::new(), cursor: 0 };
    let keys = all_small_keys::<A>();
    for op in ops {
        match *op {
            Op::Insert { original, reply, same_protocol, deadline_ms } => {
                let reply = if same_protocol { FlowKey { protocol: original.protocol, ..reply } } else { reply };
                let f = flow(original, reply, deadline_ms);
                let got = ct.insert(f);
                if original.protocol != reply.protocol {
                    prop_assert_eq!(got, Err(InsertError::NotFullNat));
                } else if original == reply || model.keys.contains_key(&original) || model.keys.contains_key(&reply) {
                    prop_assert_eq!(got, Err(InsertError::Exists));
                } else if model.flows.len() == capacity {
                    prop_assert_eq!(got, Err(InsertError::Full));
                } else {
                    let id = got.map_err(|e| TestCaseError::fail(format!("insert failed: {e}")))?;
                    prop_assert!((id as usize) < capacity);
                    prop_assert!(!model.flows.contains_key(&id), "id {} handed out twice", id);
                    model.flows.insert(id, f);
                    model.keys.insert(original, (id, Direction::Original));
                    model.keys.insert(reply, (id, Direction::Reply));
                }
            }
            Op::Lookup(k) => {
                prop_assert_eq!(ct.lookup(&k), model.keys.get(&k).copied());
                prop_assert_eq!(ct.lookup_hashed(&k, ct.hash_key(&k)), model.keys.get(&k).copied());
            }
            Op::Assure(n, assured) => {
                if let Some(id) = model.nth_live(n) {
                    ct.state_mut(id).set_assured(assured);
                    model.flows.get_mut(&id).unwrap().state.set_assured(assured);
                }
            }
            Op::EarlyDrop { near, now_ms } => {
                // The model does not know the index order: it checks that the victim was live
                // and evictable, and that nothing is evicted when nothing may be.
                let evictable = |f: &Flow<A>| f.state.deadline.0 as u64 <= now_ms || !f.state.assured();
                match ct.early_drop(&near, ms(now_ms)) {
                    Some(victim) => {
                        let id = model.keys.get(&victim.original).map(|&(id, _)| id);
                        prop_assert!(id.is_some(), "evicted an untracked flow");
                        let id = id.unwrap();
                        prop_assert_eq!(model.flows[&id], victim);
                        prop_assert!(evictable(&victim), "evicted an assured live flow");
                        model.remove(id);
                    }
                    None => {
                        if ct.index.slot_count() <= EARLY_DROP_SLOTS {
                            // The window covers the whole index.
                            prop_assert!(!model.flows.values().any(evictable));
                        }
                    }
                }
            }
            Op::Remove(n) => {
                if let Some(id) = model.nth_live(n) {
                    prop_assert_eq!(ct.remove(id), model.remove(id));
                }
            }
            Op::Touch(n, deadline_ms) => {
                if let Some(id) = model.nth_live(n) {
                    let deadline = Deadline::at(ms(deadline_ms));
                    ct.state_mut(id).deadline = deadline;
                    model.flows.get_mut(&id).unwrap().state.deadline = deadline;
                }
            }
            Op::Expire { now_ms, budget } => {
                let mut expected = Vec::new();
                for _ in 0..budget.min(capacity) {
                    let id = model.cursor as FlowId;
                    // The model's notion of "due": the plain comparison, in ms.
                    if model.flows.get(&id).is_some_and(|f| f.state.deadline.0 as u64 <= now_ms) {
                        expected.push(model.remove(id));
                    }
                    model.cursor = (model.cursor + 1) % capacity;
                }
                let mut reaped = Vec::new();
                let removed = ct.expire(ms(now_ms), budget, |f| reaped.push(*f));
                prop_assert_eq!(removed, reaped.len());
                prop_assert_eq!(reaped, expected);
            }
        }
        prop_assert_eq!(ct.len(), model.flows.len());
        for k in &keys {
            prop_assert_eq!(ct.lookup(k), model.keys.get(k).copied(), "lookup {:?}", k);
        }
        let mut listed: Vec<_> = model.flows.iter().map(|(&id, f)| (id, *f)).collect();
        listed.sort_unstable_by_key(|&(id, _)| id);
        prop_assert_eq!(&ct.iter().collect::<Vec<_>>(), &listed);
        for &(id, f) in &listed {
            prop_assert_eq!(ct.get(id), f);
        }
        check_invariants(&ct, disp_cap);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn ipv4_agrees_with_a_hashmap_model(
        capacity in 0usize..14,
        seed in any::<u64>(),
        disp_cap in prop::sample::select(vec![1u64, 2, index::DISP_CAP]),
        ops in prop::collection::vec(op::<Ipv4Addr>(), 1..120),
    ) {
        run(capacity, seed, disp_cap, &ops)?;
    }

    #[test]
    fn ipv6_agrees_with_a_hashmap_model(
        capacity in 0usize..14,
        seed in any::<u64>(),
        disp_cap in prop::sample::select(vec![1u64, 2, index::DISP_CAP]),
        ops in prop::collection::vec(op::<Ipv6Addr>(), 1..120),
    ) {
        run(capacity, seed, disp_cap, &ops)?;
    }
}

mod persistent {
    use super::*;
    use crate::conntrack::persist::{Opened, Owner};

    /// A region file path of this test process's own (removed first).
    fn scratch(name: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("torii-conntrack-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        path
    }

    fn owner() -> Owner {
        Owner { worker: 1, workers: 2, snat_ports: (1024, 65535), interfaces: 7 }
    }

    fn open(path: &std::path::Path, owner: Owner, origin_ns: u64) -> (Conntrack, Opened) {
        Conntrack::persistent(path, 4096, 0x5eed, &similar_snat(), owner, origin_ns).unwrap()
    }

    /// A table filled, some flows removed, then dropped (as a process killed with `kill -9`
    /// leaves its mapping) is adopted by the next: every live flow is found by both tuples,
    /// removed flows are not, deadlines keep their place on `CLOCK_MONOTONIC`, the free
    /// records are reused, and the adopted flows are marked for revalidation.
    #[test]
    fn an_adopted_table_finds_every_flow_by_both_tuples() {
        adopts_every_flow(&scratch("adopt"));
    }

    /// The same in a region on hugetlbfs (`conntrack.region_dir`): the file is a whole
    /// number of huge pages long (hugetlbfs sizes files in pages only) and is adopted as
    /// on tmpfs. Needs `/dev/hugepages` mounted with pages free (root: scripts/setup).
    #[test]
    fn a_region_on_hugetlbfs_is_whole_pages_and_adopted() {
        use std::os::unix::fs::MetadataExt;
        let mount = std::path::Path::new("/dev/hugepages");
        let page = std::fs::metadata(mount).map_or(0, |m| m.blksize());
        if page < 2 << 20 {
            crate::io::af_packet::test_net::skip("/dev/hugepages is not a hugetlbfs mount (run scripts/setup as root)");
            return;
        }
        let dir = mount.join(format!("torii-conntrack-test-{}", std::process::id()));
        let _lock = crate::conntrack::persist::lock_region_dir(&dir).unwrap();
        let err = crate::conntrack::persist::lock_region_dir(&dir).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock, "a second lock on the directory is refused: {err}");
        let path = dir.join("conntrack-w1-v4");
        let (ct, _) = open(&path, owner(), 0);
        drop(ct);
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(len > 0 && len.is_multiple_of(page), "{len} bytes: whole pages of {page}");
        std::fs::remove_file(&path).unwrap();
        adopts_every_flow(&path);
        std::fs::remove_dir(&dir).unwrap();
    }

    /// Fills a table in region file `path`, removes some flows, drops it, adopts it, checks
    /// every flow; removes the file.
    fn adopts_every_flow(path: &std::path::Path) {
        let (mut ct, opened) = open(path, owner(), 1_000 * NS_PER_MS);
        assert_eq!(opened, Opened::Created(None));
        let flows: Vec<Flow> = (0..3000).map(|i| similar_flow(i, 60_000)).collect();
        let ids: Vec<FlowId> = flows.iter().map(|f| ct.insert(*f).unwrap()).collect();
        for id in ids.iter().step_by(3) {
            ct.remove(*id);
        }
        // Established, assured and routed both ways, so lean both ways: the next process
        // keeps the connection's state but routes it again (its host's addresses and
        // routers may differ), and the lean path waits for that.
        for id in ids.iter().skip(1).step_by(3) {
            let state = ct.state_mut(*id);
            state.set_tcp_state(TcpState::Established);
            state.set_seen_reply(true);
            state.set_assured(true);
            state.set_egress(Direction::Original, 2, true);
            state.set_egress(Direction::Reply, 1, false);
            assert!(state.lean(Direction::Original) && state.lean(Direction::Reply));
        }
        drop(ct);
        // The next process's clock started 10 s later on CLOCK_MONOTONIC.
        let (mut ct, opened) = open(path, owner(), 11_000 * NS_PER_MS);
        assert_eq!(opened, Opened::Adopted);
        assert_eq!(ct.len(), 2000);
        for (i, f) in flows.iter().enumerate() {
            let found = (ct.lookup(&f.original), ct.lookup(&f.reply));
            if i % 3 == 0 {
                assert_eq!(found, (None, None), "flow {i} was removed");
            } else {
                let (Some((id, Direction::Original)), Some((rid, Direction::Reply))) = found else {
                    panic!("flow {i} not found by both tuples: {found:?}")
                };
                assert_eq!(id, rid);
                let state = ct.state(id);
                assert_eq!(state.deadline.remaining_ms(0), 50_000, "60 s after the first origin");
                assert_eq!(state.table_epoch, FlowState::NEVER_VALIDATED);
                assert_eq!((state.egress(Direction::Original), state.egress(Direction::Reply)), (None, None));
                assert!(!state.lean(Direction::Original) && !state.lean(Direction::Reply));
                if i % 3 == 1 {
                    assert_eq!(state.tcp_state(), TcpState::Established, "flow {i}");
                    assert!(state.seen_reply() && state.assured(), "flow {i}");
                }
            }
        }
        for i in 3000..4096 + 1000 {
            let r = ct.insert(similar_flow(i, 60_000));
            assert_eq!(r.is_ok(), i < 3000 + 2096, "flow {i}: {r:?}");
        }
        assert_eq!(ct.len(), 4096);
        drop(ct);
        std::fs::remove_file(path).unwrap();
    }

    /// Another owner, another capacity or a damaged header: the table starts empty and says
    /// why.
    #[test]
    fn a_header_mismatch_starts_empty() {
        let path = scratch("mismatch");
        let (mut ct, _) = open(&path, owner(), 0);
        ct.insert(similar_flow(1, 60_000)).unwrap();
        drop(ct);
        let (ct, opened) = open(&path, Owner { workers: 3, ..owner() }, 0);
        assert!(matches!(&opened, Opened::Created(Some(why)) if why.contains("worker count")), "{opened:?}");
        assert!(ct.is_empty());
        drop(ct);
        let (ct, opened) = open(&path, Owner { workers: 3, ..owner() }, 0);
        assert_eq!(opened, Opened::Adopted);
        assert!(ct.is_empty(), "the empty table replaced the old one");
        drop(ct);
        let (mut ct, _) = open(&path, owner(), 0);
        ct.insert(similar_flow(1, 60_000)).unwrap();
        drop(ct);
        let (ct, opened) = Conntrack::persistent(&path, 8192, 0x5eed, &similar_snat(), owner(), 0).unwrap();
        assert!(matches!(&opened, Opened::Created(Some(_))), "{opened:?}");
        assert!(ct.is_empty());
        drop(ct);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[8] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        let (ct, opened) = Conntrack::persistent(&path, 8192, 0x5eed, &similar_snat(), owner(), 0).unwrap();
        assert!(matches!(&opened, Opened::Created(Some(why)) if why.contains("layout")), "{opened:?}");
        assert!(ct.is_empty());
        drop(ct);
        std::fs::remove_file(&path).unwrap();
    }
}

/// `forget_table_epochs` resets every flow's table epoch, and nothing else.
#[test]
fn forgetting_table_epochs_resets_them_and_nothing_else() {
    let mut ct = table(64, 21);
    let ids: Vec<FlowId> = (0..40).map(|i| ct.insert(similar_flow(i, 5_000)).unwrap()).collect();
    for (k, &id) in ids.iter().enumerate() {
        ct.state_mut(id).table_epoch = 7 + k as u16;
        ct.state_mut(id).set_egress(Direction::Reply, 1, true);
    }
    let _ = ct.remove(ids[3]);
    let before: Vec<_> = ct.iter().collect();
    ct.forget_table_epochs();
    let after: Vec<_> = ct.iter().collect();
    assert_eq!(before.len(), after.len());
    for ((id, b), (id2, a)) in before.into_iter().zip(after) {
        assert_eq!(id, id2);
        assert_eq!(a.state.table_epoch, FlowState::NEVER_VALIDATED);
        assert_eq!(Flow { state: FlowState { table_epoch: FlowState::NEVER_VALIDATED, ..b.state }, ..b }, a);
    }
}

/// `lean` confirms a candidate exactly as `lookup` finds the key (the right flow and
/// direction, not another flow's, not the other direction, not a removed flow) and gives the
/// tuple the packet leaves as: the other tuple, reversed.
#[test]
fn lean_confirms_as_lookup() {
    let mut ct = table(256, 17);
    let flows: Vec<_> = (0..100).map(|i| similar_flow(i * 2_003, 1)).collect();
    let ids: Vec<_> = flows.iter().map(|f| ct.insert(*f).unwrap()).collect();
    let _ = ct.remove(ids[7]);
    for (i, f) in flows.iter().enumerate() {
        for (key, leaves) in [(f.original, f.reply.reversed()), (f.reply, f.original.reversed())] {
            let found = ct.lookup(&key);
            for id in [ids[i], ids[(i + 1) % ids.len()]] {
                for direction in [Direction::Original, Direction::Reply] {
                    let got = ct.lean(id, direction, &key).map(|(_, _, out)| out);
                    let want = (found == Some((id, direction))).then_some(leaves);
                    assert_eq!(got, want, "flow {i} {key:?} as {id} {direction:?}");
                }
            }
        }
    }
}

/// `Record::matches_wide` (the lean path's confirm) answers as `Record::matches` for both
/// families: each tuple of a flow in either direction, and the tuple with one field changed
/// (each field, each address's first and last octet).
#[test]
fn wide_matches_are_matches() {
    fn check<A: Address>(flow: Flow<A>, snat: &[A], bump: impl Fn(A, usize) -> A) {
        let index = snat.iter().position(|a| *a == flow.reply.dst_addr).unwrap();
        let record = Record::pack(&flow, index as u8);
        for tuple in [flow.original, flow.reply] {
            let mut keys = vec![tuple, FlowKey { protocol: tuple.protocol ^ 1, ..tuple }];
            keys.push(FlowKey { src_port: tuple.src_port ^ 1, ..tuple });
            keys.push(FlowKey { dst_port: tuple.dst_port ^ 0x100, ..tuple });
            for octet in [0, A::LEN - 1] {
                keys.push(FlowKey { src_addr: bump(tuple.src_addr, octet), ..tuple });
                keys.push(FlowKey { dst_addr: bump(tuple.dst_addr, octet), ..tuple });
            }
            for key in keys {
                for direction in [Direction::Original, Direction::Reply] {
                    let want = record.matches(direction, &key, snat);
                    assert_eq!(record.matches_wide(direction, &key, snat), want, "{key:?} {direction:?}");
                }
            }
        }
    }
    let snat = similar_snat();
    for i in [0, 1, 60_001, 180_000] {
        check(similar_flow(i, 1), &snat, |a: Ipv4Addr, k| {
            let mut o = a.octets();
            o[k] ^= 0x10;
            Ipv4Addr::from(o)
        });
    }
    let snat6: Vec<Ipv6Addr> = vec!["fd00::1".parse().unwrap(), "fd00::2".parse().unwrap()];
    let key6 = |protocol, src: &str, src_port, dst: &str, dst_port| FlowKey {
        protocol,
        src_addr: src.parse::<Ipv6Addr>().unwrap(),
        src_port,
        dst_addr: dst.parse::<Ipv6Addr>().unwrap(),
        dst_port,
    };
    let f6 =
        flow(key6(TCP, "2001:db8::7", 40_000, "2001:db8:1::10", 443), key6(TCP, "fd10::3", 8443, "fd00::2", 61_000), 1);
    check(f6, &snat6, |a: Ipv6Addr, k| {
        let mut o = a.octets();
        o[k] ^= 0x10;
        Ipv6Addr::from(o)
    });
}
