//! torii-control: the control plane of torii. Kubernetes objects in, versioned service
//! tables out.
//!
//! The crate is a pure core between two impure edges:
//! - [`source`]: where objects come from ([`source::files`]: a manifests directory,
//!   loaded whole and watched; [`source::kube`]: the Kubernetes API, listed and watched
//!   with kube-rs). Sources deliver k8s-openapi objects and the errors of whatever they
//!   skipped.
//! - [`model`]: validation into normalised Services, EndpointSlices and Nodes; an invalid
//!   object is skipped with an error naming it and the field, everything else is served.
//! - [`compile`]: the pure, deterministic compiler (kube-proxy's semantics) from model to
//!   front doors and backends; its [`compile::Compiled`] is the JSON `torii-control
//!   compile` prints and converts to the table ABI's
//!   [`TableSpec`](torii_table::TableSpec) (crate torii-table, shared with the gateway;
//!   torii-control never depends on the data plane crate).
//! - [`publish`]: the only code that writes shared memory.
//! - [`config`]: the shared configuration file as torii-control reads it (`[control]`,
//!   validated here, and the keys both binaries read).
//! - [`status`]: `torii-control status`, the live table read back from shared memory.
//! - [`daemon`]: `torii-control run`'s loop: snapshots in, tables published, the
//!   gateway's acknowledgements and the network-programming latency measured.
//! - [`l2`]: L2 mode's owner election, one Kubernetes Lease per VIP held for the gateway.
//! - `fuzz` (with the `fuzz` feature only): the body of the fuzz target (`control/fuzz/`):
//!   manifests in, the pure and the incremental compile compared, the table checked by the
//!   gateway's validator.
//!
//! Failure semantics (DESIGN.md): bad input never stops the others from being served, and
//! a table that cannot be built or published leaves the last good one in place.

pub mod compile;
pub mod config;
pub mod daemon;
#[cfg(feature = "fuzz")]
pub mod fuzz;
pub mod l2;
pub mod model;
pub mod publish;
pub mod source;
pub mod status;

use std::path::Path;

use compile::{CompileOptions, Compiled};
use source::{Loaded, SourceError};

/// Validates and compiles one source snapshot. [`Compiled::errors`] lists, in order, the
/// source's errors (files and documents skipped), the model's (objects skipped) and the
/// compiler's (front doors skipped).
pub fn compile_loaded(loaded: &Loaded, options: &CompileOptions) -> Compiled {
    let (objects, rejected) = model::Objects::from_kube(&loaded.objects);
    let mut compiled = compile::compile(&objects, options);
    let mut errors: Vec<String> = loaded.errors.iter().map(ToString::to_string).collect();
    errors.extend(rejected.iter().map(|r| match loaded.locations.get(r.index) {
        Some(location) => format!("{location}: {}; {} skipped", r.error, r.skipped.as_str()),
        None => format!("{}; {} skipped", r.error, r.skipped.as_str()),
    }));
    errors.append(&mut compiled.errors);
    compiled.errors = errors;
    compiled
}

/// Loads, validates and compiles a manifests directory: what `torii-control compile`
/// prints.
///
/// # Errors
/// Only when the directory itself cannot be listed; everything else that is wrong is in
/// [`Compiled::errors`].
pub fn compile_dir(dir: &Path, options: &CompileOptions) -> Result<Compiled, SourceError> {
    compile_dir_with(dir, options, &source::files::Limits::default())
}

/// [`compile_dir`] with the manifests source's `limits` (file size, nesting depth).
///
/// # Errors
/// As [`compile_dir`].
pub fn compile_dir_with(
    dir: &Path,
    options: &CompileOptions,
    limits: &source::files::Limits,
) -> Result<Compiled, SourceError> {
    let loaded = source::files::load_dir_cached(dir, limits, &mut source::files::FileCache::one_shot())?;
    Ok(compile_loaded(&loaded, options))
}
