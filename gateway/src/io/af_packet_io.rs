//! [`PacketIo`] over AF_PACKET: one [`AfPacketSocket`] per port for one worker.
//!
//! Frames are processed where the kernel put them, in the `TPACKET_V3` receive ring
//! ([`AfPacketSocket::rx_frames`]): the vector is a list of [`RingFrame`]s, and a forwarded
//! frame is copied once, into the transmit ring of its egress port
//! ([`AfPacketSocket::tx_send`]). The receive blocks a vector used go back to the kernel
//! when the vector ends ([`PacketIo::tx_vector`]).

// One unsafe call: `rx_frames`, whose frames must not outlive the release of their blocks.
// This adapter keeps them only in its vector, which `tx_vector` empties before releasing.
#![allow(unsafe_code)]

use std::time::Duration;

use super::af_packet::{AfPacketSocket, PacketStatistics, RingFrame};
use crate::metrics::PortReport;
use crate::pipeline::{Meta, Verdict};
use crate::worker::{PacketIo, Received, Vector, VECTOR};

/// A worker's AF_PACKET sockets, indexed like the configured ports ([`crate::config::Config::ports`]).
pub struct AfPacketIo {
    /// Declared (so dropped) before `sockets`: no frame outlives its socket.
    vector: Vector<RingFrame>,
    /// The port the vector's frames came from.
    vector_iface: usize,
    sockets: Vec<AfPacketSocket>,
}

impl AfPacketIo {
    /// Wraps one worker's sockets (`sockets[p]` on port `p`).
    pub fn new(sockets: Vec<AfPacketSocket>) -> Self {
        Self { vector: Vector::default(), vector_iface: 0, sockets }
    }
}

impl PacketIo for AfPacketIo {
    type Buf = RingFrame;

    fn interfaces(&self) -> usize {
        self.sockets.len()
    }

    fn rx(&mut self, iface: usize, max: usize) -> Received {
        let Some(s) = self.sockets.get_mut(iface) else { return Received::default() };
        debug_assert!(self.vector.is_empty() || self.vector_iface == iface, "one port per vector");
        self.vector_iface = iface;
        let max = max.min(VECTOR - self.vector.len());
        let vector = &mut self.vector;
        // SAFETY: the frames go into `self.vector` only; `tx_vector` empties it before it
        // releases this socket's blocks, and it is dropped before the sockets.
        let (taken, oversize) = unsafe {
            s.rx_frames(max, |frame, len, flags| {
                let meta = Meta {
                    iface: iface as u8,
                    len,
                    l4_csum_partial: flags.csum_not_ready,
                    l4_csum_good: flags.csum_valid,
                    ..Meta::default()
                };
                vector.push(frame, meta);
            })
        };
        Received { taken, oversize, ..Received::default() }
    }

    fn vector(&mut self) -> (&mut [RingFrame], &[Meta]) {
        self.vector.parts()
    }

    fn tx_vector(&mut self, verdicts: &[Verdict]) -> usize {
        let sockets = &mut self.sockets;
        let mut refused = 0;
        self.vector.drain(verdicts, |frame, verdict| {
            if let Verdict::Transmit { iface, len } = verdict {
                let frame = frame.as_ref().get(..len);
                if !sockets.get_mut(usize::from(iface)).zip(frame).is_some_and(|(s, f)| s.tx_send(f)) {
                    refused += 1;
                }
            }
        });
        if let Some(s) = self.sockets.get_mut(self.vector_iface) {
            s.release_rx();
        }
        refused
    }

    fn tx_copy(&mut self, iface: usize, frame: &[u8]) -> bool {
        self.sockets.get_mut(iface).is_some_and(|s| s.tx_send(frame))
    }

    fn flush(&mut self) -> usize {
        for s in &mut self.sockets {
            if let Err(e) = s.tx_flush() {
                tracing::warn!("AF_PACKET transmit failed: {e}");
            }
        }
        // Frames the kernel did not take yet stay in the transmit ring for the next flush.
        0
    }

    fn wait(&mut self, timeout: Duration) {
        // Share the timeout between the interfaces: a frame on any of them is picked up
        // within timeout / n (plus the 1 ms block retire timeout of TPACKET_V3).
        let n = self.sockets.len().max(1) as u32;
        let ms = (timeout / n).as_millis().clamp(1, i32::MAX as u128) as i32;
        for s in &self.sockets {
            if matches!(s.wait_readable(ms), Ok(true)) {
                return;
            }
        }
    }
}

/// The AF_PACKET ports' device counters for the metrics ([`PortReport`]), read on the
/// gateway's main thread: the receive-ring drops of every worker's socket
/// (`PACKET_STATISTICS` through [`PacketStatistics`] handles; the kernel resets them on
/// each read, so they are summed here) and the kernel's view of the interface from sysfs
/// (`operstate`, `speed`, `statistics/{rx,tx}_{packets,errors}`).
#[derive(Debug)]
pub struct AfPacketDevices {
    ports: Vec<DevicePort>,
}

