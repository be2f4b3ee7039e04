//! Every committed input of the fuzz targets' corpora (`gateway/fuzz/corpus/<target>/`)
//! replayed through the targets' bodies ([`torii_gateway::fuzz`]) on the stable toolchain:
//! a regression test of what the fuzzers check (no panic; `process_burst` gives each frame
//! the bytes and verdict `process` gives it; an accepted table answers every lookup) over
//! the inputs that reached new code when they ran, and a guard that the targets still
//! build against the crate. A failing input is named. About 2 s in release.

use std::path::{Path, PathBuf};

/// The files of corpus `target`, sorted by name; fails when there are none (a moved or
/// emptied corpus must not pass as a replay of nothing).
fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(files.len() >= 100, "{}: {} inputs, expected the committed corpus", dir.display(), files.len());
    files
}

/// Runs `body` on every input of corpus `target`, naming the input it panics on.
fn replay(target: &str, body: fn(&[u8])) {
    for path in corpus(target) {
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if let Err(panic) = std::panic::catch_unwind(|| body(&data)) {
            eprintln!("{target}: input {} fails", path.display());
            std::panic::resume_unwind(panic);
        }
    }
}

#[test]
fn pipeline_process_corpus() {
    replay("pipeline_process", torii_gateway::fuzz::pipeline_process);
}

#[test]
fn table_validate_corpus() {
    replay("table_validate", torii_gateway::fuzz::table_validate);
}
