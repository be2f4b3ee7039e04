//! The schedulers through [`process`]: two workers sharing one [`Shared`], new flows on
//! either, the endpoint each gets (`rr` and `lc` across workers, `lc` following TCP state
//! and expiry, the hashing ones stable, `random` spreading, affinity above a scheduler).

use super::*;
use crate::scheduler::{Endpoint, Load, Scheduler};

const WEB: [&str; 3] = ["10.70.0.11", "10.70.0.12", "10.70.0.13"];

/// Two workers of a gateway on `scheduler`, sharing state (returned too).
fn workers(scheduler: Scheduler) -> (Shared, Vec<WorkerState>) {
    let mut host = Host::new(&Config::embedded_default(), &[GW_FRONT_MAC, GW_BACK_MAC]);
    host.scheduler = scheduler;
    let host = Arc::new(host);
    let shared = Shared::new(64, 1024);
    for last in [11u8, 12, 13, 21] {
        shared.neighbours.learn(Ipv4Addr::new(10, 70, 0, last), backend_mac(last), 0);
    }
    let w = (0..2).map(|w| WorkerState::new(w, 2, Arc::clone(&host), &shared, 1024, 7 + w as u64)).collect();
    (shared, w)
}

/// Sends `flags` from client port `port` to the VIP on worker `port % 2`; the endpoint
/// the frame was sent to.
fn send(t: &Table, ws: &mut [WorkerState], now: u64, port: u16, flags: TcpFlags) -> Ipv4Addr {
    let frame = frames::tcp(to_gw(), (CLIENT.0, port), (VIP, 80), flags, 1, 0, &[], 64);
    let (v, out) = run(now, &frame, FRONT, t, &mut ws[usize::from(port % 2)]);
    assert!(matches!(v, Verdict::Transmit { .. }), "port {port}: {v:?}");
    backend_of(&out)
}

fn load(shared: &Shared, last: u8) -> Load {
    let addr = Ipv4Addr::new(10, 70, 0, last).to_ipv6_mapped().octets();
    shared.schedulers.connections.load(&Endpoint { protocol: 6, addr, port: 8080 })
}

#[test]
fn round_robin_cycles_across_workers() {
    let (_, mut ws) = workers(Scheduler::Rr);
    let t = table(&WEB);
    let got: Vec<Ipv4Addr> = (0..9).map(|k| send(&t, &mut ws, 0, 20000 + k, TcpFlags::SYN)).collect();
    let want: Vec<Ipv4Addr> = (0..9).map(|k| ip(WEB[k % 3])).collect();
    assert_eq!(got, want);
}

#[test]
fn least_connections_follows_tcp_state_on_every_worker() {
    let (shared, mut ws) = workers(Scheduler::Lc);
    let t = table(&WEB);
    // Connections picked up mid-stream are ESTABLISHED at once: active. On alternating
    // workers, each goes to the endpoint with the fewest, ties to the first in table order.
    let got: Vec<Ipv4Addr> = (0..6).map(|k| send(&t, &mut ws, 0, 20000 + k, TcpFlags::ACK)).collect();
    assert_eq!(got, [0, 1, 2, 0, 1, 2].map(|i| ip(WEB[i])));
    assert_eq!(load(&shared, 11), Load { active: 2, inactive: 0, weight: 1 });
    // A SYN's flow is inactive (SYN_SENT) until established: it weighs 1/256 of an active one.
    assert_eq!(send(&t, &mut ws, 0, 20006, TcpFlags::SYN), ip(WEB[0]));
    assert_eq!(load(&shared, 11), Load { active: 2, inactive: 1, weight: 1 });
    assert_eq!(send(&t, &mut ws, 0, 20007, TcpFlags::SYN), ip(WEB[1]));
    // A RST ends web1's first connection (port 20000): web1 has fewest active again.
    send(&t, &mut ws, 0, 20000, TcpFlags::RST);
    assert_eq!(load(&shared, 11).active, 1);
    assert_eq!(send(&t, &mut ws, 0, 20008, TcpFlags::ACK), ip(WEB[0]));
    // A FIN moves an established connection to inactive.
    send(&t, &mut ws, 0, 20001, TcpFlags::FIN | TcpFlags::ACK);
    assert_eq!(load(&shared, 12), Load { active: 1, inactive: 2, weight: 1 });
    // Expiry returns every count.
    for w in &mut ws {
        while poll_expire(100_000 * SEC, 1024, w) > 0 {}
    }
    for last in [11, 12, 13] {
        assert_eq!(load(&shared, last), Load { active: 0, inactive: 0, weight: 1 }, "10.70.0.{last}");
    }
}

#[test]
fn hashing_schedulers_agree_across_workers() {
    for s in [Scheduler::Sh, Scheduler::Dh, Scheduler::Maglev] {
        let (_, mut ws) = workers(s);
        let t = table(&WEB);
        let got: std::collections::HashSet<Ipv4Addr> =
            (0..20).map(|k| send(&t, &mut ws, 0, 20000 + k, TcpFlags::SYN)).collect();
        match s {
            // One client, one front door: one endpoint, whatever the worker.
            Scheduler::Sh | Scheduler::Dh => assert_eq!(got.len(), 1, "{s}: {got:?}"),
            // The 5-tuple hash spreads one client's connections.
            _ => assert!(got.len() > 1, "{s}: {got:?}"),
        }
    }
}

#[test]
fn random_spreads_and_affinity_stays_above_it() {
    let (_, mut ws) = workers(Scheduler::Random);
    let t = table(&WEB);
    let got: std::collections::HashSet<Ipv4Addr> =
        (0..30).map(|k| send(&t, &mut ws, 0, 20000 + k, TcpFlags::SYN)).collect();
    assert_eq!(got.len(), 3, "{got:?}");
    let sticky = table_with_affinity(&WEB, Some(60));
    let got: std::collections::HashSet<Ipv4Addr> =
        (0..30).map(|k| send(&sticky, &mut ws, SEC, 30000 + k, TcpFlags::SYN)).collect();
    assert_eq!(got.len(), 1, "sessionAffinity: ClientIP above random: {got:?}");
}
