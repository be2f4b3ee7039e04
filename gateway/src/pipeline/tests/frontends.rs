//! Per-front-door counters: packets and IPv4 bytes per direction and new flows land on
//! the front door the flow entered by, across a table switch, and nothing else counts.

use super::*;

#[test]
fn forwarded_packets_and_new_flows_count_on_their_front_door() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    st.adopt_table(&t, &t, 0);
    let web = t.frontend(IpAddr::V4(VIP), 6, 80).unwrap().index as usize;
    let counts = |st: &WorkerState| st.frontends.as_slice()[web];

    let syn = frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::SYN, 1000, 0, &[], 64);
    assert!(matches!(run(0, &syn, FRONT, &t, &mut st).0, Verdict::Transmit { .. }));
    let syn_ack = frames::tcp(
        L2 { src: backend_mac(11), dst: GW_BACK_MAC },
        (ip("10.70.0.11"), 8080),
        (SNAT, 1024),
        TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0),
        5000,
        1001,
        &[],
        64,
    );
    assert!(matches!(run(SEC, &syn_ack, BACK, &t, &mut st).0, Verdict::Transmit { .. }));
    let data = frames::tcp(to_gw(), CLIENT, (VIP, 80), TcpFlags::ACK, 1001, 5001, b"GET / HTTP/1.1\r\n\r\n", 64);
    assert!(matches!(run(2 * SEC, &data, FRONT, &t, &mut st).0, Verdict::Transmit { .. }));
    assert_eq!(
        counts(&st),
        FrontendCount { packets_original: 2, bytes_original: 40 + 58, packets_reply: 1, bytes_reply: 40, new_flows: 1 }
    );

    // Under a new table, a reply that comes before the flow's next original packet is
    // still counted on its front door (looked up anew), and so are later packets.
    let t2 = table(&["10.70.0.11", "10.70.0.12"]);
    st.adopt_table(&t, &t2, 3 * SEC);
    let ack = frames::tcp(
        L2 { src: backend_mac(11), dst: GW_BACK_MAC },
        (ip("10.70.0.11"), 8080),
        (SNAT, 1024),
        TcpFlags::ACK,
        5001,
        1019,
        &[],
        64,
    );
    assert!(matches!(run(3 * SEC, &ack, BACK, &t2, &mut st).0, Verdict::Transmit { .. }));
    assert!(matches!(run(3 * SEC, &data, FRONT, &t2, &mut st).0, Verdict::Transmit { .. }));
    let web2 = t2.frontend(IpAddr::V4(VIP), 6, 80).unwrap().index as usize;
    let c = st.frontends.as_slice()[web2];
    assert_eq!((c.packets_original, c.packets_reply, c.new_flows), (3, 2, 1));

    // Drops and answers count nowhere: a front door without endpoints, an unknown one.
    let before: Vec<FrontendCount> = st.frontends.as_slice().to_vec();
    let rejected = frames::tcp(to_gw(), CLIENT, (EMPTY_VIP, 80), TcpFlags::SYN, 1, 0, &[], 64);
    assert!(matches!(run(4 * SEC, &rejected, FRONT, &t2, &mut st).0, Verdict::Transmit { .. }));
    let stray = frames::udp(to_gw(), CLIENT, (VIP, 9999), b"?", 64);
    assert_eq!(run(4 * SEC, &stray, FRONT, &t2, &mut st).0, Verdict::Drop(DropReason::NoFrontend));
    assert_eq!(st.frontends.as_slice(), &before[..]);
}
