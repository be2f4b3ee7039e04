//! torii-control (in progress).
pub mod publish;
