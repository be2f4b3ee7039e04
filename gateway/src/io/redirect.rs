//! Software redirect: every worker busy on ports without usable RSS (DPVS's redirect).
//!
//! Conntrack, SNAT ports and the fragment table are per worker, so every frame of a flow,
//! both directions, must be processed by the worker that owns the flow. A NIC with RSS
//! under torii's control delivers it there (the DPDK driver, `io::dpdk`, with `rte_thash`);
//! the kernel's `PACKET_FANOUT_CBPF` does for AF_PACKET ([`super::fanout`]). Ports that
//! cannot — `net_virtio_user` against a vhost-user switch without RSS, DPDK's
//! `net_af_packet` (whose fanout moves flows between queues), single-queue NICs — deliver a
//! frame to whichever RX queue they like. There the receiving worker computes the frame's
//! owner with the same pure rule the kernel program uses ([`fanout::owner_of_frame`]: the
//! original direction by a hash of the tuple, replies to a SNAT address by
//! [`fanout::owner_of_port`], ICMP errors by the flow they quote, anything without ports by
//! its source address, non-IP to worker 0) and hands frames it does not own to their owner
//! over a bounded lock-free ring, which the owner drains on its next receive from that
//! port. The owner processes the frame as if it had received it and transmits it on its own
//! TX queue; the buffer goes back to the pool it came from when the device is done with it.
//!
//! The rings form a [`Mesh`]: one per (port, sending worker, receiving worker), so each has
//! a single producer and a single consumer (`crossbeam_queue::ArrayQueue`, bounded,
//! lock-free), and a worker drains one port's rings when it receives from that port (the
//! worker's vector holds the frames of one port). A full ring drops the frame, counted
//! ([`crate::counters::DropReason::RedirectRingFull`]); redirected frames are counted by
//! the worker that sent them (`redirected`).
//!
//! The module is generic over what a ring carries (the DPDK driver sends the mbuf with its
//! [`crate::pipeline::Meta`]), so its tests need no DPDK.

use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

use super::fanout::{self, SnatRange};

/// Frames one ring holds: a few vectors' worth, so a burst of another worker's flows
/// waits while the owner finishes its vector.
pub const RING_CAPACITY: usize = 1024;

/// The rings between `workers` workers on `ports` ports: one per (port, from, to) with
/// `from != to`.
#[derive(Debug)]
pub struct Mesh<T> {
    workers: usize,
    rings: Box<[ArrayQueue<T>]>,
}

impl<T> Mesh<T> {
    /// The rings, each of `capacity` items (at least 1).
    pub fn new(workers: usize, ports: usize, capacity: usize) -> Arc<Self> {
        let rings = (0..ports * workers * workers).map(|_| ArrayQueue::new(capacity.max(1))).collect();
        Arc::new(Self { workers, rings })
    }

    /// The ring `from` fills and `to` drains for `port`.
    fn ring(&self, port: usize, from: usize, to: usize) -> Option<&ArrayQueue<T>> {
        self.rings.get((port * self.workers + from) * self.workers + to)
    }
}

/// One worker's end of the [`Mesh`], and the rule that says which frames are its own.
#[derive(Debug)]
pub struct Redirect<T> {
    mesh: Arc<Mesh<T>>,
    worker: usize,
    snat: SnatRange,
    /// Where the next drain starts (round robin over the senders, so none starves).
    next_from: usize,
}

impl<T> Redirect<T> {
    /// Worker `worker`'s end of `mesh`, owning the flows that [`fanout::owner_of_frame`]
    /// gives it under `snat` (the gateway's SNAT addresses and port range).
    pub fn new(mesh: Arc<Mesh<T>>, worker: usize, snat: SnatRange) -> Self {
        Self { mesh, worker, snat, next_from: 0 }
    }

    /// This worker.
    pub fn worker(&self) -> usize {
        self.worker
    }

    /// The worker that owns the Ethernet frame `frame`'s flow.
    #[inline]
    pub fn owner(&self, frame: &[u8]) -> usize {
        fanout::owner_of_frame(frame, &self.snat, self.mesh.workers)
    }

    /// Hands `item` (a frame received on `port`) to worker `to`; gives it back when the
    /// ring is full (the caller frees and counts it).
    ///
    /// # Errors
    /// The item, when the ring has no room or `to`/`port` is out of range.
    #[inline]
    pub fn send(&self, port: usize, to: usize, item: T) -> Result<(), T> {
        match self.mesh.ring(port, self.worker, to) {
            Some(r) if to != self.worker => r.push(item),
            _ => Err(item),
        }
    }

