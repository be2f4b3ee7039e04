//! [`process_burst`] against [`process`]: the same verdicts, output frames, counters and
//! flows, frame by frame, for bursts of every size (across the prefetch window) mixing new
//! flows, replies, frames of flows created earlier in the same burst, closes, ARP, ICMP
//! and garbage.

use proptest::prelude::*;

use super::*;

/// One frame of the mix, from a few parameters: small spaces so that flows recur within and
/// across bursts.
fn frame(kind: u8, port: u16, bits: u8) -> Vec<u8> {
    let client = (CLIENT.0, 40_000 + port % 8);
    let flags = TcpFlags(
        [TcpFlags::SYN.0, TcpFlags::ACK.0, TcpFlags::FIN.0 | TcpFlags::ACK.0, TcpFlags::RST.0][usize::from(bits % 4)],
    );
    let from_backend = L2 { src: backend_mac(11), dst: GW_BACK_MAC };
    match kind % 7 {
        0 => frames::tcp(to_gw(), client, (VIP, 80), flags, 1, 1, b"", 64),
        1 => frames::tcp(from_backend, (ip("10.70.0.11"), 8080), (SNAT, 1024 + port % 8), flags, 1, 1, b"", 64),
        2 => frames::udp(to_gw(), client, (VIP, 80), b"q", 64),
        3 => frames::udp(from_backend, (ip("10.70.0.11"), 8080), (SNAT, 1024 + port % 8), b"r", 64),
        4 => frames::icmp_echo(to_gw(), CLIENT.0, VIP, port, 1, b"ping", false),
        5 => frames::tcp(to_gw(), client, (EMPTY_VIP, 80), flags, 1, 1, b"", 64),
        _ => {
            let mut f = frames::udp(to_gw(), client, (VIP, 80), b"bad", 64);
            let at = 14 + usize::from(bits) % (f.len() - 14);
            f[at] ^= 0x5a;
            f
        }
    }
}

fn arb_frame() -> impl Strategy<Value = (Vec<u8>, u8)> {
    (any::<u8>(), any::<u16>(), any::<u8>(), prop::sample::select(vec![FRONT, FRONT, BACK])).prop_map(
        |(kind, port, flags, iface)| {
            (frame(kind, port, flags), if kind % 7 == 1 || kind % 7 == 3 { BACK } else { iface })
        },
    )
}

/// Runs `bursts` through `process_burst` on one worker and through `process` frame by frame
/// on another, and checks that they agree at every step.
fn agree(bursts: &[Vec<(Vec<u8>, u8)>]) -> Result<(), TestCaseError> {
    agree_on(&table(&["10.70.0.11", "10.70.0.12"]), || state_with_capacity(0, 1, 16), bursts)
}

/// [`agree`] under table `t`, with workers made by `new_state`; frames up to 256 bytes.
pub(super) fn agree_on(
    t: &Table,
    new_state: impl Fn() -> WorkerState,
    bursts: &[Vec<(Vec<u8>, u8)>],
) -> Result<(), TestCaseError> {
    let (mut a, mut b) = (new_state(), new_state());
    for (n, burst) in bursts.iter().enumerate() {
        let now = n as u64 * 7 * SEC;
        let (mut bufs, metas) = burst_of(burst);
        let mut verdicts = vec![Verdict::Consumed; burst.len()];
        process_burst(now, &mut bufs, &metas, t, &mut a, &mut verdicts);
        for (k, (f, iface)) in burst.iter().enumerate() {
            let (v, out) = run(now, f, *iface, t, &mut b);
            prop_assert_eq!(verdicts[k], v, "burst {} frame {}", n, k);
            if let Verdict::Transmit { len, .. } = v {
                prop_assert_eq!(&bufs[k][..len], &out[..], "burst {} frame {}", n, k);
            }
        }
        prop_assert_eq!(&a.counters, &b.counters);
        prop_assert_eq!(a.conntrack.iter().collect::<Vec<_>>(), b.conntrack.iter().collect::<Vec<_>>());
        prop_assert_eq!(a.conntrack6.iter().collect::<Vec<_>>(), b.conntrack6.iter().collect::<Vec<_>>());
        prop_assert_eq!(poll_expire(now, 8, &mut a), poll_expire(now, 8, &mut b));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn process_burst_agrees_with_process_frame_by_frame(
        bursts in prop::collection::vec(prop::collection::vec(arb_frame(), 0..(2 * PREFETCH_WINDOW + 3)), 1..6),
    ) {
        agree(&bursts)?;
    }
}

#[test]
fn a_flow_created_early_in_a_burst_is_found_later_in_it() {
    // SYN, SYN+ACK and ACK of one connection in one burst: the later frames' lookups were
    // prefetched before the flow existed, and still find it.
    let syn = frame(0, 0, 0);
    let syn_ack = frames::tcp(
        L2 { src: backend_mac(11), dst: GW_BACK_MAC },
        (ip("10.70.0.11"), 8080),
        (SNAT, 1024),
        TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0),
        1,
        2,
        &[],
        64,
    );
    let ack = frame(0, 0, 1);
    let t = table(&["10.70.0.11"]);
    let mut st = state(0, 1);
    let verdicts = run_burst(0, &[(&syn, FRONT), (&syn_ack, BACK), (&ack, FRONT)], &t, &mut st);
    assert!(verdicts.iter().all(|v| matches!(v, Verdict::Transmit { .. })), "{verdicts:?}");
    let (id, flow) = st.conntrack.iter().next().unwrap();
    assert_eq!(flow.state.tcp_state(), crate::conntrack::TcpState::Established);
    assert_eq!(st.conntrack.len(), 1, "{id}");
}

/// Runs the frames of `input` (frame, arrival port) as one burst through `process_burst` (on
/// copies, with 4 bytes of room each) and returns the verdicts.
pub(super) fn run_burst(now: u64, input: &[(&[u8], u8)], t: &Table, st: &mut WorkerState) -> Vec<Verdict> {
    let mut bufs: Vec<Vec<u8>> = input.iter().map(|(f, _)| [f, &[0u8; 4][..]].concat()).collect();
    let metas: Vec<Meta> = input
        .iter()
        .map(|(f, iface)| Meta { iface: *iface, len: f.len(), l4_csum_partial: false, ..Meta::default() })
        .collect();
    let mut verdicts = vec![Verdict::Consumed; input.len()];
    process_burst(now, &mut bufs, &metas, t, st, &mut verdicts);
    verdicts
}
