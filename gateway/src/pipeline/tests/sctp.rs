//! Golden packet tests of SCTP front doors: an association's INIT and INIT ACK translated
//! both ways with the CRC32c recomputed, checksum checking, timeouts, ABORT, and the reject
//! of a front door without endpoints.

use super::*;
use crate::pipeline::sctp::{CLOSED_NS, COOKIE_WAIT_NS, ESTABLISHED_NS};
use crate::wire::SctpPacket;

const SIG_PORT: u16 = 38412;
const ENDPOINT: (Ipv4Addr, u16) = (Ipv4Addr::new(10, 70, 0, 11), 38412);

/// `demo/amf:ngap` — SCTP 203.0.113.10:38412 → 10.70.0.11:38412 — and `demo/none:diameter` —
/// SCTP 203.0.113.11:3868 without endpoints.
fn sctp_table() -> Table {
    let spec = TableSpec {
        frontends: vec![
            FrontendSpec {
                addr: IpAddr::V4(VIP),
                port: SIG_PORT,
                protocol: Protocol::Sctp,
                kind: FrontendKind::LoadBalancer,
                service: 0,
                source_ranges: vec![],
            },
            FrontendSpec {
                addr: IpAddr::V4(EMPTY_VIP),
                port: 3868,
                protocol: Protocol::Sctp,
                kind: FrontendKind::LoadBalancer,
                service: 1,
                source_ranges: vec![],
            },
        ],
        services: vec![
            ServiceSpec {
                name: "demo/amf:ngap".into(),
                backends: vec![BackendSpec { addr: IpAddr::V4(ENDPOINT.0), port: ENDPOINT.1 }],
                ..Default::default()
            },
            ServiceSpec { name: "demo/none:diameter".into(), ..Default::default() },
        ],
    };
    Table::new(crate::table::Storage::Owned(build(&spec, 1).unwrap())).unwrap()
}

fn from_endpoint() -> L2 {
    L2 { src: backend_mac(11), dst: GW_BACK_MAC }
}

/// An INIT ACK chunk (RFC 9260 § 3.3.3) with a 4-byte State Cookie parameter.
fn init_ack_chunk(initiate_tag: u32) -> [u8; 28] {
    let mut c = [0u8; 28];
    c[..20].copy_from_slice(&frames::sctp_init_chunk(initiate_tag));
    c[0] = 2;
    c[3] = 28;
    c[20..28].copy_from_slice(&[0, 7, 0, 8, 0xc0, 0x0c, 0x1e, 0x55]); // State Cookie
    c
}

const ABORT: [u8; 4] = [6, 0, 0, 4];
const DATA: [u8; 20] = [0, 3, 0, 20, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 60, b'n', b'g', b'a', b'p'];

#[test]
fn init_and_init_ack_are_translated_with_a_fresh_crc32c() {
    let (t, mut st) = (sctp_table(), state(0, 1));
    let init = frames::sctp(to_gw(), CLIENT, (VIP, SIG_PORT), 0, &frames::sctp_init_chunk(0x1111_2222), 64);
    let want = frames::sctp(
        L2 { src: GW_BACK_MAC, dst: backend_mac(11) },
        (SNAT, 1024),
        ENDPOINT,
        0,
        &frames::sctp_init_chunk(0x1111_2222),
        63,
    );
    let (v, out) = run(0, &init, FRONT, &t, &mut st);
    assert_eq!((v, &out), (tx(BACK, &want), &want));
    assert!(SctpPacket::new_checked(&out[34..]).unwrap().verify_checksum());
    assert_ne!(&out[42..46], &init[42..46], "the ports changed, so did the CRC");

    let ack = frames::sctp(from_endpoint(), ENDPOINT, (SNAT, 1024), 0x1111_2222, &init_ack_chunk(0x3333_4444), 64);
    let want = frames::sctp(
        L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC },
        (VIP, SIG_PORT),
        CLIENT,
        0x1111_2222,
        &init_ack_chunk(0x3333_4444),
        63,
    );
    assert_eq!(run(SEC, &ack, BACK, &t, &mut st), (tx(FRONT, &want), want));
    assert_eq!(st.conntrack.len(), 1);
    assert_eq!((st.counters.forwarded_original, st.counters.forwarded_reply), (1, 1));
}

#[test]
fn a_wrong_crc32c_is_dropped_unless_the_checksum_is_left_to_offload() {
    let (t, mut st) = (sctp_table(), state(0, 1));
    let mut init = frames::sctp(to_gw(), CLIENT, (VIP, SIG_PORT), 0, &frames::sctp_init_chunk(1), 64);
    init[34 + 8..34 + 12].fill(0);
    assert_eq!(run(0, &init, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::BadSctpChecksum));
    assert_eq!(st.conntrack.len(), 0);
    // The sender's stack left the CRC to an offload (AF_PACKET: TP_STATUS_CSUMNOTREADY):
    // forwarded, with the CRC computed by the gateway.
    let mut buf = vec![0u8; 2048];
    buf[..init.len()].copy_from_slice(&init);
    let meta = Meta { iface: FRONT, len: init.len(), l4_csum_partial: true, ..Meta::default() };
    let v = process(0, &mut buf, &meta, &t, &mut st);
    assert_eq!(v, tx(BACK, &init));
    assert!(SctpPacket::new_checked(&buf[34..init.len()]).unwrap().verify_checksum());
    // Shorter than the common header.
    let mut runt = frames::sctp(to_gw(), CLIENT, (VIP, SIG_PORT), 0, &[], 64);
    runt.truncate(34 + 8);
    let mut ip4 = Ipv4Packet::new_unchecked(&mut runt[14..]);
    ip4.set_total_len(28);
    ip4.fill_checksum();
    assert_eq!(run(0, &runt, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::MalformedL4));
}

