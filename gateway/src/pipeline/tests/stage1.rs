//! Stage 1 of [`process_burst`] (`burst::stage_1`: the early parse of the common frame at
//! fixed offsets, the link layer's shortcut, the IPv4 header check in wide words) against
//! the full parse it stands for: the link layer parsed in full (`link::receive_parsed`),
//! then the checked views (`ipv4::flow_key_checked`, `ipv6::flow_key`). On any frame — TCP
//! with any flags, UDP, SCTP, ICMP, IPv6, IPv4 options, fragments, TTLs, 802.1Q and 802.1ad
//! tags, foreign, broadcast and multicast MACs, with any of the bytes stage 1 tests changed,
//! with the header checksum set right afterwards or not, cut short, on any port (of a host
//! with VLAN interfaces or without), with any of the driver's flags — stage 1 must hand on
//! the very flow key, lean segment and hash the full parse gives (or none), claim a
//! correct header checksum only for a header that has one, and keep a SYN's segment for the
//! general path (`FlowHint::V4`) only as the general parse finds it
//! (`link::receive`, `ipv4::segment_plain`).

use std::net::Ipv6Addr;

use proptest::prelude::*;

use super::ipv6::VIP6;
use super::*;
use crate::pipeline::hint::{FlowHint, LeanFrame, LeanSegment, PREFETCH_WINDOW};
use crate::wire::checksum;

const CLIENT6: (Ipv6Addr, u16) = (Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0x10), 40000);

/// The offsets stage 1 reads of an untagged IPv4 frame: the destination MAC, the EtherType,
/// the whole IPv4 header, the ports, and TCP's sequence numbers, Data Offset, flags and
/// window (UDP's Length).
const READ: [usize; 44] = [
    0, 1, 2, 3, 4, 5, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35,
    36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49,
];

/// What a frame is before it is changed.
#[derive(Clone, Copy, Debug)]
enum Base {
    Tcp(u8),
    Udp,
    Sctp,
    Icmp,
    Tcp6(u8),
    Udp6,
}

fn arb_base() -> impl Strategy<Value = Base> {
    prop_oneof![
        4 => prop::sample::select(vec![
            TcpFlags::ACK.0,
            TcpFlags::ACK.0 | TcpFlags::PSH.0,
            TcpFlags::SYN.0,
            TcpFlags::SYN.0 | TcpFlags::ACK.0,
            TcpFlags::FIN.0 | TcpFlags::ACK.0,
            TcpFlags::RST.0,
        ])
        .prop_map(Base::Tcp),
        1 => any::<u8>().prop_map(Base::Tcp),
        2 => Just(Base::Udp),
        1 => Just(Base::Sctp),
        1 => Just(Base::Icmp),
        1 => any::<u8>().prop_map(Base::Tcp6),
        1 => Just(Base::Udp6),
    ]
}

/// An IPv4 frame's header changed at `14 + at` and its checksum set right again.
fn set_ipv4(f: &mut [u8], at: usize, bytes: &[u8]) {
    f[14 + at..14 + at + bytes.len()].copy_from_slice(bytes);
    fix_checksum(f);
}

/// Sets the checksum of the IPv4 header at offset 14 of `f` (of the length its IHL says,
/// as far as the frame holds it).
fn fix_checksum(f: &mut [u8]) {
    let ihl = usize::from(f[14] & 0x0f) * 4;
    let Some(header) = f.get_mut(14..14 + ihl.max(20)) else { return };
    header[10..12].fill(0);
    let sum = checksum::checksum(header);
    header[10..12].copy_from_slice(&sum.to_be_bytes());
}

