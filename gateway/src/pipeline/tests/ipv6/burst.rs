//! [`process_burst`] against [`process`] with IPv6 in the mix (the burst hints IPv6 TCP and
//! UDP keys against the IPv6 conntrack): the same verdicts, frames, counters and flows of
//! both families, for bursts mixing IPv6 and IPv4 flows, replies, extension headers,
//! fragments and garbage.

use proptest::prelude::*;

use super::super::burst::{agree_on, run_burst};
use super::*;

/// `frame` with an 8-byte Destination Options header (Pad only) before its upper layer.
fn with_dst_options(frame: &[u8]) -> Vec<u8> {
    let mut f = frame[..54].to_vec();
    f.extend_from_slice(&[frame[14 + 6], 0, 1, 4, 0, 0, 0, 0]);
    f.extend_from_slice(&frame[54..]);
    f[14 + 6] = 60;
    f[14 + 4..14 + 6].copy_from_slice(&((frame.len() - 54 + 8) as u16).to_be_bytes());
    f
}

fn frame(kind: u8, port: u16, bits: u8) -> (Vec<u8>, u8) {
    let client = (CLIENT6.0, 40_000 + port % 8);
    let flags = TcpFlags(
        [TcpFlags::SYN.0, TcpFlags::ACK.0, TcpFlags::FIN.0 | TcpFlags::ACK.0, TcpFlags::RST.0][usize::from(bits % 4)],
    );
    let snat = (SNAT6, 1024 + port % 8);
    match kind % 8 {
        0 => (frames::tcp6(to_gw(), client, (VIP6, 80), flags, 1, 1, b"", 64), FRONT),
        1 => (frames::tcp6(to_back(0x11), (backend6(0x11), 8080), snat, flags, 1, 1, b"", 64), BACK),
        2 => (frames::udp6(to_gw(), client, (VIP6, 80), b"q", 64), FRONT),
        3 => (frames::udp6(to_back(0x12), (backend6(0x12), 8080), snat, b"r", 64), BACK),
        4 => (with_dst_options(&frames::udp6(to_gw(), client, (VIP6, 80), b"opt", 64)), FRONT),
        5 => (frames::udp(to_gw(), (CLIENT.0, client.1), (VIP, 8080), b"v4", 64), FRONT),
        6 => {
            let q = frames::udp6(to_gw(), client, (VIP6, 80), &[9; 40], 64);
            (frames::ipv6_fragments(&q, u32::from(port % 4), 24).swap_remove(usize::from(bits) % 2), FRONT)
        }
        _ => {
            let mut f = frames::udp6(to_gw(), client, (VIP6, 80), b"bad", 64);
            let at = 14 + usize::from(bits) % (f.len() - 14);
            f[at] ^= 0x5a;
            (f, FRONT)
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn process_burst_agrees_with_process_for_ipv6(
        bursts in prop::collection::vec(
            prop::collection::vec(
                (any::<u8>(), any::<u16>(), any::<u8>()).prop_map(|(k, p, b)| frame(k, p, b)),
                0..(2 * PREFETCH_WINDOW + 3),
            ),
            1..6,
        ),
    ) {
        agree_on(&table6(&[0x11, 0x12], None), state6, &bursts)?;
    }
}

#[test]
fn an_ipv6_flow_created_early_in_a_burst_is_found_later_in_it() {
    // SYN, SYN+ACK and ACK of one IPv6 connection in one burst: the later frames' lookups
    // were hinted and prefetched before the flow existed, and still find it.
    let syn = frames::tcp6(to_gw(), CLIENT6, (VIP6, 80), TcpFlags::SYN, 1, 0, &[], 64);
    let syn_ack = TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0);
    let syn_ack = frames::tcp6(to_back(0x11), (backend6(0x11), 8080), (SNAT6, 1024), syn_ack, 7, 2, &[], 64);
    let ack = frames::tcp6(to_gw(), CLIENT6, (VIP6, 80), TcpFlags::ACK, 2, 8, &[], 64);
    let (t, mut st) = (table6(&[0x11], None), state6());
    let verdicts = run_burst(0, &[(&syn, FRONT), (&syn_ack, BACK), (&ack, FRONT)], &t, &mut st);
    assert!(verdicts.iter().all(|v| matches!(v, Verdict::Transmit { .. })), "{verdicts:?}");
    assert_eq!(st.conntrack6.len(), 1);
    let (_, flow) = st.conntrack6.iter().next().unwrap();
    assert_eq!(flow.state.tcp_state(), crate::conntrack::TcpState::Established);
}
