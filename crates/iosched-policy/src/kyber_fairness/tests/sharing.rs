//! Kyber-fairness on a tiny closed-loop device: cgroups share it by weight.

use super::*;
use std::collections::HashMap;

// ---------------------------------------------------------------- a tiny device loop

/// A closed-loop process: keeps `depth` requests of `nr_sectors` outstanding while `running`.
struct Process {
    cgroup: u32,
    weight: u32,
    hctx: u32,
    depth: u32,
    op: Op,
    nr_sectors: u32,
    outstanding: u32,
    running: bool,
}

/// A device that takes every dispatched request into its queue and serves `slots` of them at a time, in
/// arrival order, `service_ns` each; the device-wide limit on what is dispatched is Kyber's tokens, as in the
/// simulator. A hardware queue is run after an insert on it, when a freed token wakes it, after a completion
/// that asks for it (all of them on RunAllQueues), and all of them after a timer.
struct Bench {
    kf: KyberFairness,
    nr_hctx: u32,
    processes: Vec<Process>,
    slots: usize,
    service_ns: u64,
    now: u64,
    next_id: u32,
    /// Dispatched, waiting for a slot.
    device_queue: VecDeque<u32>,
    /// (completion time, id) of requests in service.
    in_service: BinaryHeap<Reverse<(u64, u32)>>,
    requests: HashMap<u32, (Request, u64, usize)>,
    /// Sectors completed per process since the last `reset`.
    served: Vec<u64>,
    /// Slot-nanoseconds of service since the last `reset`, and when it began.
    busy_ns: u64,
    since: u64,
}

impl Bench {
    fn new(nr_hctx: u32, slots: usize, service_ns: u64) -> Self {
        Self {
            kf: KyberFairness::new(nr_hctx),
            nr_hctx,
            processes: Vec::new(),
            slots,
            service_ns,
            now: 0,
            next_id: 0,
            device_queue: VecDeque::new(),
            in_service: BinaryHeap::new(),
            requests: HashMap::new(),
            served: Vec::new(),
            busy_ns: 0,
            since: 0,
        }
    }

    fn process(&mut self, cgroup: u32, weight: u32, hctx: u32, depth: u32, op: Op) -> usize {
        self.processes.push(Process {
            cgroup,
            weight,
            hctx,
            depth,
            op,
            nr_sectors: 8,
            outstanding: 0,
            running: true,
        });
        self.served.push(0);
        self.processes.len() - 1
    }

    fn submit(&mut self, p: usize) {
        while self.processes[p].running && self.processes[p].outstanding < self.processes[p].depth {
            let proc = &mut self.processes[p];
            proc.outstanding += 1;
            let mut r = rq(
                self.next_id,
                proc.op,
                proc.cgroup,
                proc.weight,
                proc.hctx,
                proc.nr_sectors,
            );
            r.process = p as u32;
            r.start_ns = self.now;
            self.next_id += 1;
            let hctx = r.hctx;
            self.kf.insert(r, self.now);
            self.run(hctx);
        }
    }

    fn run(&mut self, hctx: u32) {
        while self.kf.has_work(hctx) {
            let Some(r) = self.kf.dispatch(hctx, self.now) else {
                return;
            };
            self.device_queue.push_back(r.id);
            let process = r.process as usize;
            assert!(self.requests.insert(r.id, (r, self.now, process)).is_none());
        }
        self.start_service();
    }

    fn start_service(&mut self) {
        while self.in_service.len() < self.slots {
            let Some(id) = self.device_queue.pop_front() else {
                return;
            };
            self.in_service
                .push(Reverse((self.now + self.service_ns, id)));
        }
    }

    fn run_all(&mut self) {
        for h in 0..self.nr_hctx {
            self.run(h);
        }
    }

    fn reset(&mut self) {
        self.served.iter_mut().for_each(|s| *s = 0);
        self.busy_ns = 0;
        self.since = self.now;
    }

