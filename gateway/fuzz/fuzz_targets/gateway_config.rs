//! `torii_gateway::fuzz::gateway_config`: the gateway's configuration file, and what the
//! gateway derives from an accepted one before it opens a device (the properties are
//! documented there).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    torii_gateway::fuzz::gateway_config(data);
});