/// A frame and its driver metadata: a well-formed packet of `base` with `payload` bytes, then
/// IPv4 options (`options` words of NOPs), fragment bits, TTL; its MAC, tag; bytes changed
/// (`changes`, at any offset, or at the ones stage 1 reads: `read`), the checksum set right
/// after them or not; cut by `cut` bytes or its length overstated; the port and flags.
#[allow(clippy::type_complexity)]
fn arb_frame() -> impl Strategy<Value = (Vec<u8>, Meta)> {
    (
        (arb_base(), 0usize..48, 0usize..3, prop::sample::select(vec![0u16, 0x4000, 0x2000, 0x0001, 0x8000, 0x6000])),
        (
            prop::sample::select(vec![64u8, 2, 1, 0]),
            0u8..8,
            prop::sample::select(vec![0u16, 0, 0, 0, 100, 200, 0x1000]),
        ),
        (
            prop::collection::vec((0usize..80, any::<u8>()), 0..3),
            prop::collection::vec((prop::sample::select(READ.to_vec()), 1u8..=255), 0..3),
            any::<bool>(),
        ),
        (0usize..64, 0usize..3, prop::sample::select(vec![FRONT, FRONT, FRONT, BACK, 2])),
        (any::<bool>(), any::<bool>(), any::<bool>()),
    )
        .prop_map(|(shape, l2, changes, length, flags)| {
            let ((base, payload, options, frag), (ttl, mac, tag), (changes, read, fix), (cut, over, iface)) =
                (shape, l2, changes, length);
            let payload = vec![0x5au8; payload];
            let dst = match mac {
                0 => GW_BACK_MAC,
                1 => MacAddr::BROADCAST,
                2 => MacAddr([0x33, 0x33, 0, 0, 0, 1]),
                _ => GW_FRONT_MAC,
            };
            let l2 = L2 { src: CLIENT_MAC, dst };
            let mut f = match base {
                Base::Tcp(flags) => frames::tcp(l2, CLIENT, (VIP, 80), TcpFlags(flags), 1000, 2000, &payload, ttl),
                Base::Udp => frames::udp(l2, CLIENT, (VIP, 80), &payload, ttl),
                Base::Sctp => frames::sctp(l2, CLIENT, (VIP, 80), 7, &frames::sctp_init_chunk(9), ttl),
                Base::Icmp => frames::icmp_echo(l2, CLIENT.0, VIP, 1, 1, &payload, false),
                Base::Tcp6(flags) => frames::tcp6(l2, CLIENT6, (VIP6, 80), TcpFlags(flags), 1000, 2000, &payload, ttl),
                Base::Udp6 => frames::udp6(l2, CLIENT6, (VIP6, 80), &payload, ttl),
            };
            let ipv4 = !matches!(base, Base::Tcp6(_) | Base::Udp6);
            if ipv4 {
                if options > 0 {
                    // NOP options after the 20-byte header: IHL, Total Length, checksum.
                    let words = options;
                    f.splice(34..34, std::iter::repeat_n(1u8, 4 * words));
                    f[14] = 0x45 + words as u8;
                    let total = u16::from_be_bytes([f[16], f[17]]) + 4 * words as u16;
                    f[16..18].copy_from_slice(&total.to_be_bytes());
                }
                let word = u16::from_be_bytes([f[20], f[21]]) | frag;
                set_ipv4(&mut f, 6, &word.to_be_bytes());
            }
            f.resize(f.len().max(80), 0);
            for (at, byte) in changes {
                f[at] = byte;
            }
            for (at, bits) in read {
                f[at] ^= bits;
            }
            if fix && ipv4 {
                fix_checksum(&mut f);
            }
            if tag != 0 || mac == 4 {
                // A tag (VID 0: priority only), or an 802.1ad one outside it.
                let tpid = if mac == 4 { 0x88a8 } else { 0x8100 };
                f = frames::tagged(&f, tpid, tag);
            }
            let len = f.len() - cut.min(f.len());
            let len = if over == 1 { len + 64 } else { len };
            let (partial, good, l4_good) = flags;
            let meta = Meta { iface, len, l4_csum_partial: partial, l3_csum_good: good, l4_csum_good: l4_good };
            (f, meta)
        })
}

