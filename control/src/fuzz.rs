//! The body of the control plane's fuzz target (`control/fuzz/`, cargo-fuzz, nightly),
//! here so that the workspace's `tests/fuzz_corpora.rs` replays its committed corpus on
//! stable and the target cannot fall behind the crate.
//!
//! # Contract
//!
//! [`compile_manifests`] takes one fuzz input (any bytes) and returns when every property it
//! checks holds; it panics (the fuzzer's finding) when one does not. No I/O.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use torii_table::{build, Storage, Table};

use crate::compile::{CompileOptions, Compiler};
use crate::source::files::{parse_manifests_with, Limits};
use crate::source::Loaded;

/// Fuzzes the manifests parser and the compiler with snapshots of arbitrary manifests,
/// checking what the daemon relies on:
///
/// - parsing, validating and compiling never panic, whatever the text (a bad object, field
///   or document is skipped and reported: `crate::source::files`, `crate::model`);
/// - the table spec of every compile builds (`torii_table::build`, from scratch: the
///   daemon's builder that patches the previous table is tested against it elsewhere,
///   `crate::publish`), and the gateway's validator accepts the table
///   (`torii_table::Table::new`);
/// - the incremental compiler fed the snapshots one after another ([`Compiler::update`])
///   ends each one with exactly the pure path's result for it ([`crate::compile_loaded`])
///   and its table spec, as its contract says (the manifests source versions each object
///   by its content, so an edited object is never taken for one already held).
///
/// Input: `[options: u8][text]`. The text (UTF-8, invalid sequences replaced) is cut at
/// each NUL into up to four snapshots, applied in order; each is one manifests file, JSON
/// when bit 6 of `options` is set, else YAML (documents separated by `---`). The other bits
/// choose the compile options: bit 0 `cluster_ips`, bits 1–2 the gateway's Node name
/// (`gw-1`, `gw`, `other`, `node-2`: names the compile fixtures' Nodes carry), bit 3
/// the SNAT address 10.70.0.1, bit 4 `proxy_name = "torii"`, bit 5
/// `load_balancer_class = "torii"`.
///
/// Returns the front doors compiled, over all snapshots (for the corpus replay to show that
/// its inputs reach the compiler).
///
/// # Panics
///
/// When a property above does not hold.
pub fn compile_manifests(data: &[u8]) -> usize {
    let Some((&bits, text)) = data.split_first() else { return 0 };
    let options = CompileOptions {
        node_name: ["gw-1", "gw", "other", "node-2"][usize::from(bits >> 1 & 3)].into(),
        cluster_ips: bits & 1 != 0,
        proxy_name: (bits & 0x10 != 0).then(|| "torii".into()),
        load_balancer_class: (bits & 0x20 != 0).then(|| "torii".into()),
        snat_addresses: if bits & 8 != 0 { vec![IpAddr::V4(Ipv4Addr::new(10, 70, 0, 1))] } else { vec![] },
        ..CompileOptions::default()
    };
    let path = Path::new(if bits & 0x40 != 0 { "fuzz.json" } else { "fuzz.yaml" });
    let text = String::from_utf8_lossy(text);
    let mut compiler = Compiler::new(options.clone());
    let mut front_doors = 0;
    for (i, snapshot) in text.split('\0').take(4).enumerate() {
        let mut loaded = Loaded::default();
        parse_manifests_with(path, snapshot, &Limits::default(), &mut loaded);
        let expected = crate::compile_loaded(&loaded, &options);
        let spec = expected.to_table_spec();
        let bytes =
            build(&spec, 1).unwrap_or_else(|e| panic!("snapshot {i}: the compiled table spec does not build: {e}"));
        if let Err(e) = Table::new(Storage::Owned(bytes)) {
            panic!("snapshot {i}: the gateway refuses the compiled table: {e}");
        }
        compiler.update(&loaded);
        assert_eq!(compiler.compiled(), &expected, "snapshot {i}: the incremental compile");
        assert_eq!(compiler.table_spec(), &spec, "snapshot {i}: the incremental table spec");
        front_doors += spec.frontends.len();
    }
    front_doors
}
