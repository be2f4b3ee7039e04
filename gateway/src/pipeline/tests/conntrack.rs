//! Golden packet tests of connection tracking: a TCP connection through every Linux state
//! (SYN → SYN+ACK → ACK, data, FIN both ways, RST) with each state's timeout, expiry at
//! each timeout, reopening from TIME_WAIT, segments that do not fit, mid-stream pickup,
//! UDP's two timeouts, a full table (early drop, then refusal), and an endpoint whose SNAT
//! ports are all taken (half-open flows to it give way).

use super::*;
use crate::conntrack::{Deadline, FlowId, TcpState, Timeouts};

const SYN: TcpFlags = TcpFlags::SYN;
const SYN_ACK: TcpFlags = TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0);
const ACK: TcpFlags = TcpFlags::ACK;
const FIN_ACK: TcpFlags = TcpFlags(TcpFlags::FIN.0 | TcpFlags::ACK.0);
const RST: TcpFlags = TcpFlags::RST;
const RST_ACK: TcpFlags = TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0);
const T: Timeouts = Timeouts::DEFAULT;
const BACKEND: &str = "10.70.0.11";

/// SEG.SEQ and SEG.ACK of a segment with `flags`, either side: both ends' initial sequence
/// number is 1, so a SYN carries 1 and everything after it 2, acknowledging the other end's
/// SYN (2). Later data and FINs are never acknowledged, which the windows allow: the
/// segments stay in sequence and every RST is at the sequence number its receiver expects.
fn seq_ack(flags: TcpFlags) -> (u32, u32) {
    (if flags.contains(TcpFlags::SYN) { 1 } else { 2 }, 2)
}

/// One client connection to `VIP:80`, served by [`BACKEND`] through a worker.
struct Conn {
    t: Table,
    st: WorkerState,
    client: (Ipv4Addr, u16),
    /// The flow's SNAT port, once the first SYN went through.
    snat_port: u16,
}

impl Conn {
    fn new(capacity: usize) -> Self {
        Conn { t: table(&[BACKEND]), st: state_with_capacity(0, 1, capacity), client: CLIENT, snat_port: 0 }
    }

    fn backend() -> (Ipv4Addr, u16) {
        (ip(BACKEND), 8080)
    }

    /// The client's segment and the frame the gateway must send to the endpoint for it.
    fn client_segment(&self, flags: TcpFlags, payload: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let (seq, ack) = seq_ack(flags);
        let input = frames::tcp(to_gw(), self.client, (VIP, 80), flags, seq, ack, payload, 64);
        let l2 = L2 { src: GW_BACK_MAC, dst: backend_mac(11) };
        let want = frames::tcp(l2, (SNAT, self.snat_port), Self::backend(), flags, seq, ack, payload, 63);
        (input, want)
    }

    /// The endpoint's segment and the frame the gateway must send to the client for it.
    fn endpoint_segment(&self, flags: TcpFlags) -> (Vec<u8>, Vec<u8>) {
        let (seq, ack) = seq_ack(flags);
        let l2 = L2 { src: backend_mac(11), dst: GW_BACK_MAC };
        let input = frames::tcp(l2, Self::backend(), (SNAT, self.snat_port), flags, seq, ack, &[], 64);
        let want =
            frames::tcp(L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC }, (VIP, 80), self.client, flags, seq, ack, &[], 63);
        (input, want)
    }

    /// Sends a client segment at `now` and checks that it is forwarded, translated.
    fn client(&mut self, now: u64, flags: TcpFlags) {
        let (input, _) = self.client_segment(flags, b"");
        let (v, out) = run(now, &input, FRONT, &self.t, &mut self.st);
        if self.snat_port == 0 {
            self.snat_port = TcpPacket::new_checked(&out[34..]).map_or(0, |t| t.src_port());
        }
        let (_, want) = self.client_segment(flags, b"");
        assert_eq!((v, &out), (tx(BACK, &want), &want), "client {flags:?} at {now}");
    }

    /// Sends an endpoint segment at `now` and checks that it is forwarded, translated.
    fn endpoint(&mut self, now: u64, flags: TcpFlags) {
        let (input, want) = self.endpoint_segment(flags);
        assert_eq!(run(now, &input, BACK, &self.t, &mut self.st), (tx(FRONT, &want), want), "endpoint {flags:?}");
    }

    /// The only tracked flow.
    fn flow_id(&self) -> FlowId {
        let ids: Vec<_> = self.st.conntrack.iter().map(|(id, _)| id).collect();
        assert_eq!(ids.len(), 1, "one tracked flow");
        ids[0]
    }

    /// Checks the flow's TCP state and that its deadline is `timeout_ns` after `now`.
    fn expect(&self, state: TcpState, now: u64, timeout_ns: u64) {
        let s = self.st.conntrack.state(self.flow_id());
        assert_eq!(s.tcp_state(), state);
        assert_eq!(s.deadline, Deadline::after(now, timeout_ns), "{} deadline", state.name());
    }

    /// Opens the connection at time 0..2 s: SYN, SYN+ACK, ACK.
    fn establish(&mut self) {
        self.client(0, SYN);
        self.endpoint(SEC, SYN_ACK);
        self.client(2 * SEC, ACK);
    }
}

