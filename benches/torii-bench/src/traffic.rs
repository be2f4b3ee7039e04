//! The generator and sink on a DPDK port: one thread (the EAL main lcore) that, in one
//! poll loop, sends the clients' probes at a paced rate, reflects every probe that
//! reaches an endpoint as that endpoint's reply (the received mbuf, rewritten in place
//! by [`plan::reflect`] and sent back), answers ARP and Neighbor Solicitations for every
//! address it plays, and counts the replies that reach their clients, with their latency.
//! Two-armed, the clients' frames leave by the link's client port and the endpoints'
//! replies by its endpoint port: every frame is answered on the port it arrived on.
//!
//! Loss is counted as a NIC would see it: a frame the port refuses because the device
//! under test's receive ring is full (`tx_burst` taking fewer) was offered and lost, the
//! same as `imissed` on a real wire. A trial's frames carry its number, so a straggler of
//! an earlier trial is never counted in a later one.
//!
//! Checks: every request that reaches an endpoint is checked ([`plan::check_to_endpoint`],
//! one SNAT port per flow for torii) and every reply that reaches a client
//! ([`plan::check_to_client`]); checksums on one frame in `checksum_every`.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use torii_dpdk::{Mbuf, Mempool, Port, RxQueue, TxQueue};

use crate::plan::{self, Dut, Plan, Protocol, Received, Segment, Stamp};
use crate::vhost;

/// Frames per receive and per transmit burst.
const BURST: usize = 64;
/// Frames kept of the first problems found, for the report.
const MAX_EXAMPLES: usize = 8;
/// Most frames the generator may owe at its paced rate ([`Pacer`]'s bucket depth): two
/// bursts, one to send now and one of slack for the jitter of its own loop.
pub const PACER_DEPTH: u64 = 2 * BURST as u64;

/// The offered rate's clock: a token bucket of depth [`PACER_DEPTH`] frames filled at
/// the asked rate. Time the generator could not use (descheduled, or too slow for the
/// rate) is skipped, never caught up: a generator must not send above its offered rate
/// to make up for lost time (RFC 2544 § 26 offers a constant rate; TRex's and
/// Pktgen-DPDK's pacers do the same), or a preemption of a few ms turns into a burst of
/// thousands of frames at full speed that overflows the device's receive ring — loss
/// the device did not cause. What was skipped is counted ([`TrialOutcome::skipped`]);
/// the trial's offered rate is what was really sent.
#[derive(Debug, Clone, Copy)]
pub struct Pacer {
    rate_pps: f64,
    /// Frames the rate allowed up to now, skipped ones included (a float: fractions
    /// carry over between calls).
    allowed: f64,
    /// Frames the rate allowed that were never sent.
    skipped: u64,
    last_s: f64,
}

impl Pacer {
    /// A pacer at `rate_pps` frames/s starting at time 0 s with an empty bucket.
    pub fn new(rate_pps: f64) -> Self {
        Self { rate_pps, allowed: 0.0, skipped: 0, last_s: 0.0 }
    }

    /// Frames that may be sent at `now_s` (seconds since the start, non-decreasing),
    /// given `sent` frames sent so far: at most [`PACER_DEPTH`]; whatever the rate
    /// allowed beyond that is skipped.
    pub fn due(&mut self, now_s: f64, sent: u64) -> u64 {
        self.allowed += (now_s - self.last_s).max(0.0) * self.rate_pps;
        self.last_s = now_s.max(self.last_s);
        let owed = self.allowed as u64 - (sent + self.skipped).min(self.allowed as u64);
        if owed > PACER_DEPTH {
            self.skipped += owed - PACER_DEPTH;
            return PACER_DEPTH;
        }
        owed
    }

    /// Frames the rate allowed that the generator did not send in time.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }
}

/// The port or ports of torii-bench facing one device under test.
pub struct Link {
    /// The device under test on the other side.
    pub dut: Dut,
    /// The ports: the clients' (one-armed: the only one), then, two-armed, the endpoints'.
    pub ports: Vec<Port>,
    /// Queue 0 of each port, in the same order.
    queues: Vec<(RxQueue, TxQueue)>,
    /// SNAT port each flow was seen with (torii; 0: not seen yet).
    snat: Vec<u16>,
}