    /// Advance to `until`.
    fn run_until(&mut self, until: u64) {
        for p in 0..self.processes.len() {
            self.submit(p);
        }
        self.run_all();
        loop {
            let completion = self.in_service.peek().map(|Reverse((t, _))| *t);
            let timer = self.kf.next_timer_ns();
            let next = match (completion, timer) {
                (Some(c), Some(t)) => c.min(t),
                (c, t) => c
                    .or(t)
                    .expect("the refill timer is always armed once work arrived"),
            };
            if next > until {
                break;
            }
            let busy = self.in_service.len() as u64;
            self.busy_ns += busy * (next - self.now);
            self.now = next;
            if completion == Some(next) {
                let Reverse((_, id)) = self.in_service.pop().unwrap();
                let (r, issued, p) = self.requests.remove(&id).unwrap();
                self.start_service();
                let after = self.kf.completed(&r, issued, self.now);
                self.served[p] += r.nr_sectors as u64;
                self.processes[p].outstanding -= 1;
                let mut woken = Vec::new();
                self.kf.take_woken_hctxs(&mut woken);
                for hctx in woken {
                    self.run(hctx);
                }
                match after {
                    AfterCompletion::RunQueue => self.run(r.hctx),
                    AfterCompletion::RunAllQueues => self.run_all(),
                    AfterCompletion::Restart => {} // no driver tags here: nothing to restart
                }
                self.submit(p);
            } else {
                self.kf.timer(self.now);
                self.run_all();
            }
        }
        self.busy_ns += self.in_service.len() as u64 * (until - self.now);
        self.now = until;
    }

    /// Sectors served per cgroup since the last reset, in order of first appearance.
    fn served_by_cgroup(&self) -> Vec<(u32, u32, u64)> {
        let mut out: Vec<(u32, u32, u64)> = Vec::new();
        for (p, proc) in self.processes.iter().enumerate() {
            match out.iter_mut().find(|(c, _, _)| *c == proc.cgroup) {
                Some(entry) => entry.2 += self.served[p],
                None => out.push((proc.cgroup, proc.weight, self.served[p])),
            }
        }
        out
    }

    fn utilization(&self) -> f64 {
        self.busy_ns as f64 / (self.slots as u64 * (self.now - self.since)) as f64
    }
}

/// Each backlogged cgroup's share of the service divided by its share of the weight (1.0 = exact).
fn share_ratios(served: &[(u32, u32, u64)]) -> Vec<f64> {
    let total: u64 = served.iter().map(|s| s.2).sum();
    let weights: u32 = served.iter().map(|s| s.1).sum();
    served
        .iter()
        .map(|&(_, w, s)| (s as f64 / total as f64) / (w as f64 / weights as f64))
        .collect()
}

#[test]
fn four_cgroups_share_the_device_by_weight_100_250_500_1000() {
    // Seed 001's setup: 4 cgroups x 4 processes, one hardware queue each; a device serving 64 requests at a
    // time, 100 us each (640 K requests/s), busy with any one cgroup alone.
    let mut bench = Bench::new(16, 64, 100 * US);
    for (c, weight) in [100, 250, 500, 1000].into_iter().enumerate() {
        for t in 0..4 {
            bench.process(c as u32 + 1, weight, (c * 4 + t) as u32, 32, Op::Read);
        }
    }
    bench.run_until(300 * MS);
    bench.reset();
    bench.run_until(1300 * MS);
    let ratios = share_ratios(&bench.served_by_cgroup());
    for r in &ratios {
        assert!((r - 1.0).abs() < 0.02, "share / weight share: {ratios:?}");
    }
    assert!(
        bench.utilization() > 0.99,
        "work-conserving: {}",
        bench.utilization()
    );
    let (refills, early) = bench.kf.refills();
    assert!(
        refills >= 10 && early > 0,
        "refills {refills}, early {early}"
    );
}

