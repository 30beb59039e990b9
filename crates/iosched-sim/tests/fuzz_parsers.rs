//! The fuzz targets of `crates/iosched-sim/fuzz` (trace reader, SimConfig parser) under stable, as part of
//! `cargo test`: proptest mutates the shipped sample traces and a real config (a few thousand cases, about a
//! second), where `cargo fuzz` (nightly features) explores from the same seeds for as long as it is let run.

mod common;

#[path = "../fuzz/targets.rs"]
mod targets;

use proptest::prelude::*;

/// A small deterministic generator for the mutations (proptest draws its seed).
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 17
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INSERTS: &[&[u8]] = &[
    b"\0",
    b"\xff\xfe",
    b"\xc3",
    b",",
    b"\n",
    b" ",
    b"-1",
    b"18446744073709551615",
    b"18446744073709551616",
    b"99999999999999999999999",
    b"1e400",
    b"nan",
    b".",
    b"+ 8",
    b"W",
    b"R",
    b"Read",
    b"Write",
    b"Q",
    b"D",
    b"259,0",
    b"CPU0 (vdi):",
    b"\r\n",
    b"\xef\xbb\xbf",
];

fn mutate(data: &[u8], mix: &mut Mix) -> Vec<u8> {
    let mut b = data.to_vec();
    for _ in 0..1 + mix.below(4) {
        let at = mix.below(b.len() + 1);
        match mix.below(5) {
            0 if !b.is_empty() => {
                let i = at.min(b.len() - 1);
                b[i] ^= 1 << mix.below(8);
            }
            1 => {
                let ins = INSERTS[mix.below(INSERTS.len())];
                b.splice(at..at, ins.iter().copied());
            }
            2 => {
                let end = (at + 1 + mix.below(30)).min(b.len());
                b.drain(at.min(end)..end);
            }
            3 => b.truncate(at),
            _ => {
                // a line repeated
                let lines: Vec<&[u8]> = b.split(|&c| c == b'\n').collect();
                let i = mix.below(lines.len());
                let mut out = Vec::new();
                for (k, l) in lines.iter().enumerate() {
                    out.extend_from_slice(l);
                    out.push(b'\n');
                    if k == i {
                        out.extend_from_slice(l);
                        out.push(b'\n');
                    }
                }
                b = out;
            }
        }
    }
    b
}

fn sample_trace(index: usize, lines: usize) -> Vec<u8> {
    let names = [
        "systor17-vdi-4lun.csv",
        "msr-vdi-4disk.csv",
        "blkparse-vdi-4dev.txt",
    ];
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../traces")
        .join(names[index % names.len()]);
    let text = std::fs::read_to_string(&path).expect("the sample traces");
    let mut head: Vec<u8> = Vec::new();
    for line in text.lines().take(lines) {
        head.extend_from_slice(line.as_bytes());
        head.push(b'\n');
    }
    head
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn traces_are_read_or_refused_never_a_panic(which in 0usize..3, lines in 0usize..80, selector in any::<[u8; 2]>(),
                                                seed in any::<u64>()) {
        let mut mix = Mix(seed);
        let mut input = selector.to_vec();
        input.extend(mutate(&sample_trace(which, lines), &mut mix));
        targets::trace_parser(&input);
    }

    #[test]
    fn configs_are_parsed_or_refused_never_a_panic(seed in any::<u64>()) {
        let mut mix = Mix(seed);
        let mut value = serde_json::to_value(base_config()).unwrap();
        for _ in 0..1 + mix.below(3) {
            mutate_value(&mut value, &mut mix);
        }
        let text = serde_json::to_vec(&value).unwrap();
        targets::sim_config(&text);
        targets::sim_config(&mutate(&text, &mut mix));
    }
}

fn base_config() -> iosched_sim::SimConfig {
    let mut job = common::job(
        "a",
        iosched_sim::config::Rw::Randrw,
        4096,
        8,
        2,
        &[0, 1],
        &[0],
    );
    job.runtime_ns = 2_000_000;
    job.ramp_ns = 0;
    let mut config = common::seed000(1, vec![job]);
    config.sample_interval_ns = 1_000_000;
    config
}

/// Replace one leaf of the JSON (a number, string, bool or array) with an extreme or a wrong type, or drop a key.
fn mutate_value(v: &mut serde_json::Value, mix: &mut Mix) {
    use serde_json::{json, Value};
    match v {
        Value::Object(m) if !m.is_empty() && mix.below(4) != 0 => {
            let keys: Vec<String> = m.keys().cloned().collect();
            let key = &keys[mix.below(keys.len())];
            if mix.below(12) == 0 {
                m.remove(key);
            } else {
                mutate_value(m.get_mut(key).unwrap(), mix);
            }
            return;
        }
        Value::Array(a) if !a.is_empty() && mix.below(4) != 0 => {
            let i = mix.below(a.len());
            mutate_value(&mut a[i], mix);
            return;
        }
        _ => {}
    }
    let extremes = [
        json!(0),
        json!(1),
        json!(-1),
        json!(u32::MAX),
        json!(u32::MAX as u64 + 1),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(1e300),
        json!(0.5),
        json!("x"),
        json!(""),
        json!(null),
        json!(true),
        json!([]),
        json!({}),
        json!([0, 1, 99]),
        json!("legacy"),
        json!("sata"),
        json!("preconditioned"),
    ];
    *v = extremes[mix.below(extremes.len())].clone();
}