impl Link {
    /// Takes queue 0 of each started port: `ports[0]` the clients' side, `ports[1]` (two-armed)
    /// the endpoints'.
    ///
    /// # Errors
    /// When the queues cannot be taken.
    pub fn new(dut: Dut, ports: Vec<Port>, flows: u32) -> torii_dpdk::Result<Self> {
        let queues = ports.iter().map(|p| Ok((p.rx_queue(0)?, p.tx_queue(0)?))).collect::<torii_dpdk::Result<_>>()?;
        Ok(Self { dut, ports, queues, snat: vec![0; flows as usize] })
    }

    /// Forgets the SNAT port each flow was seen with (new connections get new ones).
    pub fn forget_snat(&mut self) {
        self.snat.fill(0);
    }
}

/// What the clients and endpoints do with TCP in a trial (UDP flows only ever carry data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Open connections: the client sends a SYN, the endpoint answers with a SYN-ACK, the
    /// client completes the handshake with an ACK; a flow is answered when its SYN-ACK
    /// reaches the client.
    Open,
    /// Data: `ACK|PSH` segments (UDP datagrams) both ways, each reflected by the endpoint.
    Data,
    /// Close connections: the client sends a data segment and the endpoint answers with a
    /// RST at the sequence number the client acknowledged ([`plan::to_rst`]), which the gateway honours (the flow goes to
    /// CLOSE, where the client's next SYN reopens it); answered when the RST reaches the
    /// client.
    Close,
    /// Connections (RFC 8219 § 7): each frame offered is a new connection's SYN; the
    /// endpoint answers with a SYN-ACK, the client completes the handshake with an ACK,
    /// which the endpoint answers with a RST closing it. A connection counts when its RST
    /// reaches the client; its latency is from the SYN to the RST.
    Connect,
}

/// One trial, as asked.
#[derive(Debug, Clone, Copy)]
pub struct TrialSpec {
    /// Offered rate of client frames per second (`None`: as fast as the generator can).
    pub rate_pps: Option<f64>,
    /// How long frames are offered.
    pub duration: Duration,
    /// Whether to record every reply's latency.
    pub latency: bool,
    /// What TCP flows do ([`Phase::Data`] for UDP).
    pub phase: Phase,
    /// Warm-up: send only flows whose reply has not reached their client yet (since
    /// [`Generator::reset_answered`]), and stop sending once every flow's has.
    pub unanswered_only: bool,
}

/// What a trial measured.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TrialOutcome {
    /// Rate asked for, frames/s (`None`: unlimited).
    pub target_pps: Option<f64>,
    /// Time frames were offered, s.
    pub duration_s: f64,
    /// Client frames offered (including those the device's full ring refused).
    pub offered: u64,
    /// Of those, refused by the port because the device's receive ring was full.
    pub refused: u64,
    /// Requests that reached an endpoint and were reflected.
    pub reflected: u64,
    /// Reflected replies the port refused (the device's ring full).
    pub reflect_refused: u64,
    /// Replies of this trial that reached their client (TCP warm-up: SYN-ACKs).
    pub received: u64,
    /// TCP: handshake ACKs that reached their endpoint (connections established).
    pub handshake_acks: u64,
    /// TCP: SYN-ACKs that reached their client.
    pub syn_acks: u64,
    /// Replies of earlier trials that arrived during this one (not counted).
    pub late: u64,
    /// Frames that were not probes or ARP.
    pub other: u64,
    /// ARP requests and IPv6 Neighbor Solicitations answered.
    pub arp_answered: u64,
    /// Frames that failed a check.
    pub bad: u64,
    /// Flows whose SNAT port changed from an earlier trial's (torii; conntrack churn).
    pub snat_changed: u64,
    /// The first problems, described.
    pub examples: Vec<String>,
    /// Frames the asked rate allowed that the generator could not send in time (it was
    /// descheduled, or the rate is above its ceiling): skipped, never caught up
    /// ([`Pacer`]).
    pub skipped: u64,
    /// Whether the generator fell more than 1 % short of the asked rate.
    pub generator_limited: bool,
    /// CPU time the generator's thread had while it offered frames, s
    /// (`CLOCK_THREAD_CPUTIME_ID`):
    /// well below `duration_s`, others took its CPU (a busy machine), and what it offered
    /// measures its share of the CPU, not its ceiling.
    pub generator_cpu_s: f64,
    /// Latency of every reply, ns (when asked).
    #[serde(skip)]
    pub latency: Option<Histogram<u64>>,
}

