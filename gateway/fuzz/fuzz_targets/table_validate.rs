//! `torii_gateway::fuzz::table_validate`: the table validator and the lookups of what it
//! accepts (the input format and the properties are documented there).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| torii_gateway::fuzz::table_validate(data));