#[derive(Debug)]
struct DevicePort {
    name: String,
    /// One handle per worker's socket.
    sockets: Vec<PacketStatistics>,
    /// Drops per worker's socket so far.
    drops: Vec<u64>,
}

impl AfPacketDevices {
    /// `ports[p]`: port `p`'s interface name and the statistics handles of its sockets,
    /// by worker.
    pub fn new(ports: Vec<(String, Vec<PacketStatistics>)>) -> Self {
        let ports = ports
            .into_iter()
            .map(|(name, sockets)| DevicePort { name, drops: vec![0; sockets.len()], sockets })
            .collect();
        Self { ports }
    }

    /// Reads the counters (a few system calls per port: call it about once a second).
    pub fn reports(&mut self) -> Vec<PortReport> {
        self.ports
            .iter_mut()
            .map(|p| {
                for (s, d) in p.sockets.iter().zip(&mut p.drops) {
                    if let Ok((_, drops)) = s.read() {
                        *d += u64::from(drops);
                    }
                }
                let sys = |file: &str| std::fs::read_to_string(format!("/sys/class/net/{}/{file}", p.name)).ok();
                let number = |file: &str| sys(file).and_then(|v| v.trim().parse::<i64>().ok());
                let counter = |file: &str| number(&format!("statistics/{file}")).map_or(0, |v| v.max(0) as u64);
                PortReport {
                    name: p.name.clone(),
                    device: p.name.clone(),
                    link_up: sys("operstate").and_then(|s| match s.trim() {
                        "up" => Some(true),
                        "down" | "lowerlayerdown" | "notpresent" => Some(false),
                        _ => None,
                    }),
                    speed_mbps: number("speed").and_then(|v| u32::try_from(v).ok()).unwrap_or(0),
                    rx_packets: counter("rx_packets"),
                    tx_packets: counter("tx_packets"),
                    rx_missed: p.drops.iter().sum(),
                    rx_nombuf: 0,
                    rx_errors: counter("rx_errors"),
                    tx_errors: counter("tx_errors"),
                    queue_drops: p.drops.clone(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, UdpSocket};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;
    use crate::config::Config;
    use crate::frames;
    use crate::host::Host;
    use crate::io::af_packet::test_net::{self, VethNs};
    use crate::io::af_packet::RingConfig;
    use crate::pipeline::{Shared, WorkerState};
    use crate::table::shm::{Mappings, StateRegion};
    use crate::table::{
        build, BackendSpec, FrontendKind, FrontendSpec, Protocol, ServiceSpec, Storage, Table, TableSpec,
    };
    use crate::wire::{Ipv4Packet, MacAddr, UdpPacket};
    use crate::worker::{TableHandle, Worker};

    /// The VIP 203.0.113.10 UDP 7 → the endpoint 198.51.100.20:7007.
    fn table() -> Table {
        let spec = TableSpec {
            frontends: vec![FrontendSpec {
                addr: "203.0.113.10".parse().unwrap(),
                port: 7,
                protocol: Protocol::Udp,
                kind: FrontendKind::ExternalIp,
                service: 0,
                source_ranges: vec![],
            }],
            services: vec![ServiceSpec {
                name: "demo/echo:echo".into(),
                backends: vec![BackendSpec { addr: "198.51.100.20".parse().unwrap(), port: 7007 }],
                affinity_timeout_s: None,
                draining: vec![],
            }],
        };
        Table::new(Storage::Owned(build(&spec, 1).unwrap())).unwrap()
    }

    /// A worker on AF_PACKET port `b` serves a client on VLAN 100 (tagged frames sent
    /// and read on `a` through an AF_PACKET socket: this kernel may lack 802.1Q devices)
    /// and a kernel endpoint untagged on `a`. The receiving kernel strips the client's tags
    /// into auxdata, the worker restores them; the datagram is translated from VLAN 100 to
    /// the untagged link, the endpoint's echo back onto VLAN 100, with the gateway
    /// resolving the endpoint by ARP on the untagged link.
    #[test]
    fn a_client_on_a_vlan_reaches_a_kernel_endpoint_through_the_worker() {
        let ns = match VethNs::create("afp-vlan-e2e") {
            Ok(ns) => ns,
            Err(reason) => return test_net::skip(&reason),
        };
        ns.must(&["addr", "add", "198.51.100.20/24", "dev", "a"]);
        let dir = std::env::temp_dir().join(format!("torii-vlan-e2e-{}", std::process::id()));
        let config = Config::from_toml(&format!(
            "node_name = \"t\"\nshm_dir = {dir:?}\ndriver = \"af_packet\"\n\
             [[interfaces]]\nname = \"b\"\naddresses = [\"198.51.100.1/24\"]\n\
             [[interfaces]]\nname = \"b\"\nvlan = 100\naddresses = [\"192.0.2.1/24\"]\n\
             [snat]\naddresses = [\"198.51.100.1\"]\n"
        ))
        .unwrap();
        assert_eq!(config.ports.len(), 1);
        let client: (Ipv4Addr, u16) = (Ipv4Addr::new(192, 0, 2, 10), 40000);
        let vip: (Ipv4Addr, u16) = (Ipv4Addr::new(203, 0, 113, 10), 7);
        let (counters, reply) = ns.run(|| {
            let socket = AfPacketSocket::open("b", &RingConfig::default()).expect("open b");
            let mut peer = AfPacketSocket::open("a", &RingConfig::default()).expect("open a");
            let (gw_mac, client_mac) = (MacAddr(socket.mac_addr()), MacAddr(peer.mac_addr()));
            let host = Arc::new(Host::new(&config, &[gw_mac]));
            let shared = Shared::new(16, 16);
            let stop = Arc::new(AtomicBool::new(false));
            let worker = Worker {
                state: WorkerState::new(0, 1, host, &shared, 1024, 1),
                tables: Arc::new(TableHandle::new(table())),
                mappings: Mappings::new(Arc::new(StateRegion::open(&dir).expect("state region")), 1),
                stop: Arc::clone(&stop),
                export: Arc::default(),
                epoch: Instant::now(),
            };
            // Threads spawned here inherit this thread's network namespace.
            std::thread::scope(|s| {
                let running = s.spawn(move || worker.run(&mut AfPacketIo::new(vec![socket])));
                let endpoint = UdpSocket::bind("198.51.100.20:7007").unwrap();
                endpoint.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
                let echo = s.spawn(move || {
                    let mut buf = [0u8; 1500];
                    let mut peers = Vec::new();
                    while let Ok((n, from)) = endpoint.recv_from(&mut buf) {
                        endpoint.send_to(&buf[..n], from).unwrap();
                        peers.push(from);
                    }
                    peers
                });
                let l2 = frames::L2 { src: client_mac, dst: gw_mac };
                let datagram = frames::tagged(&frames::udp(l2, client, vip, b"over VLAN 100", 64), 0x8100, 100);
                let mut reply = None;
                // The first datagrams may wait on ARP for the endpoint: resend until answered.
                for _ in 0..10 {
                    assert!(peer.tx_send(&datagram) && peer.tx_flush().is_ok());
                    let deadline = Instant::now() + Duration::from_millis(300);
                    while reply.is_none() && Instant::now() < deadline {
                        peer.rx_burst(64, |f, flags| {
                            let tagged = flags.vlan_tci.map(|tci| frames::tagged(f, flags.vlan_tpid, tci));
                            if let Some(f) =
                                tagged.filter(|f| f.len() >= 18 + 20 && f[18 + 16..18 + 20] == [192, 0, 2, 10])
                            {
                                reply = Some(f);
                            }
                        });
                        let _ = peer.wait_readable(10);
                    }
                    if reply.is_some() {
                        break;
                    }
                }
                stop.store(true, Ordering::Relaxed);
                let counters = running.join().unwrap();
                let peers = echo.join().unwrap();
                // The endpoint saw the SNAT address.
                assert!(!peers.is_empty() && peers.iter().all(|p| p.ip().to_string() == "198.51.100.1"), "{peers:?}");
                (counters, reply)
            })
        });
        let _ = std::fs::remove_dir_all(&dir);
        let reply = reply.unwrap_or_else(|| panic!("no echo through the gateway: {counters}"));
        // Tagged for VLAN 100, from the VIP to the client, TTL decremented, checksums
        // right (the IPv4 identification is the endpoint kernel's).
        assert_eq!(&reply[12..18], &[0x81, 0x00, 0x00, 100, 0x08, 0x00]);
        let ip = Ipv4Packet::new_checked(&reply[18..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!((ip.src_addr(), ip.dst_addr(), ip.hop_limit()), (vip.0, client.0, 63));
        let udp = UdpPacket::new_checked(ip.payload()).unwrap();
        assert!(udp.verify_checksum(vip.0, client.0));
        assert_eq!((udp.src_port(), udp.dst_port(), udp.payload()), (vip.1, client.1, &b"over VLAN 100"[..]));
        assert!(counters.forwarded_original >= 1 && counters.forwarded_reply >= 1, "{counters}");
        // The gateway resolved the endpoint (the endpoint's kernel learned the SNAT address
        // from that request, RFC 826, so it needed no ARP of its own).
        assert!(counters.arp_requests >= 1, "{counters}");
    }
}
