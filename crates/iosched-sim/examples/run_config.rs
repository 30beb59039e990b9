//! Run a SimConfig JSON file and print a one-line speed summary (for profiling the simulator without Python);
//! `run_config CONFIG.json RESULT.json` also writes the SimResult.
fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: run_config CONFIG.json [RESULT.json]");
    let text = std::fs::read_to_string(&path).expect("readable config");
    let config: iosched_sim::SimConfig = serde_json::from_str(&text).expect("valid config");
    let started = std::time::Instant::now();
    let result = iosched_sim::simulate(&config, &mut |_| true).expect("simulation runs");
    let wall = started.elapsed().as_secs_f64();
    if let Some(out) = std::env::args().nth(2) {
        let json = serde_json::to_string(&result).expect("a result serialises");
        std::fs::write(&out, json).expect("a writable result path");
    }
    println!(
        "{} I/Os, {} events, {:.3} s wall, {:.2} M I/Os per wall second",
        result.ios_completed,
        result.events,
        wall,
        result.ios_completed as f64 / wall / 1e6
    );
}
