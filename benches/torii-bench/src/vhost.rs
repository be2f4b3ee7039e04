//! The vhost-user side of a kernel-free link, shared by torii-bench and the virtio
//! integration test's peer (`tests/src/bin/vhost_peer.rs`): EAL arguments for a process
//! that serves `net_vhost` ports on unix sockets, opening such a port, waiting for the
//! `net_virtio_user` client (torii-gateway, testpmd) to connect, and answering ARP and
//! IPv6 Neighbor Solicitations for the addresses the process plays.
//!
//! Both processes of a link need the same kind of memory ([`Memory`]): hugepages with
//! `--single-file-segments` (else vhost-user runs out of memory regions), or none.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::{Duration, Instant};

use torii_dpdk::{Eal, Mempool, Port, PortConfig};
use torii_gateway::frames::{self, L2};
use torii_gateway::wire::ndp::{FLAG_OVERRIDE, FLAG_SOLICITED};
use torii_gateway::wire::{
    ArpOperation, ArpPacket, EtherType, EthernetFrame, Icmpv6Type, Ipv6Packet, MacAddr, NdpPacket,
};

use crate::dut::Memory;

/// Descriptors per queue of a vhost port.
pub const DESCRIPTORS: u16 = 1024;

/// EAL arguments for a process with one lcore on `cpu`, its own file prefix, and a
/// `net_vhost<k>` server port on each of `sockets` with `queues` queue pairs (the
/// virtio-user client asks for as many: `queues=N` on both sides).
pub fn eal_args(file_prefix: &str, cpu: usize, sockets: &[&Path], queues: u16, memory: Memory) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "--file-prefix".into(),
        file_prefix.into(),
        "-l".into(),
        cpu.to_string(),
        "--no-pci".into(),
        "--no-telemetry".into(),
        "--log-level=*:notice".into(),
    ];
    for (k, s) in sockets.iter().enumerate() {
        a.push("--vdev".into());
        a.push(format!("net_vhost{k},iface={},queues={queues}", s.display()));
    }
    a.extend(memory.eal_args());
    a
}

/// Configures and starts `net_vhost<k>` (the name EAL gave the k-th socket) with
/// `queues` RX and TX queues of [`DESCRIPTORS`], receiving into `pool`.
///
/// # Errors
/// When the port does not exist or DPDK refuses a step.
pub fn open_port(eal: &Eal, name: &str, pool: &Mempool, queues: u16) -> torii_dpdk::Result<Port> {
    let mut port = Port::by_name(eal, name)?;
    port.configure(queues, queues, &PortConfig::default())?;
    for q in 0..queues {
        port.setup_rx_queue(q, DESCRIPTORS, pool)?;
        port.setup_tx_queue(q, DESCRIPTORS)?;
    }
    port.start()?;
    Ok(port)
}

