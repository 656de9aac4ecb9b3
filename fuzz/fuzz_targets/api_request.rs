#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| maestro_fuzz::api_request(data));