#[test]
fn a_connection_walks_linux_states_with_their_timeouts() {
    let mut c = Conn::new(1024);
    c.client(0, SYN);
    c.expect(TcpState::SynSent, 0, T.tcp_syn_sent_ns);
    // A retransmitted SYN before any answer does not extend SYN_SENT.
    c.client(SEC, SYN);
    c.expect(TcpState::SynSent, 0, T.tcp_syn_sent_ns);
    c.endpoint(2 * SEC, SYN_ACK);
    c.expect(TcpState::SynRecv, 2 * SEC, T.tcp_syn_recv_ns);
    assert!(!c.st.conntrack.state(c.flow_id()).assured());
    c.client(3 * SEC, ACK);
    c.expect(TcpState::Established, 3 * SEC, T.tcp_established_ns);
    assert_eq!(T.tcp_established_ns, 86_400 * SEC, "kube-proxy's --conntrack-tcp-timeout-established");
    assert!(c.st.conntrack.state(c.flow_id()).assured());
    // Data both ways.
    let (input, want) = c.client_segment(ACK, b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(run(4 * SEC, &input, FRONT, &c.t, &mut c.st), (tx(BACK, &want), want));
    c.endpoint(5 * SEC, ACK);
    c.expect(TcpState::Established, 5 * SEC, T.tcp_established_ns);
    // The client closes; the endpoint acknowledges, then closes; the client's last ACK.
    c.client(6 * SEC, FIN_ACK);
    c.expect(TcpState::FinWait, 6 * SEC, T.tcp_fin_wait_ns);
    c.endpoint(7 * SEC, ACK);
    c.expect(TcpState::CloseWait, 7 * SEC, T.tcp_close_wait_ns);
    assert_eq!(T.tcp_close_wait_ns, 3_600 * SEC, "kube-proxy's --conntrack-tcp-timeout-close-wait");
    c.endpoint(8 * SEC, FIN_ACK);
    c.expect(TcpState::LastAck, 8 * SEC, T.tcp_last_ack_ns);
    c.client(9 * SEC, ACK);
    c.expect(TcpState::TimeWait, 9 * SEC, T.tcp_time_wait_ns);
    assert_eq!((c.st.counters.new_flows, c.st.counters.forwarded_original, c.st.counters.forwarded_reply), (1, 6, 4));
}

#[test]
fn fins_crossing_reach_time_wait_too() {
    let mut c = Conn::new(1024);
    c.establish();
    c.endpoint(3 * SEC, FIN_ACK);
    c.expect(TcpState::FinWait, 3 * SEC, T.tcp_fin_wait_ns);
    c.client(4 * SEC, FIN_ACK);
    c.expect(TcpState::LastAck, 4 * SEC, T.tcp_last_ack_ns);
    c.endpoint(5 * SEC, ACK);
    c.expect(TcpState::TimeWait, 5 * SEC, T.tcp_time_wait_ns);
}

/// Each state expires exactly at its timeout, measured from the packet that entered it,
/// and expiry frees the SNAT port.
#[test]
fn every_state_expires_at_its_timeout() {
    type Step = fn(&mut Conn, u64);
    let syn: Step = |c, now| c.client(now, SYN);
    let syn_ack: Step = |c, now| c.endpoint(now, SYN_ACK);
    let ack: Step = |c, now| c.client(now, ACK);
    let fin: Step = |c, now| c.client(now, FIN_ACK);
    let endpoint_ack: Step = |c, now| c.endpoint(now, ACK);
    let endpoint_fin: Step = |c, now| c.endpoint(now, FIN_ACK);
    let endpoint_rst: Step = |c, now| c.endpoint(now, RST);
    let cases: [(TcpState, &[Step], u64); 8] = [
        (TcpState::SynSent, &[syn], T.tcp_syn_sent_ns),
        (TcpState::SynRecv, &[syn, syn_ack], T.tcp_syn_recv_ns),
        (TcpState::Established, &[syn, syn_ack, ack], T.tcp_established_ns),
        (TcpState::FinWait, &[syn, syn_ack, ack, fin], T.tcp_fin_wait_ns),
        (TcpState::CloseWait, &[syn, syn_ack, ack, fin, endpoint_ack], T.tcp_close_wait_ns),
        (TcpState::LastAck, &[syn, syn_ack, ack, fin, endpoint_ack, endpoint_fin], T.tcp_last_ack_ns),
        (TcpState::TimeWait, &[syn, syn_ack, ack, fin, endpoint_ack, endpoint_fin, ack], T.tcp_time_wait_ns),
        (TcpState::Close, &[syn, syn_ack, ack, endpoint_rst], T.tcp_close_ns),
    ];
    for (state, steps, timeout) in cases {
        let mut c = Conn::new(1024);
        for (i, step) in steps.iter().enumerate() {
            step(&mut c, i as u64 * SEC);
        }
        let entered = (steps.len() as u64 - 1) * SEC;
        c.expect(state, entered, timeout);
        let deadline = entered + timeout;
        assert_eq!(poll_expire(deadline - 1_000_000, 1024, &mut c.st), 0, "{} before its timeout", state.name());
        assert_eq!(c.st.conntrack.len(), 1);
        assert_eq!(poll_expire(deadline, 1024, &mut c.st), 1, "{} at its timeout", state.name());
        assert!(c.st.conntrack.is_empty());
        assert_eq!(c.st.counters.expired_flows, 1);
        // A new connection from the same client port is a new flow.
        c.snat_port = 0;
        c.client(deadline + SEC, SYN);
        assert_eq!(c.st.counters.new_flows, 2);
    }
}

#[test]
fn a_packet_after_the_deadline_but_before_expiry_starts_a_new_flow() {
    let mut c = Conn::new(1024);
    c.client(0, SYN);
    // SYN_SENT's deadline has passed; nothing has reaped the flow yet. The retransmitted
    // SYN is the first segment of a new flow (with a new SNAT port: a just-freed port is
    // reused last), with a fresh SYN_SENT timeout.
    c.snat_port = 0;
    c.client(T.tcp_syn_sent_ns, SYN);
    c.expect(TcpState::SynSent, T.tcp_syn_sent_ns, T.tcp_syn_sent_ns);
    assert_eq!(c.st.counters.new_flows, 2);
}

#[test]
fn a_rst_before_any_answer_ends_the_flow_at_once() {
    // The endpoint refuses the connection.
    let mut c = Conn::new(1024);
    c.client(0, SYN);
    c.endpoint(SEC, RST_ACK);
    assert!(c.st.conntrack.is_empty(), "a RST as the only reply ends the flow");
    // The client gives up before an answer.
    let mut c = Conn::new(1024);
    c.client(0, SYN);
    c.client(SEC, RST);
    assert!(c.st.conntrack.is_empty());
    // The next SYN is a new flow.
    c.snat_port = 0;
    c.client(2 * SEC, SYN);
    assert_eq!(c.st.counters.new_flows, 2);
}

#[test]
fn a_rst_on_an_established_flow_closes_it_within_ten_seconds() {
    let mut c = Conn::new(1024);
    c.establish();
    c.client(3 * SEC, RST_ACK);
    c.expect(TcpState::Close, 3 * SEC, 10 * SEC);
    // Stragglers still pass, without extending CLOSE beyond its short timeout.
    c.endpoint(4 * SEC, ACK);
    c.expect(TcpState::Close, 4 * SEC, T.tcp_close_ns);
    assert_eq!(poll_expire(14 * SEC, 1024, &mut c.st), 1);
}

#[test]
fn a_client_syn_reopens_a_time_wait_flow_with_the_endpoint_chosen_anew() {
    // Find a client port whose new flow the three-endpoint table sends elsewhere than the
    // single endpoint of the first table.
    let wide = table(&[BACKEND, "10.70.0.12", "10.70.0.13"]);
    let port = (41000..42000u16)
        .find(|&p| {
            let mut probe = state(0, 1);
            let syn = frames::tcp(to_gw(), (CLIENT.0, p), (VIP, 80), SYN, 1, 0, &[], 64);
            let (_, out) = run(0, &syn, FRONT, &wide, &mut probe);
            backend_of(&out) != ip(BACKEND)
        })
        .expect("a port Maglev maps elsewhere");
    let mut c = Conn::new(1024);
    c.client = (CLIENT.0, port);
    c.establish();
    c.client(3 * SEC, FIN_ACK);
    c.endpoint(4 * SEC, ACK);
    c.endpoint(5 * SEC, FIN_ACK);
    c.client(6 * SEC, ACK);
    c.expect(TcpState::TimeWait, 6 * SEC, T.tcp_time_wait_ns);
    // The Service grows; the TIME_WAIT flow keeps its endpoint (it still serves).
    c.t = wide;
    c.client(7 * SEC, ACK);
    c.expect(TcpState::TimeWait, 7 * SEC, T.tcp_time_wait_ns);
    // A new SYN on the same tuple: a new connection, whose endpoint Maglev chooses anew.
    let syn = frames::tcp(to_gw(), c.client, (VIP, 80), SYN, 1, 0, &[], 64);
    let (v, out) = run(8 * SEC, &syn, FRONT, &c.t, &mut c.st);
    assert!(matches!(v, Verdict::Transmit { iface: BACK, .. }), "{v:?}");
    assert_ne!(backend_of(&out), ip(BACKEND));
    assert_eq!(c.st.counters.new_flows, 2);
    let id = c.flow_id();
    assert_eq!(c.st.conntrack.state(id).tcp_state(), TcpState::SynSent);
    assert_eq!(c.st.conntrack.get(id).reply.src_addr, backend_of(&out));
}

#[test]
fn a_reopened_flow_starts_as_the_same_syn_opens_one_on_a_miss() {
    // A connection closed by the endpoint's RST (CLOSE), and the client's next SYN on the
    // tuple, which reopens it (`flow::reopen`, tracked and routed as a SYN that opened its
    // flow on a miss); the same SYN in a worker that never saw the tuple opens the flow on
    // a miss. The same frame but for the SNAT port each worker chose (and the TCP checksum
    // that covers it), the same state and windows.
    let mut c = Conn::new(1024);
    c.establish();
    c.endpoint(3 * SEC, RST);
    c.expect(TcpState::Close, 3 * SEC, T.tcp_close_ns);
    let (syn, _) = c.client_segment(SYN, b"");
    let (v, out) = run(4 * SEC, &syn, FRONT, &c.t, &mut c.st);
    let mut miss = state_with_capacity(0, 1, 1024);
    let (miss_v, miss_out) = run(4 * SEC, &syn, FRONT, &c.t, &mut miss);
    assert!(matches!(v, Verdict::Transmit { iface: BACK, .. }), "{v:?}");
    assert_eq!(v, miss_v);
    assert_eq!((c.st.counters.new_flows, miss.counters.new_flows), (2, 1));
    // The frames: Ethernet, IPv4 and TCP headers alike but for the source port and the
    // checksum (bytes 34–35 and 50–51).
    let skip = |f: &[u8]| -> Vec<u8> { [&f[..34], &f[36..50], &f[52..]].concat() };
    assert_eq!(skip(&out), skip(&miss_out));
    let (id, miss_id) = (c.flow_id(), miss.conntrack.iter().map(|(id, _)| id).next().expect("the flow"));
    let (flow, miss_flow) = (c.st.conntrack.get(id), miss.conntrack.get(miss_id));
    assert_eq!(flow.state, miss_flow.state);
    assert_eq!(flow.state.tcp_state(), TcpState::SynSent);
    assert_eq!(
        (flow.original, flow.reply.src_addr, flow.reply.src_port),
        (miss_flow.original, miss_flow.reply.src_addr, miss_flow.reply.src_port)
    );
    assert_eq!(c.st.conntrack.tcp_windows(id), miss.conntrack.tcp_windows(miss_id));
    // The next segments go on along the reopened flow.
    c.snat_port = flow.reply.dst_port;
    c.endpoint(5 * SEC, SYN_ACK);
    c.client(6 * SEC, ACK);
    c.expect(TcpState::Established, 6 * SEC, T.tcp_established_ns);
}

#[test]
fn a_connection_reopened_to_the_same_endpoint_keeps_its_snat_port() {
    // The client's SYN on its tuple while the flow is ESTABLISHED (ignored, forwarded along
    // the flow), the endpoint's RST of the old connection (CLOSE), the client's next SYN
    // (a reopen). The new connection keeps the SNAT port (`flow::keeps_port`, as Linux's NAT
    // keeps a client's mapping), so the endpoint's late SYN-ACK to the ignored SYN can only
    // reach this client's flow, never another client that took a freed port.
    let mut c = Conn::new(1024);
    c.establish();
    let old_port = c.snat_port;
    c.client(3 * SEC, SYN);
    c.endpoint(4 * SEC, RST);
    c.expect(TcpState::Close, 4 * SEC, T.tcp_close_ns);
    let old_id = c.flow_id();
    // `client` checks the translation against `snat_port`: the same port.
    c.client(5 * SEC, SYN);
    assert_eq!(c.st.counters.new_flows, 2);
    assert_eq!(c.st.conntrack.get(c.flow_id()).reply.dst_port, old_port);
    // The closed flow's record renewed in place (`Conntrack::renew`): its id, a new state.
    assert_eq!(c.flow_id(), old_id);
    c.expect(TcpState::SynSent, 5 * SEC, T.tcp_syn_sent_ns);
    // Another client's new connection to the same endpoint takes another port.
    let other = frames::tcp(to_gw(), (CLIENT.0, CLIENT.1 + 1), (VIP, 80), SYN, 1, 0, &[], 64);
    let (v, out) = run(5 * SEC, &other, FRONT, &c.t, &mut c.st);
    assert!(matches!(v, Verdict::Transmit { iface: BACK, .. }), "{v:?}");
    assert_ne!(TcpPacket::new_checked(&out[34..]).map(|t| t.src_port()), Ok(old_port));
    // The late SYN-ACK meets the reopened flow: tracked against it, and what it forwards
    // goes to this client only.
    let (late, _) = c.endpoint_segment(SYN_ACK);
    let (v, out) = run(6 * SEC, &late, BACK, &c.t, &mut c.st);
    if let Verdict::Transmit { iface, len } = v {
        assert_eq!(iface, FRONT);
        let tcp = TcpPacket::new_checked(&out[34..len]).expect("a TCP segment");
        assert_eq!(tcp.dst_port(), c.client.1);
    }
}

#[test]
fn a_reopen_refused_forgets_the_closed_flow() {
    // The client's SYN on the tuple of its closed connection (a reopen) over its source's
    // new-flow rate: refused as on a miss, and the closed flow is gone, as without a
    // reopen; the endpoint's late segment of it finds no flow (nor a front door on the
    // SNAT address).
    let mut c = Conn::new(1024);
    c.establish();
    c.endpoint(3 * SEC, RST);
    c.st.sources = crate::limiter::SourceLimiter::new(1, 1, 1);
    // Another connection of the same client takes the source's one new flow of the second.
    let other = frames::tcp(to_gw(), (CLIENT.0, CLIENT.1 + 1), (VIP, 80), SYN, 1, 0, &[], 64);
    assert!(matches!(run(4 * SEC, &other, FRONT, &c.t, &mut c.st).0, Verdict::Transmit { .. }));
    let (syn, _) = c.client_segment(SYN, b"");
    let refused = (Verdict::Drop(DropReason::NewFlowRateLimited), Vec::new());
    assert_eq!(run(4 * SEC, &syn, FRONT, &c.t, &mut c.st), refused);
    assert_eq!(c.st.counters.new_flows, 2);
    let flows: Vec<_> = c.st.conntrack.iter().map(|(_, f)| f.original.src_port).collect();
    assert_eq!(flows, [CLIENT.1 + 1], "only the other connection's flow");
    let (late, _) = c.endpoint_segment(ACK);
    assert_eq!(run(4 * SEC, &late, BACK, &c.t, &mut c.st).0, Verdict::Drop(DropReason::NoFrontend));
}

#[test]
fn a_syn_on_the_tuple_of_a_flow_whose_endpoint_left_opens_a_new_flow_instead_of_a_rst() {
    let mut c = Conn::new(1024);
    c.establish();
    c.client(3 * SEC, FIN_ACK);
    c.endpoint(4 * SEC, ACK);
    c.endpoint(5 * SEC, FIN_ACK);
    c.client(6 * SEC, ACK);
    // The endpoint leaves; the client reuses its port for a new connection.
    c.t = table(&["10.70.0.12"]);
    let syn = frames::tcp(to_gw(), c.client, (VIP, 80), SYN, 1, 0, &[], 64);
    let (v, out) = run(7 * SEC, &syn, FRONT, &c.t, &mut c.st);
    assert!(matches!(v, Verdict::Transmit { iface: BACK, .. }), "{v:?}");
    assert_eq!(backend_of(&out), ip("10.70.0.12"));
    assert_eq!((c.st.counters.endpoint_gone, c.st.counters.rejected, c.st.counters.new_flows), (1, 0, 2));
    c.expect(TcpState::SynSent, 7 * SEC, T.tcp_syn_sent_ns);
}

#[test]
fn a_reply_forged_on_the_clients_link_and_blind_resets_leave_the_connection_alone() {
    let mut c = Conn::new(1024);
    c.establish();
    let expect_untouched = |c: &Conn| c.expect(TcpState::Established, 2 * SEC, T.tcp_established_ns);
    // The endpoint's tuple (endpoint → SNAT address:port), from the clients' side: a
    // forged reply, whatever its flags and numbers.
    for flags in [RST, ACK, FIN_ACK] {
        let (seq, ack) = seq_ack(flags);
        let forged = frames::tcp(to_gw(), Conn::backend(), (SNAT, c.snat_port), flags, seq, ack, b"", 64);
        assert_eq!(run(3 * SEC, &forged, FRONT, &c.t, &mut c.st).0, Verdict::Drop(DropReason::WrongLink));
        expect_untouched(&c);
    }
    // The client's tuple from the endpoints' side.
    let (seq, ack) = seq_ack(RST);
    let l2 = L2 { src: backend_mac(12), dst: GW_BACK_MAC };
    let forged = frames::tcp(l2, c.client, (VIP, 80), RST, seq, ack, b"", 64);
    assert_eq!(run(3 * SEC, &forged, BACK, &c.t, &mut c.st).0, Verdict::Drop(DropReason::WrongLink));
    expect_untouched(&c);
    // A blind RST with the client's tuple, on the right link, at a guessed sequence number.
    for seq in [0, 0x8000_0000, 0xdead_beef, 2u32.wrapping_sub(70_000)] {
        let blind = frames::tcp(to_gw(), c.client, (VIP, 80), RST, seq, 0, b"", 64);
        assert_eq!(run(3 * SEC, &blind, FRONT, &c.t, &mut c.st).0, Verdict::Drop(DropReason::TcpOutOfWindow));
        expect_untouched(&c);
    }
    assert_eq!(c.st.counters.drops_of(DropReason::WrongLink), 4);
    assert_eq!(c.st.counters.drops_of(DropReason::TcpOutOfWindow), 4);
    // One in the window but not at the expected number is forwarded (the endpoint answers
    // it with a challenge ACK, RFC 5961 § 3.2) and closes nothing.
    let near = frames::tcp(to_gw(), c.client, (VIP, 80), RST, 2 + 1000, 0, b"", 64);
    assert!(matches!(run(4 * SEC, &near, FRONT, &c.t, &mut c.st).0, Verdict::Transmit { iface: BACK, .. }));
    c.expect(TcpState::Established, 4 * SEC, T.tcp_close_ns);
    // The connection goes on.
    c.client(5 * SEC, ACK);
    c.endpoint(5 * SEC, ACK);
    c.expect(TcpState::Established, 5 * SEC, T.tcp_established_ns);
}

/// A SYN from flood source `i` (198.51.100.100 + i, port 5000) at `now`: the endpoint and
/// SNAT port the gateway sent it to, or its verdict when it was not forwarded.
fn flood_syn(i: u16, now: u64, t: &Table, st: &mut WorkerState) -> Result<(Ipv4Addr, u16), Verdict> {
    let src = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 51, 100, 100)) + u32::from(i));
    let syn = frames::tcp(to_gw(), (src, 5000), (VIP, 80), SYN, 1, 0, &[], 64);
    match run(now, &syn, FRONT, t, st) {
        (Verdict::Transmit { iface: BACK, .. }, out) => {
            let ip = Ipv4Packet::new_checked(&out[14..]).unwrap();
            Ok((ip.dst_addr(), TcpPacket::new_checked(&out[34..]).unwrap().src_port()))
        }
        (v, _) => Err(v),
    }
}