impl TrialOutcome {
    /// Offered client frames per second.
    pub fn offered_pps(&self) -> f64 {
        self.offered as f64 / self.duration_s.max(1e-9)
    }

    /// Client frames per second that made the round trip.
    pub fn received_pps(&self) -> f64 {
        self.received as f64 / self.duration_s.max(1e-9)
    }

    /// Requests per second the device carried: half the frames it forwarded both ways
    /// (requests that reached an endpoint plus replies that reached a client).
    pub fn forwarded_pps(&self) -> f64 {
        (self.reflected + self.received) as f64 / 2.0 / self.duration_s.max(1e-9)
    }

    /// Lost / offered (0 when nothing was offered).
    pub fn loss_ratio(&self) -> f64 {
        if self.offered == 0 {
            return 0.0;
        }
        self.offered.saturating_sub(self.received) as f64 / self.offered as f64
    }

    fn problem(&mut self, what: String) {
        self.bad += 1;
        if self.examples.len() < MAX_EXAMPLES {
            self.examples.push(what);
        }
    }
}

/// The generator's state across trials: the flows' frames and the clock.
pub struct Generator {
    plan: Plan,
    pool: Mempool,
    templates: Vec<u8>,
    next_flow: u32,
    trial: u16,
    epoch: Instant,
    checksum_every: u64,
    check_every: u64,
    tx: Vec<Mbuf>,
    rx: Vec<Mbuf>,
    back: Vec<Mbuf>,
    free: Vec<Mbuf>,
    /// Flows whose reply reached their client since [`Generator::reset_answered`].
    answered: Vec<bool>,
    answered_count: u32,
}

impl Generator {
    /// A generator of `plan`'s flows drawing buffers from `pool`; addresses and ports
    /// checked on one received frame in `check_every`, checksums too on one in
    /// `checksum_every` (1: all; the flow index of every frame is checked).
    pub fn new(plan: Plan, pool: Mempool, check_every: u64, checksum_every: u64) -> Self {
        // One slot of the largest frame per flow (IMIX flows use the start of theirs).
        let stride = plan.frame_len();
        let mut templates = vec![0u8; plan.flows as usize * stride];
        for i in 0..plan.flows {
            let t = plan.template(i);
            templates[i as usize * stride..][..t.len()].copy_from_slice(&t);
        }
        Self {
            plan,
            pool,
            templates,
            next_flow: 0,
            trial: 0,
            epoch: Instant::now(),
            checksum_every: checksum_every.max(1),
            check_every: check_every.max(1),
            tx: Vec::with_capacity(BURST),
            rx: Vec::with_capacity(BURST),
            back: Vec::with_capacity(BURST),
            free: Vec::with_capacity(BURST),
            answered: vec![false; plan.flows as usize],
            answered_count: 0,
        }
    }

    /// The flows' plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Forgets which flows were answered.
    pub fn reset_answered(&mut self) {
        self.answered.fill(false);
        self.answered_count = 0;
    }

    /// Flows whose reply reached their client (in any trial) since
    /// [`Generator::reset_answered`].
    pub fn answered(&self) -> u32 {
        self.answered_count
    }

    /// Gives the buffer pool back (for the next flow count's generator).
    pub fn into_pool(self) -> Mempool {
        self.pool
    }