/// Waits until a virtio-user client has connected to `port` (its link is up).
///
/// # Errors
/// When none has by `timeout`, or the link state cannot be read.
pub fn wait_link(port: &Port, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while !port.link()?.up {
        if Instant::now() > deadline {
            anyhow::bail!("no virtio-user device connected to {} within {timeout:?}", port.name());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The ARP reply to `frame` if it is an ARP request for an address `mac_of` plays.
pub fn arp_reply(frame: &[u8], mac_of: impl Fn(Ipv4Addr) -> Option<MacAddr>) -> Option<Vec<u8>> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EtherType::Arp {
        return None;
    }
    let arp = ArpPacket::new_checked(eth.payload()).ok()?;
    if arp.operation() != ArpOperation::Request {
        return None;
    }
    let who = arp.target_protocol_addr();
    let mac = mac_of(who)?;
    Some(frames::arp(
        L2 { src: mac, dst: arp.sender_hardware_addr() },
        ArpOperation::Reply,
        mac,
        who,
        arp.sender_hardware_addr(),
        arp.sender_protocol_addr(),
    ))
}

/// The Neighbor Advertisement answering `frame` if it is a valid Neighbor Solicitation
/// for an address `mac_of` plays ([RFC 4861] § 7.2.4: solicited, override, the target's
/// link-layer address; to the solicitation's source, or to all nodes when that is the
/// unspecified address, as in duplicate address detection).
///
/// [RFC 4861]: https://www.rfc-editor.org/rfc/rfc4861#section-7.2.4
pub fn ndp_reply(frame: &[u8], mac_of: impl Fn(IpAddr) -> Option<MacAddr>) -> Option<Vec<u8>> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EtherType::Ipv6 {
        return None;
    }
    let ip = Ipv6Packet::new_checked(eth.payload()).ok()?;
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let ns = NdpPacket::new_checked(ip.payload()).ok()?;
    if ns.msg_type() != Icmpv6Type::NeighborSolicit || ns.validate(ip.hop_limit(), src, dst).is_err() {
        return None;
    }
    let target = ns.target_addr();
    let mac = mac_of(target.into())?;
    let (to, flags) = if src.is_unspecified() {
        (std::net::Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1), FLAG_OVERRIDE)
    } else {
        (src, FLAG_SOLICITED | FLAG_OVERRIDE)
    };
    Some(frames::ndp(
        L2 { src: mac, dst: eth.src_addr() },
        target,
        to,
        Icmpv6Type::NeighborAdvert,
        flags,
        target,
        Some(mac),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_requests_for_played_addresses_only() {
        let asker = MacAddr([2, 0, 0, 0, 0, 1]);
        let mine = MacAddr([2, 0, 0, 0, 0, 9]);
        let req = |target| {
            frames::arp(
                L2 { src: asker, dst: MacAddr::BROADCAST },
                ArpOperation::Request,
                asker,
                Ipv4Addr::new(10, 0, 0, 1),
                MacAddr([0; 6]),
                target,
            )
        };
        let played = |ip: Ipv4Addr| (ip == Ipv4Addr::new(10, 0, 0, 9)).then_some(mine);
        let reply = arp_reply(&req(Ipv4Addr::new(10, 0, 0, 9)), played).expect("a reply");
        let eth = EthernetFrame::new_checked(&reply[..]).unwrap();
        assert_eq!((eth.src_addr(), eth.dst_addr()), (mine, asker));
        let arp = ArpPacket::new_checked(eth.payload()).unwrap();
        assert_eq!(arp.operation(), ArpOperation::Reply);
        assert_eq!((arp.sender_hardware_addr(), arp.sender_protocol_addr()), (mine, Ipv4Addr::new(10, 0, 0, 9)));
        assert_eq!(arp.target_protocol_addr(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(arp_reply(&req(Ipv4Addr::new(10, 0, 0, 8)), played), None);
        assert_eq!(arp_reply(&reply, played), None, "a reply is not answered");
    }

    #[test]
    fn answers_neighbor_solicitations_for_played_addresses_only() {
        let asker = MacAddr([2, 0, 0, 0, 0, 1]);
        let mine = MacAddr([2, 0, 0, 0, 0, 9]);
        let (gw, played): (std::net::Ipv6Addr, std::net::Ipv6Addr) =
            ("fd00:70::1".parse().unwrap(), "fd00:70::1:2".parse().unwrap());
        let ns = |target: std::net::Ipv6Addr| {
            let g = target.segments();
            let snm = std::net::Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00 | (g[6] & 0xff), g[7]);
            frames::ndp(
                L2 { src: asker, dst: MacAddr([0x33, 0x33, 0xff, 0, 0, 0]) },
                gw,
                snm,
                Icmpv6Type::NeighborSolicit,
                0,
                target,
                Some(asker),
            )
        };
        let mac_of = |ip: IpAddr| (ip == IpAddr::V6(played)).then_some(mine);
        let na = ndp_reply(&ns(played), mac_of).expect("an advertisement");
        let eth = EthernetFrame::new_checked(&na[..]).unwrap();
        assert_eq!((eth.src_addr(), eth.dst_addr()), (mine, asker));
        let ip = Ipv6Packet::new_checked(eth.payload()).unwrap();
        assert_eq!((ip.src_addr(), ip.dst_addr()), (played, gw));
        let adv = NdpPacket::new_checked(ip.payload()).unwrap();
        adv.validate(ip.hop_limit(), ip.src_addr(), ip.dst_addr()).expect("a valid advertisement");
        assert_eq!(
            (adv.msg_type(), adv.flags(), adv.target_addr()),
            (Icmpv6Type::NeighborAdvert, FLAG_SOLICITED | FLAG_OVERRIDE, played)
        );
        assert_eq!(adv.link_layer_option(torii_gateway::wire::ndp::OPTION_TARGET_LL_ADDR), Some(mine));
        assert_eq!(ndp_reply(&ns("fd00:70::1:3".parse().unwrap()), mac_of), None);
        assert_eq!(ndp_reply(&na, mac_of), None, "an advertisement is not answered");
    }

    #[test]
    fn eal_args_name_one_port_per_socket() {
        let a = eal_args("p", 1, &[Path::new("/s0"), Path::new("/s1")], 1, Memory::NoHuge);
        let s = a.join(" ");
        assert!(s.contains("--file-prefix p -l 1"), "{s}");
        assert!(s.contains("--vdev net_vhost0,iface=/s0,queues=1 --vdev net_vhost1,iface=/s1,queues=1"), "{s}");
        assert!(s.ends_with("--no-huge -m 256 --no-shconf"), "{s}");
    }
}
