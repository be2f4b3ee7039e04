//! `torii_control::fuzz::compile_manifests`: the manifests parser, the pure and the
//! incremental compile, and the gateway's validator on what they publish (the input format
//! and the properties are documented there).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    torii_control::fuzz::compile_manifests(data);
});
