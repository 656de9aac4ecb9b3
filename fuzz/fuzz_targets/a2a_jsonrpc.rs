#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| maestro_fuzz::a2a_jsonrpc(data));