#[test]
fn timeouts_follow_the_association_and_abort_shortens_them() {
    let (t, mut st) = (sctp_table(), state(0, 1));
    let init = frames::sctp(to_gw(), CLIENT, (VIP, SIG_PORT), 0, &frames::sctp_init_chunk(7), 64);
    assert!(matches!(run(0, &init, FRONT, &t, &mut st).0, Verdict::Transmit { .. }));
    // Unanswered: gone after COOKIE-WAIT's 3 s.
    assert_eq!(poll_expire(COOKIE_WAIT_NS - 1, 1024, &mut st), 0);
    assert_eq!(poll_expire(COOKIE_WAIT_NS, 1024, &mut st), 1);

    // Answered: 210 s of idleness allowed.
    let (v, out) = run(10 * SEC, &init, FRONT, &t, &mut st);
    assert!(matches!(v, Verdict::Transmit { .. }));
    let snat_port = SctpPacket::new_checked(&out[34..]).unwrap().src_port();
    let ack = frames::sctp(from_endpoint(), ENDPOINT, (SNAT, snat_port), 7, &init_ack_chunk(8), 64);
    assert!(matches!(run(11 * SEC, &ack, BACK, &t, &mut st).0, Verdict::Transmit { .. }));
    // The answer itself still counts as unanswered (Linux: COOKIE-WAIT until the cookie).
    let echo = frames::sctp(to_gw(), CLIENT, (VIP, SIG_PORT), 8, &[10, 0, 0, 8, 0xc0, 0x0c, 0x1e, 0x55], 64);
    assert!(matches!(run(11 * SEC, &echo, FRONT, &t, &mut st).0, Verdict::Transmit { .. }));
    assert_eq!(poll_expire(11 * SEC + ESTABLISHED_NS - 1, 1024, &mut st), 0);

    // An ABORT (from the endpoint here) closes it: 10 s, whatever follows but a new INIT.
    let now = 12 * SEC;
    let abort = frames::sctp(from_endpoint(), ENDPOINT, (SNAT, snat_port), 7, &ABORT, 64);
    let want = frames::sctp(L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC }, (VIP, SIG_PORT), CLIENT, 7, &ABORT, 63);
    assert_eq!(run(now, &abort, BACK, &t, &mut st), (tx(FRONT, &want), want));
    let data = frames::sctp(to_gw(), CLIENT, (VIP, SIG_PORT), 8, &DATA, 64);
    assert!(matches!(run(now + SEC, &data, FRONT, &t, &mut st).0, Verdict::Transmit { .. }));
    assert_eq!(poll_expire(now + SEC + CLOSED_NS - 1, 1024, &mut st), 0);
    assert_eq!(poll_expire(now + SEC + CLOSED_NS, 1024, &mut st), 1);
    assert_eq!(st.conntrack.len(), 0);
}

#[test]
fn a_stray_abort_creates_no_flow() {
    let (t, mut st) = (sctp_table(), state(0, 1));
    let abort = frames::sctp(to_gw(), CLIENT, (VIP, SIG_PORT), 9, &ABORT, 64);
    assert_eq!(run(0, &abort, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::NoConntrack));
    let complete = frames::sctp(to_gw(), CLIENT, (VIP, SIG_PORT), 9, &[14, 0, 0, 4], 64);
    assert_eq!(run(0, &complete, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::NoConntrack));
    // Mid-association chunks of an unknown association do create one (a restarted gateway
    // keeps serving it on the same Maglev choice).
    let data = frames::sctp(to_gw(), CLIENT, (VIP, SIG_PORT), 9, &DATA, 64);
    assert!(matches!(run(0, &data, FRONT, &t, &mut st).0, Verdict::Transmit { .. }));
    assert_eq!(st.conntrack.len(), 1);
}

#[test]
fn a_front_door_without_endpoints_answers_port_unreachable() {
    // kube-proxy's REJECT rule: iptables' REJECT defaults to icmp-port-unreachable, for SCTP too.
    let (t, mut st) = (sctp_table(), state(0, 1));
    let init = frames::sctp(to_gw(), CLIENT, (EMPTY_VIP, 3868), 0, &frames::sctp_init_chunk(5), 64);
    let want = frames::icmp_error(
        L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC },
        EMPTY_VIP,
        CLIENT.0,
        Icmpv4Type::DstUnreachable,
        3,
        0,
        &init[14..14 + 28],
        64,
    );
    assert_eq!(run(0, &init, FRONT, &t, &mut st), (tx(FRONT, &want), want));
    assert_eq!((st.counters.rejected, st.conntrack.len()), (1, 0));
}
