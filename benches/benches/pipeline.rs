//! Criterion benchmarks of the data plane's core, `pipeline::process`, without I/O: ns per
//! packet with 10 000 front doors and 1 K or 1 M active flows in the worker's
//! conntrack, for IPv4 and for IPv6 (see `torii_benches::dataplane` for the gateways, the
//! flows and the streams).
//!
//! ```sh
//! cargo bench -p torii-benches --bench pipeline
//! cargo bench -p torii-benches --bench pipeline -- 1000000       # only the 1 M flows cases
//! cargo bench -p torii-benches --bench pipeline -- 'frame6|tcp6|udp6'  # only IPv6
//! ```
//!
//! Benchmarks, each once with 1 000 and once with 1 000 000 active flows
//! (`pipeline/<name>/<flows>`); every packet is copied from its receive slot into the
//! working buffer first, since `process` rewrites it in place:
//!
//! - `frame_copy`: that copy alone (the baseline to subtract);
//! - `tcp_established_original`: client → VIP ACK segments of pseudo-randomly chosen
//!   established flows (conntrack hit, DNAT + SNAT, next hop);
//! - `tcp_established_reply`: endpoint → SNAT address ACK segments (hit on the reply
//!   tuple, reverse NAT back to the client);
//! - `tcp_syn_new_flow`: SYNs with fresh tuples: conntrack miss, front door lookup among
//!   the 10 000, Maglev choice, SNAT port, insert. The active flows stay constant: the
//!   flows are timed in batches of [`BATCH`] and, untimed after each batch, removed again
//!   as expiry would remove them (`Fixture::forget`), so the table neither fills nor grows;
//! - `udp_original` and `udp_reply`: datagrams of established UDP flows (a UDP fixture with
//!   as many UDP flows);
//! - each of these but `frame_copy` again as `<name>_burst32` and `<name>_burst256`: bursts
//!   of 32 packets (one DPDK receive burst) and of 256 (the worker's vector,
//!   `torii_gateway::worker::VECTOR`) through `process_burst` (its software pipeline of
//!   hashing, prefetching and processing), times and rates per packet;
//! - all of the above again for IPv6, with a `6` after the protocol: `frame6_copy`,
//!   `tcp6_established_original`, `tcp6_established_reply`, `tcp6_syn_new_flow`,
//!   `udp6_original`, `udp6_reply` and their burst variants: an IPv6-only gateway of the same
//!   shape (10 000 IPv6 front doors, 20 back links with an IPv6 SNAT address each), 74-byte
//!   frames (Ethernet, IPv6 and TCP headers; UDP datagrams as long) in 128-byte slots. The
//!   IPv4 fixtures and gateway are dropped before the IPv6 ones are built.
//!
//! Times are the benchmark thread's CPU time (`support/cpu_time.rs`): the machine is shared.
//!
//! Each benchmark checks afterwards from the worker's counters that it measured what it
//! says: no drops, and new flows only in `tcp_syn_new_flow` (`tcp6_syn_new_flow`), one per
//! packet.

// `criterion_group!` defines an undocumented public function.
#![allow(missing_docs)]

#[path = "support/cpu_time.rs"]
mod cpu_time;

use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use cpu_time::ThreadCpuTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use torii_benches::dataplane::{Burst, Family, Fixture, Gateway, Kind, Stream, Transport, BUFFER_LEN, BURST, VECTOR};
use torii_gateway::counters::DropReason;

/// SYNs per timed batch in `tcp_syn_new_flow`.
const BATCH: u64 = 1024;

/// Receive slots of the established streams: 64 Ki for 1 K flows, 1 Mi (64 MiB) for 1 M.
fn stream_len(flows: usize) -> usize {
    (flows.next_power_of_two()).clamp(1 << 16, 1 << 20)
}

/// Runs one benchmark of packets from `stream` on established flows, one `process` call
/// per packet, then the same with `process_burst` over bursts of [`BURST`] and of
/// [`VECTOR`] (`<name>_burst32`, `<name>_burst256`); checks the counters afterwards.
fn established<A: Family>(
    g: &mut BenchmarkGroup<'_, ThreadCpuTime>,
    name: &str,
    fx: &mut Fixture<A>,
    mut stream: Stream<A>,
) {
    let mut buf = vec![0u8; BUFFER_LEN];
    let before = fx.state.counters.clone();
    g.throughput(Throughput::Elements(1));
    g.bench_with_input(BenchmarkId::new(name, fx.flows()), &(), |b, ()| {
        b.iter(|| {
            let v = fx.process(&mut stream, &mut buf);
            black_box(&mut buf);
            black_box(v)
        });
    });
    for len in [BURST, VECTOR] {
        let mut burst = Burst::new(len);
        g.throughput(Throughput::Elements(len as u64));
        g.bench_with_input(BenchmarkId::new(format!("{name}_burst{len}"), fx.flows()), &(), |b, ()| {
            b.iter(|| {
                fx.process_burst(&mut stream, &mut burst);
                black_box(&mut burst.verdicts);
            });
        });
    }
    g.throughput(Throughput::Elements(1));
    let after = &fx.state.counters;
    assert_eq!(after.new_flows, before.new_flows, "{name}: every packet must hit an active flow");
    for r in DropReason::ALL {
        assert_eq!(after.drops_of(r), before.drops_of(r), "{name}: dropped as {}", r.name());
    }
}

