//! L2 mode in the pipeline: only the VIPs this gateway owns are answered for, its own
//! addresses always; worker 0 announces the VIPs that join the owned set (only those) with
//! gratuitous ARPs and unsolicited Neighbor Advertisements, twice, 2 s apart.

use std::net::Ipv6Addr;

use super::*;
use crate::l2::Owners;
use crate::wire::icmpv6::NEXT_HEADER_ICMPV6;
use crate::wire::ipv6::ALL_NODES;
use crate::wire::ndp;
use crate::wire::Icmpv6Type;

const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x203, 0, 0, 0, 0, 0x10);

fn arp_request(target: Ipv4Addr) -> Vec<u8> {
    frames::arp(
        L2 { src: CLIENT_MAC, dst: MacAddr::BROADCAST },
        ArpOperation::Request,
        CLIENT_MAC,
        CLIENT.0,
        MacAddr::UNSPECIFIED,
        target,
    )
}

fn l2_state(worker: usize) -> (WorkerState, Arc<Owners>) {
    let mut st = state(worker, 2);
    let owners = Arc::new(Owners::l2());
    st.l2 = Arc::clone(&owners);
    (st, owners)
}

/// Every frame `poll_transmit` emits at `now`, with its port.
fn emitted(now: u64, st: &mut WorkerState) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    let mut buf = [0u8; POLL_TRANSMIT_LEN];
    while let Some((port, len)) = poll_transmit(now, &mut buf, st) {
        out.push((port, buf[..len].to_vec()));
    }
    out
}

#[test]
fn a_non_owner_stays_silent_for_the_vip_and_answers_for_its_own_addresses() {
    let (t, (mut st, owners)) = (table(&["10.70.0.11"]), l2_state(0));
    let req = arp_request(VIP);
    assert_eq!(run(0, &req, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::ArpNotForUs), "not owned yet");
    let own = arp_request(ip("198.51.100.1"));
    assert!(matches!(run(0, &own, FRONT, &t, &mut st).0, Verdict::Transmit { .. }), "own addresses always");
    owners.publish(vec![(IpAddr::V4(VIP), u64::MAX)], Some(vec![IpAddr::V4(VIP)]));
    let want = frames::arp(
        L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC },
        ArpOperation::Reply,
        GW_FRONT_MAC,
        VIP,
        CLIENT_MAC,
        CLIENT.0,
    );
    assert_eq!(run(0, &req, FRONT, &t, &mut st), (tx(FRONT, &want), want), "owned: answered");
    owners.publish(vec![], None);
    assert_eq!(run(0, &req, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::ArpNotForUs), "given up: silent");
}

#[test]
fn worker_0_announces_vips_that_join_twice_on_every_interface_of_their_family() {
    let (mut st, owners) = l2_state(0);
    let (mut other, _) = l2_state(1);
    other.l2 = Arc::clone(&owners);
    assert!(emitted(0, &mut st).is_empty(), "nothing owned, nothing announced");
    let both = vec![IpAddr::V4(VIP), IpAddr::V6(VIP6)];
    owners.publish(both.iter().map(|v| (*v, u64::MAX)).collect(), Some(both.clone()));
    let garp = |mac: MacAddr| {
        frames::arp(
            L2 { src: mac, dst: MacAddr::BROADCAST },
            ArpOperation::Request,
            mac,
            VIP,
            MacAddr::UNSPECIFIED,
            VIP,
        )
    };
    let na = |mac: MacAddr| {
        let mut dst = [0x33, 0x33, 0, 0, 0, 0];
        dst[2..].copy_from_slice(&ALL_NODES.octets()[12..]);
        frames::ndp(
            L2 { src: mac, dst: MacAddr(dst) },
            VIP6,
            ALL_NODES,
            Icmpv6Type::NeighborAdvert,
            ndp::FLAG_OVERRIDE,
            VIP6,
            Some(mac),
        )
    };
    // The embedded configuration: front (port 0) and back (port 1), both dual-stack.
    let round = vec![
        (FRONT, garp(GW_FRONT_MAC)),
        (BACK, garp(GW_BACK_MAC)),
        (FRONT, na(GW_FRONT_MAC)),
        (BACK, na(GW_BACK_MAC)),
    ];
    assert_eq!(emitted(SEC, &mut st), round, "the first round at once");
    assert_eq!(NEXT_HEADER_ICMPV6, round[2].1[20], "an ICMPv6 advertisement");
    assert!(emitted(SEC + SEC, &mut st).is_empty(), "the second waits ANNOUNCE_INTERVAL");
    assert_eq!(emitted(3 * SEC, &mut st), round, "the second round 2 s later");
    assert!(emitted(10 * SEC, &mut st).is_empty(), "ANNOUNCE_NUM rounds in all");
    assert!(emitted(SEC, &mut other).is_empty(), "only worker 0 announces");
    assert_eq!(st.counters.l2_announcements, 8);
    owners.publish(vec![(IpAddr::V6(VIP6), u64::MAX)], None);
    assert!(emitted(11 * SEC, &mut st).is_empty(), "a VIP leaving announces nothing");
    owners.publish(both.iter().map(|v| (*v, u64::MAX)).collect(), Some(vec![IpAddr::V4(VIP)]));
    let v4_only = vec![round[0].clone(), round[1].clone()];
    assert_eq!(emitted(12 * SEC, &mut st), v4_only, "only the VIP that joined is announced");
    owners.publish(vec![(IpAddr::V6(VIP6), u64::MAX)], None);
    assert!(emitted(14 * SEC, &mut st).is_empty(), "a VIP given up before its second round: skipped");
}