#[test]
fn one_to_six_cgroups_with_random_weights_share_by_weight() {
    let mut rng = Lcg(7);
    for nr_cgroups in 1..=6u32 {
        let mut bench = Bench::new(8, 48, 80 * US);
        for c in 0..nr_cgroups {
            let weight = 1 + rng.below(1000) as u32;
            // Two processes per cgroup, each deep enough to keep the device busy alone.
            for _ in 0..2 {
                let hctx = rng.below(8) as u32;
                bench.process(c + 1, weight, hctx, 48, Op::Read);
            }
        }
        bench.run_until(300 * MS);
        bench.reset();
        bench.run_until(1300 * MS);
        let served = bench.served_by_cgroup();
        let ratios = share_ratios(&served);
        for r in &ratios {
            assert!(
                (r - 1.0).abs() < 0.03,
                "{nr_cgroups} cgroups {served:?}: {ratios:?}"
            );
        }
        assert!(
            bench.utilization() > 0.99,
            "{nr_cgroups} cgroups: {}",
            bench.utilization()
        );
    }
}

#[test]
fn when_a_cgroup_goes_idle_the_others_share_its_part_by_their_weights() {
    let mut bench = Bench::new(6, 64, 100 * US);
    let mut third = Vec::new();
    for (c, weight) in [100, 300, 600].into_iter().enumerate() {
        for t in 0..2 {
            let p = bench.process(c as u32 + 1, weight, (c * 2 + t) as u32, 64, Op::Read);
            if c == 2 {
                third.push(p);
            }
        }
    }
    bench.run_until(500 * MS);
    for p in third {
        bench.processes[p].running = false;
    }
    // One period for the leftovers to drain and one for the refill to find cgroup 3 idle.
    bench.run_until(700 * MS);
    assert_eq!(bench.kf.is_active(3), Some(false));
    bench.reset();
    bench.run_until(1700 * MS);
    let served = bench.served_by_cgroup();
    assert_eq!(served[2].2, 0);
    let ratios = share_ratios(&served[..2]);
    assert!(
        ratios.iter().all(|r| (r - 1.0).abs() < 0.02),
        "1:3 between the two left: {served:?}"
    );
    assert!(bench.utilization() > 0.99, "{}", bench.utilization());
}

#[test]
fn one_cgroup_alone_keeps_the_device_busy() {
    // Its budget runs out every few ms at first; each time it is the only active cgroup, so it is refilled
    // at once, and the prediction grows to what the device does in a period.
    let mut bench = Bench::new(4, 64, 100 * US);
    for h in 0..4 {
        bench.process(1, 100, h, 32, Op::Write);
    }
    bench.run_until(20 * MS);
    assert!(
        bench.utilization() > 0.99,
        "from the start: {}",
        bench.utilization()
    );
    bench.reset();
    bench.run_until(1020 * MS);
    assert!(bench.utilization() > 0.99, "{}", bench.utilization());
    // 640 K requests/s x 8 sectors x wr_scale 2 per 100 ms, within the granularity of a request.
    let predicted = bench.kf.predicted_sectors() as f64;
    assert!((predicted / 1_024_000.0 - 1.0).abs() < 0.05, "{predicted}");
}

#[test]
fn per_cgroup_prediction_over_predicts_and_shortchanges_the_heaviest_cgroup() {
    let run = |per_cgroup: bool| {
        let mut bench = Bench::new(16, 64, 100 * US);
        bench
            .kf
            .set_tunable("per_cgroup_prediction", per_cgroup as i64)
            .unwrap();
        for (c, weight) in [100, 250, 500, 1000].into_iter().enumerate() {
            for t in 0..4 {
                bench.process(c as u32 + 1, weight, (c * 4 + t) as u32, 32, Op::Read);
            }
        }
        bench.run_until(300 * MS);
        bench.reset();
        bench.run_until(1300 * MS);
        (
            share_ratios(&bench.served_by_cgroup()),
            bench.kf.predicted_sectors(),
        )
    };
    let (device_wide, capacity) = run(false);
    let (per_cgroup, over) = run(true);
    assert!((device_wide[3] - 1.0).abs() < 0.02, "{device_wide:?}");
    // The light cgroups run out early at a quarter of the device each and claim that for the whole period.
    assert!(over as f64 > 1.15 * capacity as f64, "{over} vs {capacity}");
    assert!(
        per_cgroup[3] < 0.9,
        "the heaviest cgroup gets less than its share: {per_cgroup:?}"
    );
}
