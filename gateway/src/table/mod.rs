//! The table ABI (in progress).
mod spec;
pub use spec::*;
