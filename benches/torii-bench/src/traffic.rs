//! The generator and sink on a DPDK port: one thread (the EAL main lcore) that, in one
//! poll loop, sends the clients' probes at a paced rate, reflects every probe that
//! reaches an endpoint as that endpoint's reply (the received mbuf, rewritten in place
//! by [`plan::reflect`] and sent back), answers ARP for every address it plays, and
//! counts the replies that reach their clients, with their latency.
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

use crate::plan::{self, Dut, Plan, Protocol, Received, Segment};
use crate::vhost;

const BURST: usize = 32;
/// Frames kept of the first problems found, for the report.
const MAX_EXAMPLES: usize = 8;

/// One port of torii-bench facing one device under test.
pub struct Link {
    /// The device under test on the other side.
    pub dut: Dut,
    /// The port (for its counters).
    pub port: Port,
    rx: RxQueue,
    tx: TxQueue,
    /// SNAT port each flow was seen with (torii; 0: not seen yet).
    snat: Vec<u16>,
}

impl Link {
    /// Takes queue 0 of a started port.
    ///
    /// # Errors
    /// When the queues cannot be taken.
    pub fn new(dut: Dut, port: Port, flows: u32) -> torii_dpdk::Result<Self> {
        let rx = port.rx_queue(0)?;
        let tx = port.tx_queue(0)?;
        Ok(Self { dut, port, rx, tx, snat: vec![0; flows as usize] })
    }
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
    /// Warm-up: send only flows whose reply has not reached their client yet (since
    /// [`Generator::reset_answered`]), and stop sending once every flow's has. For TCP
    /// the frames sent are SYNs and a flow is answered when its SYN-ACK arrives (and its
    /// ACK is sent).
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
    /// TCP: handshake ACKs that reached their endpoint (not answered).
    pub handshake_acks: u64,
    /// Replies of earlier trials that arrived during this one (not counted).
    pub late: u64,
    /// Frames that were not probes or ARP.
    pub other: u64,
    /// ARP requests answered.
    pub arp_answered: u64,
    /// Frames that failed a check.
    pub bad: u64,
    /// Flows whose SNAT port changed from an earlier trial's (torii; conntrack churn).
    pub snat_changed: u64,
    /// The first problems, described.
    pub examples: Vec<String>,
    /// Whether the generator fell more than 1 % short of the asked rate.
    pub generator_limited: bool,
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
    tx: Vec<Mbuf>,
    rx: Vec<Mbuf>,
    back: Vec<Mbuf>,
    /// Flows whose reply reached their client since [`Generator::reset_answered`].
    answered: Vec<bool>,
    answered_count: u32,
}

