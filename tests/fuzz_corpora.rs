//! Every committed input of the fuzz targets' corpora (`gateway/fuzz/corpus/<target>/`,
//! `control/fuzz/corpus/<target>/`) replayed through the targets' bodies
//! ([`torii_gateway::fuzz`], [`torii_control::fuzz`]) on the stable toolchain: a regression
//! test of what the fuzzers check (no panic; `process_burst` leaves what `process` leaves;
//! an accepted table answers every lookup; an accepted configuration builds the host; every
//! compiled table builds and validates, and the incremental compiler equals the pure one)
//! over the inputs that reached new code when they ran, and a guard that the targets still
//! build against the crates. A failing input is named. About 2 s in release.

use std::path::{Path, PathBuf};

/// The corpus directory `dir`, relative to the repository root.
fn corpus(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir)
}

/// Runs `body` on every input of the corpus in `dir` (relative to the repository root), in
/// name order, naming the input it panics on; returns what it returned. Fails when the
/// corpus has fewer than `at_least` inputs: a moved or emptied corpus must not pass as a
/// replay of nothing.
fn replay<R>(dir: &str, at_least: usize, body: fn(&[u8]) -> R) -> Vec<R> {
    let dir = corpus(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(files.len() >= at_least, "{}: {} inputs, expected the committed corpus", dir.display(), files.len());
    files
        .iter()
        .map(|path| {
            let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            std::panic::catch_unwind(|| body(&data)).unwrap_or_else(|panic| {
                eprintln!("input {} fails", path.display());
                std::panic::resume_unwind(panic)
            })
        })
        .collect()
}

#[test]
fn pipeline_process_corpus() {
    replay("gateway/fuzz/corpus/pipeline_process", 1000, torii_gateway::fuzz::pipeline_process);
}

#[test]
fn table_validate_corpus() {
    replay("gateway/fuzz/corpus/table_validate", 100, torii_gateway::fuzz::table_validate);
}

#[test]
fn gateway_config_corpus() {
    const DIR: &str = "gateway/fuzz/corpus/gateway_config";
    replay(DIR, 10, torii_gateway::fuzz::gateway_config);
    // The named seeds (`gateway/examples/fuzz_seeds.rs`): the corpus must reach past the
    // checks, and the two bad ones stay refused.
    let dir = corpus(DIR);
    let accepted = |name: &str| {
        let data = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("seed {name}: {e}"));
        torii_gateway::fuzz::gateway_config(&data)
    };
    for name in ["default", "minimal", "vlans", "routers", "neighbours", "metrics", "bgp", "l2"] {
        assert!(accepted(name), "seed {name} is a valid configuration");
    }
    for name in ["bad-vlan", "bad-neighbour"] {
        assert!(!accepted(name), "seed {name} is refused");
    }
}

#[test]
fn compile_manifests_corpus() {
    let front_doors: usize =
        replay("control/fuzz/corpus/compile_manifests", 80, torii_control::fuzz::compile_manifests).into_iter().sum();
    // The seeds are the compile fixtures (`control/examples/fuzz_seeds.rs`): together they
    // publish hundreds of front doors, so the corpus reaches the compiler.
    assert!(front_doors >= 100, "the corpus compiled to {front_doors} front doors");
}
