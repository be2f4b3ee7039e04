//! Instructions per frame of the software redirect's owner test under RSS
//! (`torii_gateway::io::redirect::Rule::Rss`): what a DPDK worker pays on every frame it
//! receives from a port steered by RSS, to find the ICMP errors and fragments that belong
//! to another worker. Counted by callgrind, like `instructions`:
//!
//! ```sh
//! cargo build --release -p torii-benches --example redirect_owner
//! valgrind --tool=callgrind --toggle-collect='redirect_owner::timed' \
//!     target/release/examples/redirect_owner tcp
//! ```
//!
//! Argument: the frames (`tcp`: established TCP segments, 64 bytes, what nearly every frame
//! is; `fragment`: the fragments of UDP datagrams, first and later; `icmp`: ICMP errors
//! quoting TCP). Divide the "I refs" callgrind prints by the frames this prints. The
//! owner's queue function stands in for `rte_softrss` (not counted: a fragment's or an
//! error's cost only, which are rare; a plain frame never calls it).

use std::net::Ipv4Addr;
use std::sync::Arc;

use torii_gateway::frames::{self, L2};
use torii_gateway::io::redirect::{FlowTuple, Mesh, QueueOf, Redirect, Rule};
use torii_gateway::wire::{Icmpv4Type, MacAddr, TcpFlags};

const L: L2 = L2 { src: MacAddr([2, 0, 0, 0, 0, 1]), dst: MacAddr([2, 0, 0, 0, 0, 2]) };
const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const SNAT: Ipv4Addr = Ipv4Addr::new(10, 70, 0, 1);
const ENDPOINT: Ipv4Addr = Ipv4Addr::new(10, 70, 0, 11);
/// Frames per round, and rounds.
const FRAMES: usize = 1024;
const ROUNDS: usize = 100;

fn main() {
    let kind = std::env::args().nth(1).unwrap_or_else(|| "tcp".into());
    let frames: Vec<Vec<u8>> = match kind.as_str() {
        "tcp" => (0..FRAMES as u16)
            .map(|i| frames::tcp(L, (CLIENT, 1024 + i), (VIP, 80), TcpFlags::ACK, 1, 2, b"", 64))
            .collect(),
        "fragment" => (0..FRAMES as u16 / 4)
            .flat_map(|i| {
                let d = frames::udp(L, (ENDPOINT, 53), (SNAT, 1024 + i), &[7; 100], 64);
                frames::ipv4_fragments(&d, i, 32)
            })
            .collect(),
        "icmp" => (0..FRAMES as u16)
            .map(|i| {
                let sent = frames::tcp(L, (SNAT, 1024 + i), (ENDPOINT, 8080), TcpFlags::ACK, 1, 2, b"", 64);
                frames::icmp_error(L, ENDPOINT, SNAT, Icmpv4Type::DstUnreachable, 4, 1400, &sent[14..], 64)
            })
            .collect(),
        other => panic!("unknown frames {other:?}: tcp, fragment or icmp"),
    };
    let queue_of: QueueOf = Arc::new(|t: &FlowTuple| usize::from(t.dst_port));
    let mut r = Redirect::<()>::new(Mesh::new(2, 1, 64), 0, Rule::Rss(queue_of));
    let mut owners = [0usize; 2];
    for _ in 0..ROUNDS {
        timed(&mut r, &frames, &mut owners);
    }
    println!("{kind}: {} frames, owners {owners:?}", ROUNDS * frames.len());
}

/// One round of owner tests: what callgrind counts.
#[inline(never)]
fn timed(r: &mut Redirect<()>, frames: &[Vec<u8>], owners: &mut [usize; 2]) {
    for f in frames {
        owners[r.owner(std::hint::black_box(f))] += 1;
    }
}