/// The live flows to `endpoint`: (client address, SNAT port, flow id).
fn flows_to(st: &WorkerState, endpoint: Ipv4Addr) -> Vec<(Ipv4Addr, u16, FlowId)> {
    let mut v: Vec<_> = st
        .conntrack
        .iter()
        .filter(|(_, f)| f.reply.src_addr == endpoint)
        .map(|(id, f)| (f.original.src_addr, f.reply.dst_port, id))
        .collect();
    v.sort_unstable();
    v
}

/// With four SNAT ports, each of two endpoints holds four flows at once (a port serves
/// one flow per endpoint); once an endpoint's ports are all taken, a new flow to it evicts
/// that endpoint's oldest half-open flow — never another endpoint's, never an established
/// one — and is refused only when every flow holding its ports is established.
#[test]
fn half_open_flows_give_way_per_endpoint_when_its_snat_ports_run_out() {
    let (e1, e2) = (ip("10.70.0.11"), ip("10.70.0.12"));
    let t = table(&["10.70.0.11", "10.70.0.12"]);
    let mut st = state(0, 1);
    st.snat = crate::snat::SnatPorts::new(0, 1, 1024, 1027);
    // A SYN flood, one SYN a millisecond: each endpoint's four newest SYNs hold its four ports.
    let mut sent_to = std::collections::HashMap::new();
    for i in 0..40u16 {
        let (endpoint, port) = flood_syn(i, u64::from(i) * 1_000_000, &t, &mut st).expect("forwarded");
        assert!((1024..=1027).contains(&port));
        sent_to.entry(endpoint).or_insert_with(Vec::new).push(i);
        assert!(flows_to(&st, endpoint).len() <= 4);
    }
    assert_eq!((st.conntrack.len(), st.counters.conntrack_evicted), (8, 32), "4 flows per endpoint, 8 on 4 ports");
    assert_eq!(st.counters.drops_of(DropReason::SnatExhausted), 0);
    for e in [e1, e2] {
        let flows = flows_to(&st, e);
        let ports: Vec<u16> = {
            let mut p: Vec<u16> = flows.iter().map(|f| f.1).collect();
            p.sort_unstable();
            p
        };
        assert_eq!(ports, [1024, 1025, 1026, 1027], "{e}");
        // The survivors are the endpoint's four newest SYNs: the oldest gave way first.
        let newest: Vec<Ipv4Addr> = sent_to[&e][sent_to[&e].len() - 4..]
            .iter()
            .map(|&i| Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 51, 100, 100)) + u32::from(i)))
            .collect();
        assert_eq!(flows.iter().map(|f| f.0).collect::<Vec<_>>(), newest, "{e}");
    }
    // Endpoint 1's flows are all established now, endpoint 2's one closing and three half-open.
    for (_, _, id) in flows_to(&st, e1) {
        let s = st.conntrack.state_mut(id);
        s.set_tcp_state(TcpState::Established);
        s.set_seen_reply(true);
        s.set_assured(true);
    }
    let e2_flows = flows_to(&st, e2);
    let oldest_e2 = e2_flows.iter().min_by_key(|f| st.conntrack.state(f.2).deadline.remaining_ms(SEC)).unwrap().2;
    let s = st.conntrack.state_mut(oldest_e2);
    s.set_tcp_state(TcpState::FinWait);
    s.set_seen_reply(true);
    s.set_assured(true);
    // New SYNs: to endpoint 1 refused (nothing there may go), to endpoint 2 admitted in place
    // of its oldest half-open flow, not of the (older) closing one.
    let (mut refused, mut admitted) = (0, 0);
    for i in 100..140u16 {
        let before = flows_to(&st, e2);
        match flood_syn(i, SEC, &t, &mut st) {
            Ok((e, _)) => {
                assert_eq!(e, e2);
                admitted += 1;
                let after = flows_to(&st, e2);
                assert!(after.iter().any(|f| f.2 == oldest_e2), "the closing flow stays while half-open ones go");
                assert_eq!(after.len(), 4);
                assert_eq!(before.iter().filter(|f| !after.contains(f)).count(), 1, "one flow gave way");
            }
            Err(v) => {
                assert_eq!(v, Verdict::Drop(DropReason::SnatExhausted));
                refused += 1;
            }
        }
    }
    assert!(refused > 0 && admitted > 0, "both endpoints drew SYNs: {refused} refused, {admitted} admitted");
    assert_eq!(st.counters.drops_of(DropReason::SnatExhausted), refused);
    assert_eq!(flows_to(&st, e1).len(), 4, "established flows are never evicted");
    assert!(flows_to(&st, e1).iter().all(|f| st.conntrack.state(f.2).assured()));
    assert_eq!(st.conntrack.len(), 8);
}

