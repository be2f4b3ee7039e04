//! The SYN proxy (`super::synproxy`): SYNs over the rate answered with cookies and no
//! state; a cookie's ACK opening the connection to the endpoint; the endpoint's SYN-ACK
//! answered by the gateway; sequence numbers translated both ways for the rest of the
//! connection; ACKs that are not cookies' picked up as before.

use super::*;
use crate::conntrack::synproxy::SynProxy;
use crate::conntrack::TcpState;

const SYN: TcpFlags = TcpFlags::SYN;
const SYN_ACK: TcpFlags = TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0);
const ACK: TcpFlags = TcpFlags::ACK;
const PSH_ACK: TcpFlags = TcpFlags(TcpFlags::PSH.0 | TcpFlags::ACK.0);
const RST: TcpFlags = TcpFlags::RST;
const RST_ACK: TcpFlags = TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0);
const BACKEND: (Ipv4Addr, u16) = (Ipv4Addr::new(10, 70, 0, 11), 8080);
const CLIENT_ISN: u32 = 1000;
const ENDPOINT_ISN: u32 = 7_000_000;

/// A worker that answers SYNs over `per_s` a second with cookies (0: every SYN).
fn proxied(per_s: u32) -> (Table, WorkerState) {
    let mut st = state(0, 1);
    st.synproxy = SynProxy::new(true, per_s, 64, 11);
    (table(&["10.70.0.11"]), st)
}

/// The TCP header of frame `f` (Ethernet, IPv4 without options), its checksum checked.
fn tcp_of(f: &[u8]) -> TcpPacket<&[u8]> {
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    assert!(ip.verify_checksum(), "IPv4 header checksum");
    let t = TcpPacket::new_checked(&f[34..14 + usize::from(ip.total_len())]).unwrap();
    assert!(t.verify_checksum(ip.src_addr(), ip.dst_addr()), "TCP checksum");
    t
}

fn client_frame(flags: TcpFlags, seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    frames::tcp(to_gw(), CLIENT, (VIP, 80), flags, seq, ack, payload, 64)
}

fn endpoint_frame(snat_port: u16, flags: TcpFlags, seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    let l2 = L2 { src: backend_mac(11), dst: GW_BACK_MAC };
    frames::tcp(l2, BACKEND, (SNAT, snat_port), flags, seq, ack, payload, 64)
}

/// Runs `input` through [`process_burst`] alone (where the lean established path may take
/// it), returning the verdict and the output frame.
fn burst(now: u64, input: &[u8], iface: u8, t: &Table, st: &mut WorkerState) -> (Verdict, Vec<u8>) {
    let mut bufs = vec![[0u8; 2048]];
    bufs[0][..input.len()].copy_from_slice(input);
    let metas = [Meta { iface, len: input.len(), ..Meta::default() }];
    let mut verdicts = [Verdict::Consumed];
    process_burst(now, &mut bufs, &metas, t, st, &mut verdicts);
    let out = match verdicts[0] {
        Verdict::Transmit { len, .. } => bufs[0][..len].to_vec(),
        _ => Vec::new(),
    };
    (verdicts[0], out)
}

