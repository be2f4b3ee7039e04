//! torii-gateway: the data plane of torii, a Kubernetes Service gateway.
//!
//! The crate is a pure core with drivers around it:
//! - [`wire`]: checked zero-copy views over Ethernet, 802.1Q tags, ARP, IPv4, ICMPv4, TCP and UDP,
//!   and Internet checksums (RFC 1071, RFC 1624). No I/O, no allocation.
//! - [`table`]: the shared-memory table ABI that torii-control publishes and the gateway
//!   validates and adopts (layout, builder, validated view, publication files) — the
//!   `torii-table` crate, which both binaries depend on, re-exported under this name.
//! - [`maglev`]: Maglev consistent-hash rings (Eisenbud et al., NSDI 2016, §3.4), part of
//!   the table ABI (`torii_table::maglev`).
//! - [`scheduler`]: the endpoint schedulers (IPVS's `rr`, `lc`, `sh`, …, Maglev, random) and
//!   the connection counts and turns they share across workers.
//! - [`conntrack`]: the per-worker flow table (both directions, fixed capacity, idle expiry).
//! - [`fragments`]: the per-worker table that lets later IP fragments follow their first.
//! - [`pipeline`]: `process(now, frame, meta, table, worker_state) -> Verdict`, the one
//!   function every packet goes through, whatever driver received it.
//! - [`io`] and [`worker`]: the drivers (AF_PACKET) and the poll loop around the core.
//! - [`counters`] and [`metrics`]: per-worker and per-front-door counters, served as
//!   Prometheus metrics with a health check over HTTP.
//! - [`config`]: the gateway host's TOML configuration.
//! - [`announce`]: VIP announcement over BGP through BIRD 2, and graceful drain.
//! - [`l2`]: L2 mode, one gateway per VIP answering ARP/NDP, announced on takeover.
//! - [`prefetch`]: the cache prefetch hint of the burst path (`torii_table::prefetch`, which
//!   the table's lookups issue too).
//! - `fuzz` (with the `fuzz` feature only): the fuzz targets' bodies (`gateway/fuzz/`),
//!   which the tests also replay over the committed corpora.

pub mod affinity;
pub mod announce;
pub mod config;
pub mod conntrack;
pub mod counters;
pub mod fragments;
pub mod frames;
#[cfg(feature = "fuzz")]
pub mod fuzz;
pub mod host;
pub mod io;
pub mod l2;
pub mod limiter;
mod memory;
pub mod metrics;
pub mod nat;
pub mod neighbour;
pub mod pipeline;
pub mod poll_times;
pub mod scheduler;
pub mod snat;
pub mod wire;
pub mod worker;

pub use torii_table as table;
pub use torii_table::{maglev, prefetch};