#[test]
fn segments_that_do_not_fit_are_dropped_and_unknown_flows_open_only_on_syn_or_ack() {
    let mut c = Conn::new(1024);
    // Only a SYN opens a flow, or an ACK (mid-stream pickup); nothing else creates state.
    for flags in [SYN_ACK, FIN_ACK, RST] {
        let (input, _) = c.client_segment(flags, b"");
        assert_eq!(run(0, &input, FRONT, &c.t, &mut c.st).0, Verdict::Drop(DropReason::NoConntrack), "{flags:?}");
    }
    // Combinations no TCP sends: Linux's tcp_error calls them INVALID before any lookup.
    for flags in [TcpFlags::EMPTY, TcpFlags(SYN.0 | TcpFlags::FIN.0), TcpFlags::FIN, TcpFlags(0x29)] {
        let (input, _) = c.client_segment(flags, b"");
        assert_eq!(run(0, &input, FRONT, &c.t, &mut c.st).0, Verdict::Drop(DropReason::TcpInvalid), "{flags:?}");
    }
    assert!(c.st.conntrack.is_empty());
    c.client(0, SYN);
    // An ACK from the client before the endpoint answered: Linux's INVALID.
    let (input, _) = c.client_segment(ACK, b"");
    assert_eq!(run(SEC, &input, FRONT, &c.t, &mut c.st).0, Verdict::Drop(DropReason::TcpInvalid));
    c.expect(TcpState::SynSent, 0, T.tcp_syn_sent_ns);
    assert_eq!(c.st.counters.drops_of(DropReason::TcpInvalid), 5, "4 flag combinations and the ACK");
    // A retransmitted SYN+ACK is passed on but changes nothing (Linux "ignore").
    c.endpoint(2 * SEC, SYN_ACK);
    c.endpoint(3 * SEC, SYN_ACK);
    c.expect(TcpState::SynRecv, 2 * SEC, T.tcp_syn_recv_ns);
}