    /// Runs one trial on `link`: offers frames for `spec.duration`, then keeps receiving
    /// until every frame is back or nothing arrived for 200 ms (at most 2 s). `tick` is called about every 100 ms.
    pub fn trial(&mut self, link: &mut Link, spec: TrialSpec, tick: &mut dyn FnMut(&TrialOutcome)) -> TrialOutcome {
        self.trial = self.trial.wrapping_add(1).max(1);
        let mut out = TrialOutcome { target_pps: spec.rate_pps, ..TrialOutcome::default() };
        if spec.latency {
            out.latency = Histogram::new_with_bounds(1, 60_000_000_000, 3).ok();
        }
        let phase = if self.plan.protocol == Protocol::Tcp { spec.phase } else { Phase::Data };
        // The segment every offered frame is (the templates are data segments).
        let syn = matches!(phase, Phase::Open | Phase::Connect);
        let start = Instant::now();
        let end = start + spec.duration;
        let mut last_rx = start;
        let mut last_tick = start;
        let mut checked = 0u64;
        let mut pacer = spec.rate_pps.map(Pacer::new);
        let cpu_start = thread_cpu_s();
        let mut cpu_end = None;
        loop {
            let now = Instant::now();
            if now.duration_since(last_tick) > Duration::from_millis(100) {
                last_tick = now;
                out.duration_s = now.duration_since(start).as_secs_f64().min(spec.duration.as_secs_f64());
                tick(&out);
            }
            // Receive first: the device's transmit ring must never wait on us.
            let now_ns = now.duration_since(self.epoch).as_nanos() as u64;
            for q in 0..link.queues.len() {
                for _ in 0..4 {
                    if self.receive(link, q, &mut out, spec.latency, phase, now_ns, &mut checked) == 0 {
                        break;
                    }
                    last_rx = now;
                }
            }
            if now < end {
                let due = match pacer.as_mut() {
                    Some(p) => p.due(now.duration_since(start).as_secs_f64(), out.offered),
                    None => BURST as u64,
                };
                let mut n = due.min(BURST as u64) as usize;
                if spec.unanswered_only && self.answered_count == self.plan.flows {
                    n = 0;
                }
                // Frames the device's ring refused last time are filled again.
                if self.tx.len() > n {
                    let mut extra = self.tx.split_off(n);
                    Mbuf::free_bulk(&mut extra);
                }
                let kept = self.tx.len();
                if n > 0 && self.pool.alloc_bulk(&mut self.tx, n - kept).is_ok() {
                    let stamp = Stamp::new(self.plan.protocol, self.trial, now_ns);
                    self.fill(spec.unanswered_only, if syn { stamp.with_segment(Segment::Syn) } else { stamp });
                    link.queues[0].1.tx_burst(&mut self.tx);
                    out.offered += n as u64;
                    out.refused += self.tx.len() as u64;
                }
            } else {
                cpu_end.get_or_insert_with(thread_cpu_s);
                // Done when every frame the device took is back, or nothing came for 200 ms
                // (a device descheduled on a busy machine resumes within that), or 2 s on.
                let all_back = out.received + out.refused >= out.offered;
                let quiet = now.duration_since(last_rx) > Duration::from_millis(200);
                if all_back || quiet || now > end + Duration::from_secs(2) {
                    break;
                }
            }
        }
        Mbuf::free_bulk(&mut self.tx);
        out.generator_cpu_s = cpu_end.unwrap_or_else(thread_cpu_s) - cpu_start;
        out.skipped = pacer.map_or(0, |p| p.skipped());
        out.duration_s = spec.duration.as_secs_f64();
        if let Some(r) = spec.rate_pps {
            out.generator_limited = out.offered_pps() < 0.99 * r;
        } else {
            out.generator_limited = true;
        }
        tick(&out);
        out
    }

    /// Writes the next flows' frames into the buffers in `self.tx`: each a copy of its
    /// flow's template, stamped.
    fn fill(&mut self, unanswered_only: bool, stamp: Stamp) {
        let stride = self.plan.frame_len();
        let flows = self.plan.flows;
        for m in &mut self.tx {
            if unanswered_only {
                // Bounded: some flow is unanswered (the caller checked).
                while self.answered[self.next_flow as usize] {
                    self.next_flow = (self.next_flow + 1) % flows;
                }
            }
            let off = self.next_flow as usize * stride;
            let flen = self.plan.frame_len_of(self.next_flow);
            self.next_flow += 1;
            if self.next_flow == flows {
                self.next_flow = 0;
            }
            // A fresh buffer's room holds a 1518-byte frame (DEFAULT_DATA_ROOM).
            if m.set_len(flen) {
                let frame = m.data_mut();
                frame.copy_from_slice(&self.templates[off..off + flen]);
                stamp.apply(frame);
            }
        }
    }