/// Runs `tcp_syn_new_flow` (`tcp6_…` for IPv6) and its burst variant on `fx`; checks the
/// counters afterwards.
fn syn<A: Family>(g: &mut BenchmarkGroup<'_, ThreadCpuTime>, fx: &mut Fixture<A>) {
    let name = format!("tcp{}_syn_new_flow", A::SUFFIX);
    let mut buf = vec![0u8; BUFFER_LEN];
    let mut stream = fx.stream(Kind::Syn, 1 << 16, 0);
    let before = fx.state.counters.clone();
    let mut packets = 0;
    g.bench_with_input(BenchmarkId::new(&name, fx.flows()), &(), |b, ()| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(BATCH);
                let first = stream.position();
                let t = cpu_time::now();
                for _ in 0..n {
                    let v = fx.process(&mut stream, &mut buf);
                    black_box(&mut buf);
                    black_box(v);
                }
                timed += cpu_time::now() - t;
                for k in 0..n as usize {
                    assert!(fx.forget(&stream, (first + k) % stream.len()), "every SYN opens a flow");
                }
                left -= n;
            }
            packets += iters;
            timed
        });
    });
    for len in [BURST, VECTOR] {
        let mut burst = Burst::new(len);
        g.throughput(Throughput::Elements(len as u64));
        g.bench_with_input(BenchmarkId::new(format!("{name}_burst{len}"), fx.flows()), &(), |b, ()| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let n = left.min((BATCH / len as u64).max(1));
                    let first = stream.position();
                    let t = cpu_time::now();
                    for _ in 0..n {
                        fx.process_burst(&mut stream, &mut burst);
                        black_box(&mut burst.verdicts);
                    }
                    timed += cpu_time::now() - t;
                    for k in 0..n as usize * len {
                        assert!(fx.forget(&stream, (first + k) % stream.len()), "every SYN opens a flow");
                    }
                    left -= n;
                }
                packets += iters * len as u64;
                timed
            });
        });
    }
    g.throughput(Throughput::Elements(1));
    let after = &fx.state.counters;
    assert_eq!(after.new_flows - before.new_flows, packets, "one new flow per SYN");
    assert_eq!(fx.conntrack().len(), fx.flows());
    for r in DropReason::ALL {
        assert_eq!(after.drops_of(r), before.drops_of(r), "{name}: dropped as {}", r.name());
    }
}

/// Every benchmark of family `A` (names with [`Family::SUFFIX`] after the protocol), with
/// 1 K and 1 M flows; the gateway and each fixture are dropped once measured.
fn family<A: Family>(g: &mut BenchmarkGroup<'_, ThreadCpuTime>) {
    let s = A::SUFFIX;
    let gateway = Arc::new(Gateway::<A>::new());
    for flows in [1_000, 1_000_000] {
        let len = stream_len(flows);
        let mut fx = Fixture::new(Arc::clone(&gateway), Transport::Tcp, flows);
        let mut copy = fx.stream(Kind::Original, len, 1);
        let mut buf = vec![0u8; BUFFER_LEN];
        g.bench_with_input(BenchmarkId::new(format!("frame{s}_copy"), flows), &(), |b, ()| {
            b.iter(|| {
                let loaded = copy.load(&mut buf);
                black_box(&mut buf);
                black_box(loaded)
            });
        });
        drop(copy);
        let original = fx.stream(Kind::Original, len, 1);
        established(g, &format!("tcp{s}_established_original"), &mut fx, original);
        let reply = fx.stream(Kind::Reply, len, 2);
        established(g, &format!("tcp{s}_established_reply"), &mut fx, reply);
        syn(g, &mut fx);
        drop(fx);

        let mut fx = Fixture::new(Arc::clone(&gateway), Transport::Udp, flows);
        let original = fx.stream(Kind::Original, len, 3);
        established(g, &format!("udp{s}_original"), &mut fx, original);
        let reply = fx.stream(Kind::Reply, len, 4);
        established(g, &format!("udp{s}_reply"), &mut fx, reply);
    }
}

fn pipeline(c: &mut Criterion<ThreadCpuTime>) {
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Elements(1)).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    family::<Ipv4Addr>(&mut g);
    family::<Ipv6Addr>(&mut g);
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = pipeline
}
criterion_main!(benches);