impl Generator {
    /// A generator of `plan`'s flows drawing buffers from `pool`; checksums checked on one
    /// received frame in `checksum_every` (1: all).
    pub fn new(plan: Plan, pool: Mempool, checksum_every: u64) -> Self {
        let mut templates = Vec::with_capacity(plan.flows as usize * plan.frame_len());
        for i in 0..plan.flows {
            templates.extend_from_slice(&plan.template(i));
        }
        Self {
            plan,
            pool,
            templates,
            next_flow: 0,
            trial: 0,
            epoch: Instant::now(),
            checksum_every: checksum_every.max(1),
            tx: Vec::with_capacity(BURST),
            rx: Vec::with_capacity(BURST),
            back: Vec::with_capacity(BURST),
            answered: vec![false; plan.flows as usize],
            answered_count: 0,
        }
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

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Runs one trial on `link`: offers frames for `spec.duration`, then keeps receiving
    /// until nothing arrived for 50 ms (at most 1 s). `tick` is called about every 100 ms.
    pub fn trial(&mut self, link: &mut Link, spec: TrialSpec, tick: &mut dyn FnMut(&TrialOutcome)) -> TrialOutcome {
        self.trial = self.trial.wrapping_add(1).max(1);
        let mut out = TrialOutcome { target_pps: spec.rate_pps, ..TrialOutcome::default() };
        if spec.latency {
            out.latency = Histogram::new_with_bounds(1, 60_000_000_000, 3).ok();
        }
        let flen = self.plan.frame_len();
        // A TCP warm-up opens the connections: SYNs, not data.
        let open_tcp = spec.unanswered_only && self.plan.protocol == Protocol::Tcp;
        let start = Instant::now();
        let end = start + spec.duration;
        let mut last_rx = start;
        let mut last_tick = start;
        let mut checked = 0u64;
        loop {
            let now = Instant::now();
            if now.duration_since(last_tick) > Duration::from_millis(100) {
                last_tick = now;
                out.duration_s = now.duration_since(start).as_secs_f64().min(spec.duration.as_secs_f64());
                tick(&out);
            }
            // Receive first: the device's transmit ring must never wait on us.
            for _ in 0..4 {
                if self.receive(link, &mut out, spec.latency, &mut checked) < BURST {
                    break;
                }
                last_rx = Instant::now();
            }
            if now < end {
                let due = match spec.rate_pps {
                    Some(r) => (now.duration_since(start).as_secs_f64() * r) as u64,
                    None => out.offered + BURST as u64,
                };
                let mut n = due.saturating_sub(out.offered).min(BURST as u64) as usize;
                if spec.unanswered_only && self.answered_count == self.plan.flows {
                    n = 0;
                }
                if n > 0 && self.pool.alloc_bulk(&mut self.tx, n).is_ok() {
                    let ts = self.now_ns();
                    for m in &mut self.tx {
                        if spec.unanswered_only {
                            // Bounded: some flow is unanswered (checked above).
                            while self.answered[self.next_flow as usize] {
                                self.next_flow = (self.next_flow + 1) % self.plan.flows;
                            }
                        }
                        let off = self.next_flow as usize * flen;
                        self.next_flow += 1;
                        if self.next_flow == self.plan.flows {
                            self.next_flow = 0;
                        }
                        if m.extend_from_slice(&self.templates[off..off + flen]) {
                            if open_tcp {
                                plan::set_tcp_flags(m.data_mut(), Segment::Syn);
                            }
                            plan::stamp(self.plan.protocol, m.data_mut(), self.trial, ts);
                        }
                    }
                    link.tx.tx_burst(&mut self.tx);
                    out.offered += n as u64;
                    out.refused += self.tx.len() as u64;
                    self.tx.clear();
                }
            } else {
                let quiet = now.duration_since(last_rx) > Duration::from_millis(50);
                if (quiet && now > end + Duration::from_millis(50)) || now > end + Duration::from_secs(1) {
                    break;
                }
            }
        }
        out.duration_s = spec.duration.as_secs_f64();
        if let Some(r) = spec.rate_pps {
            out.generator_limited = out.offered_pps() < 0.99 * r;
        } else {
            out.generator_limited = true;
        }
        tick(&out);
        out
    }

    /// One receive burst: returns how many frames it took.
    fn receive(&mut self, link: &mut Link, out: &mut TrialOutcome, latency: bool, checked: &mut u64) -> usize {
        let n = link.rx.rx_burst(&mut self.rx, BURST);
        if n == 0 {
            return 0;
        }
        let now = self.now_ns();
        let mut arp_replies: Vec<Vec<u8>> = Vec::new();
        for mut m in self.rx.drain(..) {
            match plan::classify(m.data()) {
                Received::ToEndpoint { flow, segment } => {
                    *checked += 1;
                    let sums = (*checked).is_multiple_of(self.checksum_every);
                    match plan::check_to_endpoint(&self.plan, link.dut, m.data(), flow, sums) {
                        Ok(snat) => {
                            if link.dut == Dut::Torii {
                                let seen = &mut link.snat[flow as usize];
                                if *seen != 0 && *seen != snat {
                                    out.snat_changed += 1;
                                }
                                *seen = snat;
                            }
                            match segment {
                                Segment::Datagram | Segment::Data => {}
                                Segment::Syn => plan::set_tcp_flags(m.data_mut(), Segment::SynAck),
                                Segment::Ack => {
                                    out.handshake_acks += 1;
                                    continue;
                                }
                                Segment::SynAck | Segment::Other => {
                                    out.problem(format!("flow {flow}: unexpected {segment:?} at the endpoint"));
                                    continue;
                                }
                            }
                            plan::reflect(m.data_mut());
                            self.back.push(m);
                            out.reflected += 1;
                        }
                        Err(e) => out.problem(e),
                    }
                }
                Received::ToClient { flow, trial, tx_ns, segment } => {
                    if trial != self.trial {
                        out.late += 1;
                        continue;
                    }
                    *checked += 1;
                    let sums = (*checked).is_multiple_of(self.checksum_every);
                    if let Err(e) = plan::check_to_client(&self.plan, m.data(), flow, sums) {
                        out.problem(e);
                        continue;
                    }
                    match segment {
                        Segment::Datagram | Segment::Data => {}
                        Segment::SynAck => {
                            // The client completes the handshake: the buffer becomes its ACK.
                            let flen = self.plan.frame_len();
                            let off = flow as usize * flen;
                            if m.set_len(0) && m.extend_from_slice(&self.templates[off..off + flen]) {
                                plan::set_tcp_flags(m.data_mut(), Segment::Ack);
                                plan::stamp(self.plan.protocol, m.data_mut(), self.trial, now);
                                self.back.push(m);
                            }
                        }
                        Segment::Syn | Segment::Ack | Segment::Other => {
                            out.problem(format!("flow {flow}: unexpected {segment:?} at the client"));
                            continue;
                        }
                    }
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
                Received::Arp => {
                    if let Some(reply) = vhost::arp_reply(m.data(), |ip| self.plan.mac_of(ip)) {
                        arp_replies.push(reply);
                        out.arp_answered += 1;
                    }
                }
                Received::Other => out.other += 1,
            }
        }
        if !self.back.is_empty() {
            link.tx.tx_burst(&mut self.back);
            out.reflect_refused += self.back.len() as u64;
            self.back.clear();
        }
        for reply in arp_replies {
            if let Some(mut m) = self.pool.alloc() {
                if m.extend_from_slice(&reply) {
                    let mut one = vec![m];
                    link.tx.tx_burst(&mut one);
                }
            }
        }
        n
    }
}