/// Stage 1 of `f` (slot 0 of a chunk of one) on worker `st` (whose conntracks it only
/// reads) against the full parse; see the module documentation.
fn stage_1_agrees(st: &mut WorkerState, f: &[u8], meta: Meta) -> Result<(), TestCaseError> {
    let mut frames = vec![f.to_vec()];
    let mut leans = [LeanFrame::EMPTY; PREFETCH_WINDOW];
    let (lean4, lean6) = crate::pipeline::burst::stage_1(&mut frames, &[meta], st, &mut leans, 0);
    let hints = &st.hints.frames[0];
    let parsed = crate::pipeline::link::receive_parsed(f, &meta, &st.host);
    // The shortcut, where it answers, answers as the parse does.
    if let Some((rx, ethertype)) = crate::pipeline::link::receive_untagged(f, &meta, &st.host) {
        prop_assert_eq!(Ok((rx, ethertype)), parsed);
    }
    let header_ok = |rx: &crate::pipeline::link::Rx| {
        rx.l3_csum_good || Ipv4Packet::new_checked(&f[rx.l2_len..rx.len]).is_ok_and(|ip| ip.verify_checksum())
    };
    match parsed {
        Ok((rx, EtherType::Ipv4)) => {
            let mut seg = LeanSegment::NONE;
            let Some((key, _)) = crate::pipeline::ipv4::flow_key_checked(f, rx, &mut seg) else {
                prop_assert_eq!((lean4, lean6), (0, 0));
                prop_assert!(hints.flow.is_none(), "{:?}", hints.flow);
                return Ok(());
            };
            let hash = st.conntrack.hash_key(&key);
            prop_assert_eq!(lean6, 0);
            if seg.is_lean() {
                prop_assert_eq!(lean4, 1);
                prop_assert_eq!((leans[0].key, leans[0].hash, leans[0].seg), (key, hash, seg));
                prop_assert!(header_ok(&rx), "a lean frame's header checksum is correct");
            } else {
                prop_assert_eq!(lean4, 0);
                let Some(FlowHint::V4(k, h, syn)) = hints.flow else {
                    return Err(TestCaseError::fail(format!("no IPv4 hint: {:?}", hints.flow)));
                };
                prop_assert_eq!((k, h), (key, hash));
                prop_assert!(!hints.l3_checked || header_ok(&rx), "a header checked that is not correct");
                prop_assert!(hints.candidate.is_none() && hints.route.is_none() && hints.new_flow.is_none());
                // A SYN's segment kept for the general path: the link layer and segment
                // its parse finds.
                if syn.is_lean() {
                    let hinted = crate::pipeline::ipv4::hinted_syn(f, &rx, hints);
                    let plain = crate::pipeline::ipv4::segment_plain(f, &rx, false);
                    prop_assert!(plain.is_some(), "a SYN's segment kept that the plain parse refuses");
                    prop_assert_eq!(format!("{hinted:?}"), format!("{plain:?}"));
                }
            }
        }
        Ok((rx, EtherType::Ipv6)) => {
            let mut seg = LeanSegment::NONE;
            prop_assert_eq!(lean4, 0);
            let Some((key, _)) = crate::pipeline::ipv6::flow_key(f, &rx, &mut seg) else {
                prop_assert_eq!(lean6, 0);
                prop_assert!(hints.flow.is_none(), "{:?}", hints.flow);
                return Ok(());
            };
            let hash = st.conntrack6.hash_key(&key);
            if seg.is_lean() {
                prop_assert_eq!(lean6, 1);
                let l = &st.hints.lean6[0];
                prop_assert_eq!((l.key, l.hash, l.seg), (key, hash, seg));
            } else {
                prop_assert_eq!(lean6, 0);
                let Some(FlowHint::V6(k, h)) = hints.flow else {
                    return Err(TestCaseError::fail(format!("no IPv6 hint: {:?}", hints.flow)));
                };
                prop_assert_eq!((k, h), (key, hash));
            }
        }
        _ => {
            prop_assert_eq!((lean4, lean6), (0, 0));
            prop_assert!(hints.flow.is_none(), "{:?}", hints.flow);
        }
    }
    Ok(())
}

thread_local! {
    /// One worker for every case, and one whose ports carry a VLAN interface each as well
    /// (`vlan::vlan_state`): stage 1 changes nothing in them but hint slots.
    static STATES: std::cell::RefCell<[WorkerState; 2]> =
        std::cell::RefCell::new([state(0, 1), super::vlan::vlan_state()]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn stage_1_agrees_with_the_full_parse((f, meta) in arb_frame(), vlans in any::<bool>()) {
        STATES.with_borrow_mut(|st| stage_1_agrees(&mut st[usize::from(vlans)], &f, meta))?;
    }
}

/// The common frames themselves: an established TCP segment and a UDP datagram are lean, a
/// SYN is not; each with every byte stage 1 reads changed in turn (every bit pattern of the
/// template's bytes that matters: each of the 255 other values), the checksum set right
/// again or not.
#[test]
fn every_byte_stage_1_reads_changed_in_turn() {
    let (mut st, mut lean, mut syns) = (state(0, 1), 0, 0);
    for base in [
        frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::ACK, 1000, 2000, b"data", 64),
        frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::SYN, 1000, 0, b"", 64),
        frames::udp(to_gw(), CLIENT, (VIP, 80), b"datagram", 64),
    ] {
        let meta = Meta { iface: FRONT, len: base.len(), ..Meta::default() };
        stage_1_agrees(&mut st, &base, meta).unwrap();
        for at in READ {
            for value in 0..=255u8 {
                for fix in [false, true] {
                    let mut f = base.clone();
                    f[at] = value;
                    if fix {
                        fix_checksum(&mut f);
                    }
                    stage_1_agrees(&mut st, &f, meta)
                        .unwrap_or_else(|e| panic!("byte {at} = {value:#04x}, fixed {fix}: {e}"));
                }
            }
        }
        let mut leans = [LeanFrame::EMPTY; PREFETCH_WINDOW];
        lean += crate::pipeline::burst::stage_1(&mut [base], &[meta], &mut st, &mut leans, 0).0;
        syns += u32::from(matches!(st.hints.frames[0].flow, Some(FlowHint::V4(_, _, syn)) if syn.is_lean()));
    }
    assert_eq!(lean, 2, "the established segment and the datagram are lean");
    assert_eq!(syns, 1, "the SYN's segment is kept for the general path");
}