    /// One receive burst on `link`'s port `q`: returns how many frames it took.
    #[allow(clippy::too_many_arguments)]
    fn receive(
        &mut self,
        link: &mut Link,
        q: usize,
        out: &mut TrialOutcome,
        latency: bool,
        phase: Phase,
        now: u64,
        checked: &mut u64,
    ) -> usize {
        let n = link.queues[q].0.rx_burst(&mut self.rx, BURST);
        if n == 0 {
            return 0;
        }
        let mut arp_replies: Vec<Vec<u8>> = Vec::new();
        // A new connection's SNAT port is new: only established flows keep theirs.
        let track_snat = link.dut == Dut::Torii && phase != Phase::Connect;
        let mut rx = std::mem::take(&mut self.rx);
        'frames: for mut m in rx.drain(..) {
            match plan::classify(m.data()) {
                Received::ToEndpoint { flow, segment } => {
                    *checked += 1;
                    let sums = (*checked).is_multiple_of(self.checksum_every);
                    let verdict = if sums || (*checked).is_multiple_of(self.check_every) {
                        plan::check_to_endpoint(&self.plan, link.dut, m.data(), flow, sums)
                    } else if flow < self.plan.flows {
                        Ok(link.snat[flow as usize])
                    } else {
                        Err(format!("flow {flow}: flow index out of range"))
                    };
                    match verdict {
                        Ok(snat) => {
                            if track_snat && snat != 0 {
                                let seen = &mut link.snat[flow as usize];
                                if *seen != 0 && *seen != snat {
                                    out.snat_changed += 1;
                                }
                                *seen = snat;
                            }
                            match (segment, phase) {
                                (Segment::Data, Phase::Close) => plan::to_rst(m.data_mut()),
                                (Segment::Datagram | Segment::Data, _) => {}
                                (Segment::Syn, _) => plan::set_tcp_flags(m.data_mut(), Segment::SynAck),
                                (Segment::Ack, Phase::Connect) => {
                                    out.handshake_acks += 1;
                                    plan::to_rst(m.data_mut());
                                }
                                (Segment::Ack, _) => {
                                    out.handshake_acks += 1;
                                    self.free.push(m);
                                    continue;
                                }
                                (Segment::SynAck | Segment::Rst | Segment::Other, _) => {
                                    out.problem(format!("flow {flow}: unexpected {segment:?} at the endpoint"));
                                    self.free.push(m);
                                    continue;
                                }
                            }
                            plan::reflect(m.data_mut());
                            self.back.push(m);
                            out.reflected += 1;
                            continue;
                        }
                        Err(e) => out.problem(e),
                    }
                }
                Received::ToClient { flow, trial, tx_ns, segment } => 'client: {
                    if trial != self.trial {
                        out.late += 1;
                        break 'client;
                    }
                    *checked += 1;
                    let sums = (*checked).is_multiple_of(self.checksum_every);
                    let verdict = if sums || (*checked).is_multiple_of(self.check_every) {
                        plan::check_to_client(&self.plan, m.data(), flow, sums)
                    } else if flow < self.plan.flows {
                        Ok(())
                    } else {
                        Err(format!("flow {flow}: flow index out of range"))
                    };
                    if let Err(e) = verdict {
                        out.problem(e);
                        break 'client;
                    }
                    match (segment, phase) {
                        (Segment::Datagram | Segment::Data, _) | (Segment::Rst, Phase::Close | Phase::Connect) => {}
                        (Segment::SynAck, Phase::Open | Phase::Connect) => {
                            out.syn_acks += 1;
                            // The client completes the handshake: the buffer becomes its
                            // ACK, carrying the SYN's transmit time on.
                            let off = flow as usize * self.plan.frame_len();
                            let flen = self.plan.frame_len_of(flow);
                            if m.set_len(0) && m.extend_from_slice(&self.templates[off..off + flen]) {
                                plan::set_tcp_flags(m.data_mut(), Segment::Ack);
                                plan::stamp(self.plan.protocol, m.data_mut(), self.trial, tx_ns);
                                self.back.push(m);
                            }
                            if phase == Phase::Connect {
                                // Counted when its RST arrives.
                                continue 'frames;
                            }
                            self.answer(out, flow, latency, now, tx_ns);
                            continue 'frames;
                        }
                        _ => {
                            out.problem(format!("flow {flow}: unexpected {segment:?} at the client in {phase:?}"));
                            break 'client;
                        }
                    }
                    self.answer(out, flow, latency, now, tx_ns);
                }
                Received::Arp => {
                    if let Some(reply) = vhost::arp_reply(m.data(), |ip| self.plan.mac_of(ip.into())) {
                        arp_replies.push(reply);
                        out.arp_answered += 1;
                    }
                }
                Received::NeighborSolicit => {
                    if let Some(reply) = vhost::ndp_reply(m.data(), |ip| self.plan.mac_of(ip)) {
                        arp_replies.push(reply);
                        out.arp_answered += 1;
                    }
                }
                Received::Other => out.other += 1,
            }
            self.free.push(m);
        }
        self.rx = rx;
        let tx = &mut link.queues[q].1;
        if !self.back.is_empty() {
            tx.tx_burst(&mut self.back);
            out.reflect_refused += self.back.len() as u64;
            Mbuf::free_bulk(&mut self.back);
        }
        Mbuf::free_bulk(&mut self.free);
        for reply in arp_replies {
            if let Some(mut m) = self.pool.alloc() {
                if m.extend_from_slice(&reply) {
                    let mut one = vec![m];
                    tx.tx_burst(&mut one);
                }
            }
        }
        n
    }

    /// Counts a reply that reached flow `flow`'s client, with its latency.
    fn answer(&mut self, out: &mut TrialOutcome, flow: u32, latency: bool, now: u64, tx_ns: u64) {
        out.received += 1;
        if !self.answered[flow as usize] {
            self.answered[flow as usize] = true;
            self.answered_count += 1;
        }
        if latency {
            if let Some(h) = out.latency.as_mut() {
                let rtt = match self.plan.protocol {
                    Protocol::Udp => now.saturating_sub(tx_ns),
                    // TCP probes carry the low 32 bits of the time.
                    Protocol::Tcp => u64::from((now as u32).wrapping_sub(tx_ns as u32)),
                };
                let _ = h.record(rtt.max(1));
            }
        }
    }
}