/// Runs the cookie handshake: the client's SYN answered with a cookie, its ACK turned into
/// the SYN to the endpoint. Returns the cookie and the flow's SNAT port.
fn handshake(t: &Table, st: &mut WorkerState) -> (u32, u16) {
    let (v, out) = run(SEC, &client_frame(SYN, CLIENT_ISN, 0, b""), FRONT, t, st);
    assert_eq!(v, tx(FRONT, &out));
    let answer = tcp_of(&out);
    assert_eq!(
        (answer.flags(), answer.ack_number(), answer.src_port(), answer.dst_port()),
        (SYN_ACK, CLIENT_ISN + 1, 80, CLIENT.1)
    );
    assert_eq!(answer.options(), &[2, 4, 0x05, 0xb4], "MSS 1460 and nothing else");
    assert_eq!(Ipv4Packet::new_checked(&out[14..]).unwrap().src_addr(), VIP);
    assert_eq!(EthernetFrame::new_checked(&out[..]).unwrap().dst_addr(), CLIENT_MAC);
    let cookie = answer.seq_number();
    assert_eq!((st.conntrack.len(), st.counters.syn_cookies_sent), (0, 1), "a cookie creates nothing");

    let (v, out) = run(SEC + 1, &client_frame(ACK, CLIENT_ISN + 1, cookie.wrapping_add(1), b"early"), FRONT, t, st);
    assert_eq!(v, tx(BACK, &out));
    let syn = tcp_of(&out);
    assert_eq!(
        (syn.flags(), syn.seq_number(), syn.ack_number(), syn.payload()),
        (SYN, CLIENT_ISN, 0, &b""[..]),
        "the SYN to the endpoint"
    );
    assert_eq!(syn.options(), &[2, 4, 0x02, 0x18], "the cookie's MSS (536: the client offered none)");
    assert_eq!((syn.src_port() != 0, syn.dst_port()), (true, 8080));
    let ip = Ipv4Packet::new_checked(&out[14..]).unwrap();
    assert_eq!((ip.src_addr(), ip.dst_addr(), ip.hop_limit()), (SNAT, BACKEND.0, 63));
    assert_eq!((st.conntrack.len(), st.counters.syn_cookies_valid), (1, 1));
    (cookie, syn.src_port())
}

#[test]
fn a_cookie_handshake_opens_the_connection_and_translates_it_both_ways() {
    let (t, mut st) = proxied(0);
    let (cookie, snat_port) = handshake(&t, &mut st);

    // The client's data before the endpoint answered: dropped, it comes again.
    let early = client_frame(PSH_ACK, CLIENT_ISN + 1, cookie.wrapping_add(1), b"hello");
    assert_eq!(run(SEC + 2, &early, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::SynProxyPending));

    // The endpoint's SYN-ACK is answered by the gateway with the ACK of its handshake.
    let (v, out) =
        run(SEC + 3, &endpoint_frame(snat_port, SYN_ACK, ENDPOINT_ISN, CLIENT_ISN + 1, b""), BACK, &t, &mut st);
    assert_eq!(v, tx(BACK, &out));
    let want = frames::tcp(
        L2 { src: GW_BACK_MAC, dst: backend_mac(11) },
        (SNAT, snat_port),
        BACKEND,
        ACK,
        CLIENT_ISN + 1,
        ENDPOINT_ISN + 1,
        b"",
        64,
    );
    let mut want = want;
    {
        // The ACK announces the client's window.
        let mut t = TcpPacket::new_unchecked(&mut want[34..]);
        t.set_window_len(TcpPacket::new_checked(&client_frame(ACK, 0, 0, b"")[34..]).unwrap().window_len());
        t.fill_checksum(SNAT, BACKEND.0);
    }
    assert_eq!(out, want, "the gateway's ACK to the endpoint");
    assert_eq!(st.counters.syn_proxy_handshakes, 1);
    let id = st
        .conntrack
        .lookup(&crate::conntrack::FlowKey {
            protocol: 6,
            src_addr: CLIENT.0,
            src_port: CLIENT.1,
            dst_addr: VIP,
            dst_port: 80,
        })
        .unwrap()
        .0;
    assert_eq!(st.conntrack.state(id).tcp_state(), TcpState::Established);

    // Client data: its ACK (of the cookie's numbering) into the endpoint's — in a burst,
    // where the lean path must leave a proxied flow to the general path.
    let (v, out) =
        burst(SEC + 4, &client_frame(PSH_ACK, CLIENT_ISN + 1, cookie.wrapping_add(1), b"hello"), FRONT, &t, &mut st);
    let want = frames::tcp(
        L2 { src: GW_BACK_MAC, dst: backend_mac(11) },
        (SNAT, snat_port),
        BACKEND,
        PSH_ACK,
        CLIENT_ISN + 1,
        ENDPOINT_ISN + 1,
        b"hello",
        63,
    );
    assert_eq!((v, out), (tx(BACK, &want), want));

    // Endpoint data: its SEQ into the cookie's numbering.
    let (v, out) = burst(
        SEC + 5,
        &endpoint_frame(snat_port, PSH_ACK, ENDPOINT_ISN + 1, CLIENT_ISN + 6, b"world"),
        BACK,
        &t,
        &mut st,
    );
    let want = frames::tcp(
        L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC },
        (VIP, 80),
        CLIENT,
        PSH_ACK,
        cookie.wrapping_add(1),
        CLIENT_ISN + 6,
        b"world",
        63,
    );
    assert_eq!((v, out), (tx(FRONT, &want), want));

    // A retransmitted SYN-ACK (the gateway's ACK was lost) is answered again.
    let (v, out) =
        run(SEC + 6, &endpoint_frame(snat_port, SYN_ACK, ENDPOINT_ISN, CLIENT_ISN + 1, b""), BACK, &t, &mut st);
    assert_eq!(v, tx(BACK, &out));
    assert_eq!((tcp_of(&out).flags(), tcp_of(&out).ack_number()), (ACK, ENDPOINT_ISN + 1));

    // The endpoint's RST, in window in its numbering, reaches the client in window in its.
    let (v, out) = run(SEC + 7, &endpoint_frame(snat_port, RST, ENDPOINT_ISN + 6, 0, b""), BACK, &t, &mut st);
    let want = frames::tcp(
        L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC },
        (VIP, 80),
        CLIENT,
        RST,
        cookie.wrapping_add(6),
        0,
        b"",
        63,
    );
    assert_eq!((v, out), (tx(FRONT, &want), want));
}

