//! Writes the seed corpus of the control plane's fuzz target (`control/fuzz/`,
//! [`torii_control::fuzz::compile_manifests`]) from the compile fixtures
//! (`tests/fixtures/compile/*/`): each fixture's manifests as one snapshot (YAML documents
//! joined by `---`, or its JSON lists concatenated) under each of the four Node names the
//! target chooses from, ClusterIPs served under every other one; and each fixture followed
//! by the next of the same format (two snapshots, so that the incremental compiler sees one
//! change into the other), with the SNAT address 10.70.0.1 set.
//!
//! `cargo run -p torii-control --features fuzz --example fuzz_seeds` (from the repository root).

use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut fixtures = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(root.join("tests/fixtures/compile"))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    dirs.sort();
    for dir in dirs.iter().filter(|d| d.is_dir()) {
        let mut files: Vec<_> = std::fs::read_dir(dir)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
        files.sort();
        let of = |ext: &str| -> std::io::Result<Vec<String>> {
            files.iter().filter(|f| f.extension().is_some_and(|e| e == ext)).map(std::fs::read_to_string).collect()
        };
        let (yaml, json) = (of("yaml")?, of("json")?);
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("fixture").to_owned();
        if !yaml.is_empty() {
            fixtures.push((name.clone(), false, yaml.join("\n---\n")));
        }
        if !json.is_empty() {
            fixtures.push((format!("{name}-json"), true, json.concat()));
        }
    }
    let out = root.join("fuzz/corpus/compile_manifests");
    std::fs::create_dir_all(&out)?;
    let json_bit = |json: bool| if json { 0x40u8 } else { 0 };
    for (i, (name, json, text)) in fixtures.iter().enumerate() {
        for node in 0..4u8 {
            // Node name (bits 1-2), ClusterIPs served on every other one (bit 0).
            let options = json_bit(*json) | node << 1 | node & 1;
            std::fs::write(out.join(format!("{name}-node{node}")), [&[options][..], text.as_bytes()].concat())?;
        }
        let (next_name, next_json, next) = &fixtures[(i + 1) % fixtures.len()];
        if next_json == json {
            let two = [&[json_bit(*json) | 8][..], text.as_bytes(), b"\0", next.as_bytes()].concat();
            std::fs::write(out.join(format!("{name}-then-{next_name}")), two)?;
        }
    }
    println!("seeds written under {}", out.display());
    Ok(())
}