    /// Takes up to `max` items the other workers handed this one for `port`, in each
    /// sender's order, passing each to `f`. Returns how many.
    #[inline]
    pub fn recv(&mut self, port: usize, max: usize, mut f: impl FnMut(T)) -> usize {
        let n = self.mesh.workers;
        let mut got = 0;
        for k in 0..n {
            let from = (self.next_from + k) % n;
            if from == self.worker {
                continue;
            }
            let Some(ring) = self.mesh.ring(port, from, self.worker) else { continue };
            while got < max {
                let Some(item) = ring.pop() else { break };
                f(item);
                got += 1;
            }
        }
        self.next_from = (self.next_from + 1) % n;
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::{self, L2};
    use crate::io::fanout::owner_of_port;
    use crate::wire::{Icmpv4Type, MacAddr, TcpFlags};
    use std::net::Ipv4Addr;

    const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
    const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
    const SNAT: Ipv4Addr = Ipv4Addr::new(10, 70, 0, 1);
    const ENDPOINT: Ipv4Addr = Ipv4Addr::new(10, 70, 0, 11);
    const L: L2 = L2 { src: MacAddr([2, 0, 0, 0, 0, 1]), dst: MacAddr([2, 0, 0, 0, 0, 2]) };

    fn snat() -> SnatRange {
        SnatRange { addrs: vec![SNAT], addrs6: vec![], port_min: 1024, port_max: 65535 }
    }

    fn ends(workers: usize, ports: usize, capacity: usize) -> Vec<Redirect<(usize, Vec<u8>)>> {
        let mesh = Mesh::new(workers, ports, capacity);
        (0..workers).map(|w| Redirect::new(Arc::clone(&mesh), w, snat())).collect()
    }

    /// Both directions of a full-NAT flow have one owner: the original direction by its
    /// tuple, the reply by the SNAT port that owner allocates (port % n), ICMP errors about
    /// either by the flow they quote; and the owners spread over the workers.
    #[test]
    fn both_directions_of_a_flow_have_one_owner() {
        for workers in [2usize, 3, 4] {
            let r = ends(workers, 1, 4);
            let mut per = vec![0usize; workers];
            for cport in 40000..40400u16 {
                let syn = frames::tcp(L, (CLIENT, cport), (VIP, 80), TcpFlags::SYN, 1, 0, b"", 64);
                let owner = r[0].owner(&syn);
                per[owner] += 1;
                for rx in &r {
                    assert_eq!(rx.owner(&syn), owner, "every worker agrees");
                }
                // The owner's SNAT port: any port p with p % n == owner.
                let sport = 1024
                    + (owner as u16 + workers as u16 - 1024 % workers as u16) % workers as u16
                    + 2 * workers as u16;
                assert_eq!(owner_of_port(sport, workers), owner);
                let reply =
                    frames::tcp(L, (ENDPOINT, 8080), (SNAT, sport), TcpFlags::SYN | TcpFlags::ACK, 1, 2, b"", 64);
                assert_eq!(r[1].owner(&reply), owner, "reply to SNAT port {sport}");
                // Frag-needed from a router on the endpoint side about a translated packet.
                let sent = frames::tcp(L, (SNAT, sport), (ENDPOINT, 8080), TcpFlags::ACK, 1, 2, b"", 64);
                let err = frames::icmp_error(L, ENDPOINT, SNAT, Icmpv4Type::DstUnreachable, 4, 1400, &sent[14..], 64);
                assert_eq!(r[0].owner(&err), owner, "ICMP error quoting SNAT port {sport}");
                // An ICMP error from the client side about the reply VIP → client.
                let back = frames::tcp(L, (VIP, 80), (CLIENT, cport), TcpFlags::ACK, 1, 2, b"", 64);
                let err = frames::icmp_error(L, CLIENT, VIP, Icmpv4Type::DstUnreachable, 3, 0, &back[14..], 64);
                assert_eq!(r[0].owner(&err), owner, "ICMP error quoting the reply of {cport}");
            }
            assert!(per.iter().all(|&c| c > 400 / workers / 2), "{workers} workers: {per:?}");
        }
    }

    #[test]
    fn rings_carry_frames_to_their_owner_in_order_and_refuse_when_full() {
        let mut r = ends(3, 2, 4);
        for k in 0..4 {
            r[0].send(1, 2, (k, vec![k as u8])).expect("room");
        }
        assert_eq!(r[0].send(1, 2, (9, vec![])), Err((9, vec![])), "full after 4");
        assert!(r[0].send(1, 0, (0, vec![])).is_err(), "not to itself");
        assert!(r[0].send(5, 1, (0, vec![])).is_err(), "no such port");
        r[1].send(1, 2, (10, vec![])).expect("another sender's ring");
        r[0].send(0, 2, (20, vec![])).expect("another port's ring");
        let mut got = Vec::new();
        assert_eq!(r[2].recv(1, 3, |(k, _)| got.push(k)), 3);
        assert_eq!(r[2].recv(1, 10, |(k, _)| got.push(k)), 2);
        got.sort_unstable();
        assert_eq!(got, [0, 1, 2, 3, 10]);
        assert_eq!(r[2].recv(1, 10, |_| panic!("empty")), 0);
        assert_eq!(r[1].recv(1, 10, |_| panic!("nothing for worker 1")), 0);
        let mut port0 = Vec::new();
        assert_eq!(r[2].recv(0, 10, |(k, _)| port0.push(k)), 1);
        assert_eq!(port0, [20]);
    }

    /// Two threads: one sends a numbered stream, the other receives it whole and in order.
    #[test]
    fn one_producer_one_consumer_across_threads() {
        let mut r = ends(2, 1, 64);
        let mut consumer = r.pop().expect("worker 1");
        let producer = r.pop().expect("worker 0");
        let t = std::thread::spawn(move || {
            let mut k = 0usize;
            while k < 100_000 {
                if producer.send(0, 1, (k, Vec::new())).is_ok() {
                    k += 1;
                } else {
                    std::thread::yield_now();
                }
            }
        });
        let mut next = 0usize;
        while next < 100_000 {
            consumer.recv(0, 32, |(k, _)| {
                assert_eq!(k, next);
                next += 1;
            });
        }
        t.join().expect("producer");
    }
}
