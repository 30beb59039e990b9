//! `cargo fuzz run trace_parser`: any bytes through the trace reader (targets.rs).
#![no_main]

#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::trace_parser(data));
