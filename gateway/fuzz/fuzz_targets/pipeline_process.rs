//! `torii_gateway::fuzz::pipeline_process`: `pipeline::process` and `process_burst` on
//! sequences of frames (the input format and the properties are documented there).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| torii_gateway::fuzz::pipeline_process(data));
