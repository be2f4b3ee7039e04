//! The table ABI: how torii-control hands the data plane its service tables.
//!
//! A table is an immutable snapshot — front doors with the client ranges they admit
//! (`loadBalancerSourceRanges`), backend sets with their draining endpoints, Maglev
//! rings, names — laid out for the lookups of the packet path ([`layout`]), produced from a
//! [`TableSpec`] by [`build`] (or, reusing the previous build's work, by a
//! [`TableBuilder`]), validated once by [`Table::new`] and then read in place.
//! [`shm`] defines the publication protocol in shared memory: snapshot files named by
//! generation, and a state region holding the published generation and one
//! acknowledgement slot per worker. torii-control writes; the gateway only reads and acks.

mod build;
mod index;
pub mod layout;
pub mod shm;
mod spec;
mod view;

pub use build::{build, merge_byte_ranges, BuildError, BuildStats, TableBuilder};
pub use index::FrontendHash;
pub use spec::*;
pub use view::{FrontendRef, Ring, ServiceRef, ServiceRing, SourceRanges, Storage, Table, TableError};
