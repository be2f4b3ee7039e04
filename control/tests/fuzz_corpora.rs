//! Every committed input of the control plane's fuzz corpus (`control/fuzz/corpus/
//! compile_manifests/`) replayed through the target's body
//! ([`torii_control::fuzz::compile_manifests`]) on the stable toolchain: a regression test
//! of what the fuzzer checks (no panic; every compiled table builds and validates; the
//! incremental compiler equals the pure one) over the inputs that reached new code when
//! it ran, and a guard that the target still builds against the crate. A failing input is
//! named.

use std::path::{Path, PathBuf};

#[test]
fn compile_manifests_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/compile_manifests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    // The seeds alone are 83 (`examples/fuzz_seeds.rs`): a moved or emptied corpus must not
    // pass as a replay of nothing.
    assert!(files.len() >= 80, "{}: {} inputs, expected the committed corpus", dir.display(), files.len());
    let mut front_doors = 0;
    for path in files {
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        match std::panic::catch_unwind(|| torii_control::fuzz::compile_manifests(&data)) {
            Ok(n) => front_doors += n,
            Err(panic) => {
                eprintln!("compile_manifests: input {} fails", path.display());
                std::panic::resume_unwind(panic);
            }
        }
    }
    // The seeds are the compile fixtures: together they publish hundreds of front doors.
    assert!(front_doors >= 100, "the corpus compiled to {front_doors} front doors");
    eprintln!("{front_doors} front doors compiled");
}