#[test]
fn an_endpoint_refusing_the_proxied_connection_resets_the_client_in_window() {
    let (t, mut st) = proxied(0);
    let (cookie, snat_port) = handshake(&t, &mut st);
    let (v, out) = run(SEC + 2, &endpoint_frame(snat_port, RST_ACK, 0, CLIENT_ISN + 1, b""), BACK, &t, &mut st);
    let want = frames::tcp(
        L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC },
        (VIP, 80),
        CLIENT,
        RST_ACK,
        cookie.wrapping_add(1),
        CLIENT_ISN + 1,
        b"",
        63,
    );
    assert_eq!((v, out), (tx(FRONT, &want), want));
}

#[test]
fn syns_under_the_rate_create_flows_and_the_rest_get_cookies() {
    let (t, mut st) = proxied(10);
    let mut cookies = 0;
    for port in 0..20u16 {
        let f = frames::tcp(to_gw(), (CLIENT.0, 30000 + port), (VIP, 80), SYN, 1, 0, b"", 64);
        let (v, out) = run(SEC, &f, FRONT, &t, &mut st);
        let back = matches!(v, Verdict::Transmit { iface: BACK, .. });
        cookies += usize::from(!back && tcp_of(&out).flags() == SYN_ACK);
    }
    assert_eq!(
        (st.conntrack.len(), cookies, st.counters.syn_cookies_sent),
        (10, 10, 10),
        "a burst of one second's worth"
    );
    // A second later the rate admits ten more.
    for port in 0..20u16 {
        let f = frames::tcp(to_gw(), (CLIENT.0, 31000 + port), (VIP, 80), SYN, 1, 0, b"", 64);
        run(2 * SEC, &f, FRONT, &t, &mut st);
    }
    assert_eq!(st.conntrack.len(), 20);
}

#[test]
fn an_ack_that_is_no_cookie_is_picked_up_as_before() {
    let (t, mut st) = proxied(0);
    let (_cookie, _) = handshake(&t, &mut st);
    let other = frames::tcp(to_gw(), (CLIENT.0, 40001), (VIP, 80), ACK, 5, 12345, b"", 64);
    let (v, out) = run(SEC + 2, &other, FRONT, &t, &mut st);
    assert_eq!(v, tx(BACK, &out));
    let fwd = tcp_of(&out);
    assert_eq!((fwd.flags(), fwd.seq_number(), fwd.ack_number()), (ACK, 5, 12345), "forwarded as it came, picked up");
    assert_eq!((st.conntrack.len(), st.counters.syn_cookies_valid), (2, 1));
}

#[test]
fn cookies_off_never_answer_a_syn() {
    let (t, mut st) = proxied(0);
    st.synproxy = SynProxy::new(false, 0, 64, 11);
    let (v, _) = run(SEC, &client_frame(SYN, CLIENT_ISN, 0, b""), FRONT, &t, &mut st);
    assert!(matches!(v, Verdict::Transmit { iface: BACK, .. }));
    assert_eq!(st.counters.syn_cookies_sent, 0);
}