#[test]
fn a_connection_picked_up_mid_stream_is_capped_until_the_endpoint_answers() {
    let mut c = Conn::new(1024);
    c.client(0, ACK);
    c.expect(TcpState::Established, 0, T.tcp_unacknowledged_ns);
    c.endpoint(SEC, ACK);
    c.client(2 * SEC, ACK);
    c.expect(TcpState::Established, 2 * SEC, T.tcp_established_ns);
    assert!(c.st.conntrack.state(c.flow_id()).assured());
}

#[test]
fn udp_flows_last_30_s_unanswered_and_120_s_once_traffic_follows_a_reply() {
    let (t, mut st) = (table(&["10.70.0.11"]), state(0, 1));
    let q = frames::udp(to_gw(), CLIENT, (VIP, 7), b"q", 64);
    let r =
        frames::udp(L2 { src: backend_mac(21), dst: GW_BACK_MAC }, (ip("10.70.0.21"), 7007), (SNAT, 1024), b"r", 64);
    let deadline = |st: &WorkerState| st.conntrack.state(st.conntrack.iter().next().unwrap().0).deadline;
    run(0, &q, FRONT, &t, &mut st);
    assert_eq!(deadline(&st), Deadline::after(0, 30 * SEC));
    run(SEC, &r, BACK, &t, &mut st);
    assert_eq!(deadline(&st), Deadline::after(SEC, 30 * SEC), "the first reply is still unreplied");
    run(2 * SEC, &q, FRONT, &t, &mut st);
    assert_eq!(deadline(&st), Deadline::after(2 * SEC, 120 * SEC));
    assert_eq!(poll_expire(122 * SEC - 1_000_000, 1024, &mut st), 0);
    assert_eq!(poll_expire(122 * SEC, 1024, &mut st), 1);
    // Unanswered: gone after 30 s.
    run(200 * SEC, &q, FRONT, &t, &mut st);
    assert_eq!(poll_expire(230 * SEC - 1_000_000, 1024, &mut st), 0);
    assert_eq!(poll_expire(230 * SEC, 1024, &mut st), 1);
}

