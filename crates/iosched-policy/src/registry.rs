//! The schedulers this crate provides: one row each. Everything else that lists schedulers is derived from
//! [`REGISTRY`]: the name list ([`SCHEDULERS`]), [`by_name`], [`block_layers`], and the kernel backend's
//! simulator-only schedulers (through the Python module's `scheduler_registry`). Adding a scheduler is its file, its
//! `pub mod` line in `lib.rs` and one row here (see docs/adding-a-scheduler.md).

use crate::{BlockLayer, Elevator};

/// Whether the kernel backend (runs on this machine's Linux) can select a scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// A current mainline Linux elevator: the kernel backend selects it in `/sys/block/<dev>/queue/scheduler`.
    Mainline,
    /// Only the simulator has it: a research scheduler, or a legacy one removed from Linux in 5.0.
    SimulatorOnly,
}

impl Kernel {
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Mainline => "mainline",
            Kernel::SimulatorOnly => "simulator-only",
        }
    }
}

/// One scheduler: its name, where it runs, how to build it and what it is.
pub struct Scheduler {
    /// The name users type, as in `/sys/block/<dev>/queue/scheduler`.
    pub name: &'static str,
    /// The block layers it exists on, the default first.
    pub block_layers: &'static [BlockLayer],
    /// A fresh instance for a device with this many hardware queues.
    pub build: fn(nr_hw_queues: u32) -> Box<dyn Elevator>,
    pub kernel: Kernel,
    /// What it is, in a few words; the kernel backend says it when it refuses a simulator-only scheduler
    /// ("k2 is the RTSS'19 K2 scheduler: run it with --backend sim").
    pub description: &'static str,
}

impl Scheduler {
    /// Whether it attaches an elevator to the queue (see [`Elevator::is_elevator`]): false for `none`.
    pub fn is_elevator(&self) -> bool {
        (self.build)(1).is_elevator()
    }
}

const MQ: &[BlockLayer] = &[BlockLayer::Mq];
const LEGACY: &[BlockLayer] = &[BlockLayer::Legacy];
/// Mainline BFQ is blk-mq only (Linux 4.12+), but it also existed for the legacy layer out of tree (bfq-sq).
const MQ_OR_LEGACY: &[BlockLayer] = &[BlockLayer::Mq, BlockLayer::Legacy];

use Kernel::{Mainline, SimulatorOnly};

/// Every scheduler, in the order users see them listed.
#[rustfmt::skip]
pub const REGISTRY: &[Scheduler] = &[
    Scheduler { name: "none", block_layers: MQ, kernel: Mainline, description: "blk-mq without an elevator",
        build: |n| Box::new(crate::none::NoneScheduler::new(n)) },
    Scheduler { name: "mq-deadline", block_layers: MQ, kernel: Mainline,
        description: "the blk-mq deadline scheduler (block/mq-deadline.c)",
        build: |_| Box::new(crate::mq_deadline::MqDeadline::new()) },
    Scheduler { name: "kyber", block_layers: MQ, kernel: Mainline,
        description: "the Kyber scheduler (block/kyber-iosched.c)",
        build: |n| Box::new(crate::kyber::Kyber::new(n)) },
    Scheduler { name: "bfq", block_layers: MQ_OR_LEGACY, kernel: Mainline,
        description: "Budget Fair Queueing (block/bfq-iosched.c)",
        build: |_| Box::new(crate::bfq::Bfq::new()) },
    Scheduler { name: "k2", block_layers: MQ, kernel: SimulatorOnly, description: "the RTSS'19 K2 scheduler",
        build: |_| Box::new(crate::k2::K2::new()) },
    Scheduler { name: "kyber-fairness", block_layers: MQ, kernel: SimulatorOnly,
        description: "seed 001's Kyber-fairness",
        build: |n| Box::new(crate::kyber_fairness::KyberFairness::new(n)) },
    Scheduler { name: "noop", block_layers: LEGACY, kernel: SimulatorOnly,
        description: "a legacy single-queue scheduler (removed in Linux 5.0)",
        build: |_| Box::new(crate::noop::Noop::new()) },
    Scheduler { name: "deadline", block_layers: LEGACY, kernel: SimulatorOnly,
        description: "a legacy single-queue scheduler (removed in Linux 5.0; mq-deadline is its blk-mq port)",
        build: |_| Box::new(crate::legacy_deadline::Deadline::new()) },
    // Every device the simulator models is an SSD (non-rotational, with command queueing).
    Scheduler { name: "cfq", block_layers: LEGACY, kernel: SimulatorOnly,
        description: "a legacy single-queue scheduler (removed in Linux 5.0; bfq took its place)",
        build: |_| Box::new(crate::cfq::Cfq::new(false)) },
];

