//! Embeds a digest of the simulator's sources (policy, simulator and glue crates, Cargo.lock) as
//! `IOSCHED_SOURCE_DIGEST`: part of every run id, so a changed simulator never reuses stored results.

use std::fs;
use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// FNV-1a, 64 bits: enough to tell source trees apart (not a security boundary).
fn fnv1a(hash: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *hash ^= u64::from(*b);
        *hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
}

fn main() {
    let here = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let crates = here.parent().unwrap().to_path_buf();
    let root = crates.parent().unwrap().to_path_buf();
    let mut inputs = Vec::new();
    for krate in ["iosched-policy", "iosched-sim", "iosched-py"] {
        let dir = crates.join(krate);
        files(&dir.join("src"), &mut inputs);
        inputs.push(dir.join("Cargo.toml"));
        println!("cargo:rerun-if-changed={}", dir.join("src").display());
        println!(
            "cargo:rerun-if-changed={}",
            dir.join("Cargo.toml").display()
        );
    }
    inputs.push(root.join("Cargo.lock"));
    println!(
        "cargo:rerun-if-changed={}",
        root.join("Cargo.lock").display()
    );
    // Relative paths, sorted: the digest is the same in every checkout of the same sources.
    let mut named: Vec<(String, PathBuf)> = inputs
        .into_iter()
        .filter(|p| p.is_file())
        .map(|p| {
            (
                p.strip_prefix(&root)
                    .unwrap_or(&p)
                    .to_string_lossy()
                    .replace('\\', "/"),
                p,
            )
        })
        .collect();
    named.sort();
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for (name, path) in named {
        fnv1a(&mut hash, name.as_bytes());
        fnv1a(&mut hash, &[0]);
        fnv1a(&mut hash, &fs::read(&path).unwrap_or_default());
        fnv1a(&mut hash, &[0]);
    }
    println!("cargo:rustc-env=IOSCHED_SOURCE_DIGEST={hash:016x}");
}