/// CPU time of the calling thread, s.
fn thread_cpu_s() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends whatever is due every `step_s`, in bursts of at most [`BURST`], with a pause
    /// from `pause.0` to `pause.1`; returns the frames sent at each step.
    fn drive(rate: f64, step_s: f64, until_s: f64, pause: (f64, f64)) -> (Vec<u64>, Pacer, u64) {
        let mut p = Pacer::new(rate);
        let (mut sent, mut t, mut bursts) = (0u64, 0.0, Vec::new());
        while t < until_s {
            if t < pause.0 || t >= pause.1 {
                let n = p.due(t, sent).min(BURST as u64);
                sent += n;
                bursts.push(n);
            }
            t += step_s;
        }
        (bursts, p, sent)
    }

    #[test]
    fn paces_at_the_rate_without_skipping() {
        let (_, p, sent) = drive(1e6, 1e-6, 0.01, (1.0, 1.0));
        assert!((9_990..=10_000).contains(&sent), "{sent}");
        assert_eq!(p.skipped(), 0);
    }

    #[test]
    fn a_pause_is_skipped_not_caught_up() {
        // 5 ms descheduled at 4 M frames/s owes 20 000 frames: at most the bucket follows.
        let (bursts, mut p, sent) = drive(4e6, 1e-6, 0.02, (0.005, 0.010));
        let after: u64 = bursts.iter().skip(5_000).take(40).sum();
        assert!(after <= PACER_DEPTH + 40 * 4 + 1, "{after} frames in the 40 µs after the pause");
        assert!(p.skipped() >= 20_000 - PACER_DEPTH - 1, "{}", p.skipped());
        let accounted = sent + p.skipped() + p.due(0.02, sent);
        assert!(accounted.abs_diff(80_000) <= 1, "{accounted}: every allowed frame sent, skipped or owed");
    }

    #[test]
    fn a_rate_above_the_loop_is_skipped() {
        // One burst every 20 µs is at most 3.2 M frames/s: asked 10 M, it sends what it can.
        let (_, p, sent) = drive(10e6, 20e-6, 0.01, (1.0, 1.0));
        assert!(sent <= 32_000 + BURST as u64 && sent > 30_000, "{sent}");
        assert!(p.skipped() > 60_000, "{}", p.skipped());
    }
}