/// Names of the schedulers, in [`REGISTRY`] order.
pub const SCHEDULERS: &[&str] = &NAMES;

const NAMES: [&str; REGISTRY.len()] = {
    let mut names = [""; REGISTRY.len()];
    let mut i = 0;
    while i < REGISTRY.len() {
        names[i] = REGISTRY[i].name;
        i += 1;
    }
    names
};

/// The registry row of the scheduler users call `name`.
pub fn scheduler(name: &str) -> Option<&'static Scheduler> {
    REGISTRY.iter().find(|s| s.name == name)
}

/// The block layers a scheduler exists on, the default first; None for an unknown name. `noop`, `deadline` and `cfq`
/// are legacy-only (their blk-mq counterparts are `none`, `mq-deadline` and `bfq`).
pub fn block_layers(name: &str) -> Option<&'static [BlockLayer]> {
    scheduler(name).map(|s| s.block_layers)
}

/// Build a policy by the name users type (as in `/sys/block/<dev>/queue/scheduler`).
pub fn by_name(name: &str, nr_hw_queues: u32) -> Result<Box<dyn Elevator>, String> {
    match scheduler(name) {
        Some(s) => Ok((s.build)(nr_hw_queues)),
        None => Err(format!(
            "unknown scheduler {name:?}: expected one of {}",
            SCHEDULERS.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_builds_the_scheduler_it_names_once() {
        for (i, s) in REGISTRY.iter().enumerate() {
            assert_eq!((s.build)(2).name(), s.name, "row {i}");
            assert!(!s.block_layers.is_empty(), "{}: no block layer", s.name);
            assert!(!s.description.is_empty(), "{}: no description", s.name);
            assert_eq!(
                REGISTRY.iter().filter(|t| t.name == s.name).count(),
                1,
                "{} listed twice",
                s.name
            );
        }
        assert_eq!(
            SCHEDULERS,
            REGISTRY.iter().map(|s| s.name).collect::<Vec<_>>()
        );
    }

    #[test]
    fn names_resolve_to_their_rows_and_unknown_names_are_refused() {
        assert_eq!(by_name("kyber", 4).unwrap().name(), "kyber");
        let err = by_name("cfs", 1).err().unwrap();
        assert!(
            err.starts_with("unknown scheduler \"cfs\": expected one of none, mq-deadline,"),
            "{err}"
        );
        assert_eq!(block_layers("cfs"), None);
        assert_eq!(block_layers("noop"), Some(LEGACY));
        assert_eq!(block_layers("bfq").unwrap()[0], BlockLayer::Mq);
        assert_eq!(block_layers("k2"), Some(MQ));
    }

    #[test]
    fn only_none_has_no_elevator() {
        let without: Vec<&str> = REGISTRY
            .iter()
            .filter(|s| !s.is_elevator())
            .map(|s| s.name)
            .collect();
        assert_eq!(without, ["none"]);
    }

    #[test]
    fn the_kernel_backend_can_select_the_mainline_blk_mq_schedulers_only() {
        let mainline: Vec<&str> = REGISTRY
            .iter()
            .filter(|s| s.kernel == Mainline)
            .map(|s| s.name)
            .collect();
        assert_eq!(mainline, ["none", "mq-deadline", "kyber", "bfq"]);
    }
}
