//! `cargo fuzz run sim_config`: any bytes as a SimConfig (targets.rs).
#![no_main]

#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::sim_config(data));