/// A full table evicts a flow that is worth less (here: one that never completed its
/// handshake) to admit a new one, as Linux's early drop does; when every flow is assured
/// and live, the new flow is refused and counted.
#[test]
fn a_full_table_evicts_unassured_flows_then_refuses() {
    const CAPACITY: usize = 4;
    let t = table(&[BACKEND]);
    let mut st = state_with_capacity(0, 1, CAPACITY);
    let conn = |port: u16| Conn { t: table(&[BACKEND]), st: state(0, 1), client: (CLIENT.0, port), snat_port: 0 };
    // Four established (assured) connections fill the table.
    let mut snat_ports = Vec::new();
    for i in 0..CAPACITY as u16 {
        let mut c = conn(50_000 + i);
        let (syn, _) = c.client_segment(SYN, b"");
        let (v, out) = run(0, &syn, FRONT, &t, &mut st);
        assert!(matches!(v, Verdict::Transmit { .. }));
        c.snat_port = TcpPacket::new_checked(&out[34..]).unwrap().src_port();
        let (syn_ack, _) = c.endpoint_segment(SYN_ACK);
        let (ack, _) = c.client_segment(ACK, b"");
        assert!(matches!(run(SEC, &syn_ack, BACK, &t, &mut st).0, Verdict::Transmit { .. }));
        assert!(matches!(run(2 * SEC, &ack, FRONT, &t, &mut st).0, Verdict::Transmit { .. }));
        snat_ports.push(c.snat_port);
    }
    assert_eq!(st.conntrack.len(), CAPACITY);
    assert!(st.conntrack.iter().all(|(_, f)| f.state.assured()));
    // A fifth connection finds nothing to evict: refused, counted.
    let late = conn(50_100);
    let (syn, _) = late.client_segment(SYN, b"");
    assert_eq!(run(3 * SEC, &syn, FRONT, &t, &mut st).0, Verdict::Drop(DropReason::ConntrackFull));
    assert_eq!((st.counters.drops_of(DropReason::ConntrackFull), st.counters.conntrack_evicted), (1, 0));
    // One connection closes and sits in TIME_WAIT: worth less than a new connection.
    let mut closing = conn(50_000);
    closing.snat_port = snat_ports[0];
    for (now, from_client, flags) in [(4, true, FIN_ACK), (5, false, ACK), (6, false, FIN_ACK), (7, true, ACK)] {
        let input = if from_client { closing.client_segment(flags, b"").0 } else { closing.endpoint_segment(flags).0 };
        let iface = if from_client { FRONT } else { BACK };
        assert!(matches!(run(now * SEC, &input, iface, &t, &mut st).0, Verdict::Transmit { .. }));
    }
    // The fifth connection now gets in, in place of the TIME_WAIT one.
    let (v, _) = run(8 * SEC, &syn, FRONT, &t, &mut st);
    assert!(matches!(v, Verdict::Transmit { iface: BACK, .. }), "{v:?}");
    let clients: Vec<u16> = st.conntrack.iter().map(|(_, f)| f.original.src_port).collect();
    assert!(clients.contains(&50_100) && !clients.contains(&50_000), "{clients:?}");
    assert_eq!((st.counters.drops_of(DropReason::ConntrackFull), st.counters.conntrack_evicted), (1, 1));
    assert_eq!(st.conntrack.len(), CAPACITY);
    // A sixth connection: the fifth's flow is not assured yet (SYN_SENT), so it is the one
    // evicted — a flood of SYNs displaces only other unanswered SYNs, never established
    // connections.
    let sixth = conn(50_200);
    let (syn6, _) = sixth.client_segment(SYN, b"");
    assert!(matches!(run(9 * SEC, &syn6, FRONT, &t, &mut st).0, Verdict::Transmit { .. }));
    assert_eq!(st.counters.conntrack_evicted, 2);
    let clients: Vec<u16> = st.conntrack.iter().map(|(_, f)| f.original.src_port).collect();
    assert!(clients.contains(&50_200) && !clients.contains(&50_100), "{clients:?}");
    for port in [50_001, 50_002, 50_003] {
        assert!(clients.contains(&port), "established connection {port} kept: {clients:?}");
    }
}

