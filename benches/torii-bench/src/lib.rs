//! torii-bench: the line-rate harness. A DPDK generator and sink in its own process that
//! plays the clients and the endpoints of a set of Services (IPv4 or IPv6, on one link or,
//! two-armed, on a client link and an endpoint link), against torii-gateway on
//! `net_virtio_user` and, in the same run and on the same core, its baselines: testpmd's
//! io forwarding on the same kind of pipe (the do-nothing ceiling, which is also the
//! generator's own ceiling), the Linux kernel with kube-proxy's nftables rules and
//! torii's own AF_PACKET driver, each on a veth pair. It finds NDR and PDR of requests
//! (RFC 2544 § 26.1, FD.io CSIT) and of new TCP connections (RFC 8219 § 7) by a search
//! ([`search`]), measures latency at a fraction of NDR with an HDR histogram (RFC 2544 § 26.2),
//! checks what comes back, and writes the results as JSON, a table and SVG plots.
//! docs/benchmarking.md describes the method.
//!
//! - [`plan`]: addresses, manifests, the gateway's configuration, frames and checks (pure);
//! - [`search`]: the NDR/PDR search (pure);
//! - [`traffic`]: the generator and sink on a DPDK port;
//! - [`dut`]: the processes under test;
//! - [`kernel`]: the Linux kernel baseline (kube-proxy's nftables rules on a veth pair);
//! - [`report`]: the JSON result and the summary table;
//! - [`plot`]: the plots (throughput against flows, latency percentiles) as SVG;
//! - [`vhost`]: the `net_vhost` side of the link (EAL arguments, ports, ARP answers),
//!   shared with the virtio integration test's peer.

pub mod dut;
pub mod kernel;
pub mod plan;
pub mod plot;
pub mod report;
pub mod search;
pub mod traffic;
pub mod vhost;
