//! torii-table: the table ABI, how torii-control hands the data plane its service tables.
//!
//! A table is an immutable snapshot — front doors with the client ranges they admit
//! (`loadBalancerSourceRanges`), backend sets with their draining endpoints, Maglev
//! rings, names — laid out for the lookups of the packet path ([`layout`]), produced from a
//! [`TableSpec`] by [`build`] (or, reusing the previous build's work, by a
//! [`TableBuilder`]), validated once by [`Table::new`] and then read in place.
//! [`shm`] defines the publication protocol in shared memory: snapshot files named by
//! generation, and a state region holding the published generation and one
//! acknowledgement slot per worker. torii-control writes; the gateway only reads and acks.
//! [`stats`] is the other way round: the gateway's per-front-door counters, which
//! `torii-control status` reads.
//!
//! The crate is self-contained so that both binaries depend on it and torii-control never
//! on the data plane: it also holds what the ABI needs — address prefixes ([`cidr`]), the
//! Maglev rings the table stores and the lookup that reads them ([`maglev`]), the prefetch
//! hint its lookups issue ([`prefetch`]) — and the part of the shared configuration file
//! both binaries read ([`config`]), and L2 mode's two small files between them ([`l2`]).

mod build;
pub mod cidr;
pub mod config;
mod index;
pub mod l2;
pub mod layout;
pub mod maglev;
pub mod prefetch;
pub mod shm;
mod spec;
pub mod stats;
mod storage;
mod view;

pub use build::{build, merge_byte_ranges, BuildError, BuildStats, TableBuilder, Touched};
pub use index::FrontendHash;
pub use spec::*;
pub use storage::{Mapping, Storage};
pub use view::{
    Content, FrontendContent, FrontendRef, Ring, ServiceContent, ServiceRef, ServiceRing, SourceRanges, Table,
    TableError,
};