/// A client that crashed reuses its port while the gateway still holds the old connection's
/// flow as ESTABLISHED and the endpoint no longer has it (its RST, or the client's, never
/// passed the gateway). The new SYN does not fit the old connection: it is let through along
/// the old flow's translation (same endpoint, same SNAT port) but ignored (Linux's `sIG`),
/// and recorded beside the flow table (`conntrack::resync`). The endpoint's SYN+ACK
/// acknowledges exactly that SYN, so the flow restarts as the new connection: SYN_RECV, the
/// client's window from the SYN, the endpoint's from the SYN+ACK (Linux
/// `nf_conntrack_tcp_packet`, the `TCP_CONNTRACK_IGNORE` case). The client's ACK completes
/// the handshake and data flows both ways. Before, the ACK fell outside the old windows and
/// every later segment was dropped until the flow expired.
#[test]
fn a_reused_tuple_on_a_stale_established_flow_is_resynchronised() {
    let mut c = Conn::new(1024);
    c.establish();
    let (isn, endpoint_isn) = (3_000_000_000u32, 777_000u32);
    let to_endpoint = L2 { src: GW_BACK_MAC, dst: backend_mac(11) };
    let from_endpoint = L2 { src: backend_mac(11), dst: GW_BACK_MAC };
    let to_client = L2 { src: GW_FRONT_MAC, dst: CLIENT_MAC };
    let snat = (SNAT, c.snat_port);
    let client = c.client;
    // Client → VIP as received, and as it must leave for the endpoint (TTL − 1).
    let original = |flags, seq, ack, data: &[u8]| {
        (
            frames::tcp(to_gw(), client, (VIP, 80), flags, seq, ack, data, 64),
            frames::tcp(to_endpoint, snat, Conn::backend(), flags, seq, ack, data, 63),
        )
    };
    // Endpoint → SNAT address as received, and as it must leave for the client.
    let reply = |flags, seq, ack, data: &[u8]| {
        (
            frames::tcp(from_endpoint, Conn::backend(), snat, flags, seq, ack, data, 64),
            frames::tcp(to_client, (VIP, 80), client, flags, seq, ack, data, 63),
        )
    };
    // The new connection's SYN: along the old flow to its endpoint, the flow unchanged.
    let (input, want) = original(SYN, isn, 0, b"");
    assert_eq!(run(10 * SEC, &input, FRONT, &c.t, &mut c.st), (tx(BACK, &want), want));
    c.expect(TcpState::Established, 2 * SEC, T.tcp_established_ns);
    assert_eq!(c.st.conntrack.ignored_syns().len(), 1, "the ignored SYN is recorded");
    // The endpoint's answer, acknowledging exactly that SYN: forwarded, the flow restarted.
    let (input, want) = reply(SYN_ACK, endpoint_isn, isn.wrapping_add(1), b"");
    assert_eq!(run(11 * SEC, &input, BACK, &c.t, &mut c.st), (tx(FRONT, &want), want));
    c.expect(TcpState::SynRecv, 11 * SEC, T.tcp_syn_recv_ns);
    let syns = c.st.conntrack.ignored_syns();
    assert_eq!((syns.len(), syns.resyncs()), (0, 1));
    // The client's ACK completes the new handshake.
    let (input, want) = original(ACK, isn + 1, endpoint_isn + 1, b"");
    assert_eq!(run(12 * SEC, &input, FRONT, &c.t, &mut c.st), (tx(BACK, &want), want));
    c.expect(TcpState::Established, 12 * SEC, T.tcp_established_ns);
    // Data both ways, in the new connection's numbers.
    let (input, want) = original(ACK, isn + 1, endpoint_isn + 1, b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(run(13 * SEC, &input, FRONT, &c.t, &mut c.st), (tx(BACK, &want), want));
    let (input, want) = reply(ACK, endpoint_isn + 1, isn + 19, b"HTTP/1.1 200 OK\r\n\r\n");
    assert_eq!(run(14 * SEC, &input, BACK, &c.t, &mut c.st), (tx(FRONT, &want), want));
    let (input, want) = original(ACK, isn + 19, endpoint_isn + 20, b"");
    assert_eq!(run(15 * SEC, &input, FRONT, &c.t, &mut c.st), (tx(BACK, &want), want));
    c.expect(TcpState::Established, 15 * SEC, T.tcp_established_ns);
    assert_eq!(c.st.counters.drops_of(DropReason::TcpOutOfWindow), 0);
    assert_eq!(c.st.counters.new_flows, 1, "one flow throughout: the old translation kept");
}

/// The ignored SYN's record is the flow's alone: an endpoint's SYN+ACK that acknowledges
/// something else leaves the flow as it was (and drops the record, as Linux's `last_*`
/// then describe that SYN+ACK), so the new handshake's ACK still does not fit; and a flow
/// removed and created again on the same record does not inherit the record.
#[test]
fn only_a_syn_ack_answering_the_ignored_syn_resynchronises() {
    let mut c = Conn::new(1024);
    c.establish();
    let isn = 3_000_000_000u32;
    let client = |flags, seq, ack| frames::tcp(to_gw(), c.client, (VIP, 80), flags, seq, ack, b"", 64);
    let endpoint_l2 = L2 { src: backend_mac(11), dst: GW_BACK_MAC };
    let endpoint =
        |flags, seq, ack| frames::tcp(endpoint_l2, Conn::backend(), (SNAT, c.snat_port), flags, seq, ack, b"", 64);
    assert!(matches!(run(10 * SEC, &client(SYN, isn, 0), FRONT, &c.t, &mut c.st).0, Verdict::Transmit { .. }));
    let (v, _) = run(11 * SEC, &endpoint(SYN_ACK, 777_000, isn.wrapping_add(2)), BACK, &c.t, &mut c.st);
    assert!(matches!(v, Verdict::Transmit { iface: FRONT, .. }), "ignored, forwarded: {v:?}");
    c.expect(TcpState::Established, 2 * SEC, T.tcp_established_ns);
    assert!(c.st.conntrack.ignored_syns().is_empty());
    let (v, _) = run(12 * SEC, &endpoint(SYN_ACK, 777_000, isn.wrapping_add(1)), BACK, &c.t, &mut c.st);
    assert!(matches!(v, Verdict::Transmit { iface: FRONT, .. }), "{v:?}");
    c.expect(TcpState::Established, 2 * SEC, T.tcp_established_ns);
    let (v, _) = run(13 * SEC, &client(ACK, isn + 1, 777_001), FRONT, &c.t, &mut c.st);
    assert_eq!(v, Verdict::Drop(DropReason::TcpOutOfWindow));
    // Recorded again, then the flow expires: the record goes with it.
    assert!(matches!(run(14 * SEC, &client(SYN, isn, 0), FRONT, &c.t, &mut c.st).0, Verdict::Transmit { .. }));
    assert_eq!(c.st.conntrack.ignored_syns().len(), 1);
    assert_eq!(poll_expire(2 * SEC + T.tcp_established_ns, 1024, &mut c.st), 1);
    assert!(c.st.conntrack.ignored_syns().is_empty(), "dropped with the flow's record");
}
