//! The general path's fixed-offset parse of a plain IPv4 TCP or UDP packet
//! (`ipv4::segment_plain`) against its checked parse (`ipv4::segment`): on any frame — SYNs
//! with options (a Window Scale among them), data segments, datagrams, with bytes of their
//! headers changed and their length cut — the plain parse finds the very `Segment` the
//! checked one does, or leaves the frame to it.

use proptest::prelude::*;

use super::*;

/// A TCP segment (SYN or not, with `doff` words of header over options that carry a Window
/// Scale) or a UDP datagram, with some of its first 74 bytes changed and its length cut. The
/// last field: nothing was changed or cut.
fn arb_frame() -> impl Strategy<Value = (Vec<u8>, usize, bool, bool, bool)> {
    (
        (any::<bool>(), any::<bool>(), 5u8..=15, any::<u8>()),
        0usize..80,
        prop::collection::vec((14usize..74, any::<u8>()), 0..4),
        0usize..40,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|((tcp, syn, doff, shift), payload, changes, cut, partial, good)| {
            // NOP, Window Scale (kind 3, length 3), then zeros (End of Option List).
            let mut payload = vec![0u8; payload.max(4)];
            payload[..4].copy_from_slice(&[1, 3, 3, shift]);
            let f = if tcp {
                let flags = if syn { TcpFlags::SYN } else { TcpFlags::ACK };
                let mut f = frames::tcp(to_gw(), CLIENT, (VIP, 80), flags, 1000, 2000, &payload, 64);
                // Data Offset: options out of the payload (or past the segment's end).
                f[14 + 20 + 12] = doff << 4;
                f
            } else {
                frames::udp(to_gw(), CLIENT, (VIP, 80), &payload, 64)
            };
            let (f, len, untouched) = mutated(f, changes, cut);
            (f, len, partial, good, untouched && (!tcp || usize::from(doff) * 4 <= 20 + payload.len()))
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn the_plain_parse_finds_the_checked_parses_segment((f, len, partial, good, untouched) in arb_frame()) {
        let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
        let meta = Meta { iface: FRONT, len, l4_csum_partial: partial, l3_csum_good: good, ..Meta::default() };
        let Ok((rx, _)) = crate::pipeline::link::receive(&f, &meta, &st.host) else { return Ok(()) };
        let plain = crate::pipeline::ipv4::segment_plain(&f, &rx, false);
        let mut buf = f.clone();
        let checked = crate::pipeline::ipv4::segment(0, &mut buf, &rx, &t, &mut st);
        prop_assert!(plain.is_some() || !untouched, "a plain packet left to the checked parse");
        if let Some(plain) = plain {
            let Ok(checked) = checked else {
                return Err(TestCaseError::fail(format!("the checked parse refused {plain:?}: {checked:?}")));
            };
            prop_assert_eq!(format!("{plain:?}"), format!("{checked:?}"));
        }
    }
}
