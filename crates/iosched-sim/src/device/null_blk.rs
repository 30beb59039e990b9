//! The kernel's null_blk (`drivers/block/null_blk/main.c`, Linux 6.12.117 as the lab runs it) in its request-based
//! mode (`queue_mode=2`, blk-mq), instead of an SSD: a device whose service time is known exactly.
//!
//! In 6.12, `null_queue_rq` starts the request, handles it at once (`null_handle_cmd`: the data copy of a
//! `memory_backed` device, else nothing) and ends it through `nullb_complete_cmd` by `irqmode`:
//! - 0 (`NULL_IRQ_NONE`): `blk_mq_end_request` inside `queue_rq`, in the submitter's context;
//! - 1 (`NULL_IRQ_SOFTIRQ`): `blk_mq_complete_request`, the completion raised as a softirq on the submitting CPU;
//! - 2 (`NULL_IRQ_TIMER`): an hrtimer of `completion_nsec` started then, whose expiry ends the request.
//!
//! Nothing else limits it: no internal queue, no bandwidth (`mbps` = 0), every request in service at once; the only
//! bound on requests in flight is the tag set's `hw_queue_depth` tags per hardware queue (`submit_queues`), which
//! the block layer holds (`DeviceConfig::queue_depth`, `max_hw_queues`). So here a command completes a fixed time
//! after it reached the driver: `completion_ns` under irqmode 2, 0 under irqmode 0 and 1 (their cost is CPU time,
//! the host's per-I/O costs). Reads and writes, any size, alike.
//!
//! Where the host's timers fire late (`HostConfig::timer_lateness`: the VM lab's TCG guest), a timer completion
//! comes that much later, drawn per command from the host's measured distribution for `completion_nsec`; the draw
//! is kept for the request (`Device::take_timer_draw`), whose reaper wakes as late in the host's wake-up
//! distribution (`HostConfig::wake_lateness`).
//!
//! Simplification: the data copy of `memory_backed=1` (a memcpy per page on the submitting CPU, before the timer
//! starts) is left to the host's per-I/O costs; the device time is the same with and without it.

use serde::{Deserialize, Serialize};

use rand::RngExt;

use super::{Command, Device};
use crate::engine::{Event, EventQueue};

/// null_blk's parameters that change when a command completes (the rest are the block layer's: tags, hardware
/// queues, block size, capacity).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NullBlkConfig {
    /// 0 none, 1 softirq, 2 timer.
    pub irqmode: u32,
    /// The timer's delay under irqmode 2 (null_blk's `completion_nsec`); unused otherwise.
    pub completion_ns: u64,
}

impl NullBlkConfig {
    /// How long after it reached the driver a command completes.
    pub fn service_ns(&self) -> u64 {
        if self.irqmode == 2 {
            self.completion_ns
        } else {
            0
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.irqmode > 2 {
            return Err(format!(
                "null_blk.irqmode: expected 0 (none), 1 (softirq) or 2 (timer), got {}",
                self.irqmode
            ));
        }
        Ok(())
    }
}

impl Device {
    /// A command reached null_blk: it completes `service_ns` later, whatever else is in flight.
    pub(super) fn null_blk_submit(
        &mut self,
        null_blk: &NullBlkConfig,
        command: Command,
        events: &mut EventQueue,
    ) {
        if command.write {
            self.stats.write_ios += 1;
        } else {
            self.stats.read_ios += 1;
        }
        let service_ns = null_blk.service_ns();
        let mut done_ns = events.now_ns + service_ns;
        if null_blk.irqmode == 2 {
            if let Some(lateness) = &self.timer_lateness {
                // One late interrupt handles every timer expired by then, one after another, and those that
                // expire while it works (hrtimer_interrupt looks again before it returns): a timer expiring before
                // the pending interrupt is done with the ones it has joins it, ended `timer_irq_ns` after the one
                // before; a later one waits its own lateness. Every timer here has the same duration, so expiries
                // come in submission order. Simplification: the interrupt looks again as long as timers keep
                // expiring, where the kernel's gives up after three passes and defers the rest (a device whose
                // completion_nsec is shorter than its queue depth times `timer_irq_ns` would show the difference).
                let busy_until =
                    self.timer_handled_at_ns + self.timer_handled_count as u64 * self.timer_irq_ns;
                if done_ns <= busy_until {
                    done_ns = busy_until;
                    self.timer_handled_count += 1;
                } else {
                    let u = self.rng.random_range(0.0..1.0);
                    done_ns += lateness.late_ns(service_ns, u);
                    (self.timer_handled_at_ns, self.timer_handled_u) = (done_ns, u);
                    self.timer_handled_count = 1;
                }
                let request = command.request as usize;
                if self.timer_draws.len() <= request {
                    self.timer_draws.resize(request + 1, f64::NAN);
                }
                self.timer_draws[request] = self.timer_handled_u;
            }
        }
        events.schedule(
            done_ns,
            Event::DeviceComplete {
                device: self.index,
                request: command.request,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Condition;
    use crate::device::test_support::*;
    use crate::testkit::small_device;

    fn null_blk_device(irqmode: u32, completion_ns: u64) -> Device {
        let mut config = small_device(Condition::Fresh);
        config.null_blk = Some(NullBlkConfig {
            irqmode,
            completion_ns,
        });
        Device::new(config, 0, 1, 1)
    }

    #[test]
    fn under_the_timer_every_command_completes_completion_ns_after_it_arrived() {
        let mut device = null_blk_device(2, 500_000);
        let mut events = EventQueue::new();
        // Eight at once (QD 8), then one 100 us later: no queueing inside, reads and writes alike.
        submit_writes(&mut device, &mut events, 4);
        for request in 4..8 {
            device.submit(0, read(request, request as u64 * 4096), &mut events);
        }
        events.now_ns = 100_000;
        device.submit(0, read(8, 0), &mut events);
        let done = run_until_idle(&mut device, &mut events);
        assert_eq!(done.len(), 9);
        assert!(done[..8].iter().all(|&(at, _)| at == 500_000), "{done:?}");
        assert_eq!(done[8], (600_000, 8));
        assert_eq!((device.stats.read_ios, device.stats.write_ios), (5, 4));
        assert_eq!(device.stats.max_outstanding_commands, 9);
    }

    #[test]
    fn a_late_host_delays_the_timer_completions_by_its_measured_lateness() {
        // The host's 500 us timers fire 100 us late at P10 and 300 us late at P90. 1,000 commands 1 ms apart (each
        // timer alone): every one completes 600-800 us after it arrived, half of them (P50: 200 us late) within
        // 700 us, and the draws differ. Without the timer (irqmode 0) nothing is late.
        let lateness = crate::config::TimerLateness {
            quantiles: vec![0.1, 0.5, 0.9],
            durations_ns: vec![500_000],
            late_ns: vec![vec![100_000, 200_000, 300_000]],
        };
        let mut device = null_blk_device(2, 500_000);
        device.set_timer_lateness(Some(lateness.clone()), 0);
        let mut events = EventQueue::new();
        let mut took = Vec::new();
        for request in 0..1_000u32 {
            let arrived = request as u64 * 1_000_000;
            events.now_ns = arrived;
            device.submit(0, read(request, 0), &mut events);
            let done = run_until_idle(&mut device, &mut events);
            took.push(done[0].0 - arrived);
        }
        assert!(
            took.iter().all(|t| (600_000..=800_000).contains(t)),
            "{took:?}"
        );
        let within_700 = took.iter().filter(|&&t| t <= 700_000).count();
        assert!((450..=550).contains(&within_700), "{within_700}");
        let mut device = null_blk_device(0, 500_000);
        device.set_timer_lateness(Some(lateness), 0);
        device.submit(0, read(1, 0), &mut events);
        let now = events.now_ns;
        assert_eq!(run_until_idle(&mut device, &mut events), vec![(now, 1)]);
    }

    #[test]
    fn one_late_interrupt_handles_every_timer_expired_by_then() {
        // Timers always 200 us late. A at 0 expires at 500 and is handled at 700; B at 100 expires at 600, before
        // that handling, so the same interrupt ends it at 700; C at 300 expires at 800, after it: its own, at 1,000.
        let mut device = null_blk_device(2, 500_000);
        device.set_timer_lateness(Some(always_late(200_000)), 0);
        let mut events = EventQueue::new();
        for (request, at) in [(0, 0), (1, 100_000), (2, 300_000)] {
            events.now_ns = at;
            device.submit(0, read(request, 0), &mut events);
        }
        assert_eq!(
            run_until_idle(&mut device, &mut events),
            vec![(700_000, 0), (700_000, 1), (1_000_000, 2)]
        );
    }

    fn always_late(late_ns: u64) -> crate::config::TimerLateness {
        crate::config::TimerLateness {
            quantiles: vec![0.5],
            durations_ns: vec![500_000],
            late_ns: vec![vec![late_ns]],
        }
    }

    /// 500 us timers, always 100 us late, the interrupt `irq_ns` per completion; requests 0-15 submitted 8 us apart
    /// from 0.
    fn sixteen_timers_8us_apart(irq_ns: u64) -> (Device, EventQueue) {
        let mut device = null_blk_device(2, 500_000);
        device.set_timer_lateness(Some(always_late(100_000)), irq_ns);
        let mut events = EventQueue::new();
        for request in 0..16u32 {
            events.now_ns = 8_000 * request as u64;
            device.submit(0, read(request, 0), &mut events);
        }
        (device, events)
    }

    #[test]
    fn a_timer_that_expires_while_the_interrupt_works_is_ended_by_it() {
        // Timers always 100 us late, the interrupt 10 us per completion. Sixteen requests dispatched 8 us apart
        // (0, 8, ..., 120 us) expire at 500-620 us. The first's interrupt comes at 600 and ends one every 10 us:
        // request k at 600 + 10k, as long as it has expired by then (k = 15 expires at 620 and is ended at 750).
        // Seventeenth, dispatched at 300 (expiring at 800, after the interrupt's last at 750): its own, at 900.
        let (mut device, mut events) = sixteen_timers_8us_apart(10_000);
        events.now_ns = 300_000;
        device.submit(0, read(16, 0), &mut events);
        let mut want: Vec<(u64, u32)> = (0..16u32)
            .map(|k| (600_000 + 10_000 * k as u64, k))
            .collect();
        want.push((900_000, 16));
        assert_eq!(run_until_idle(&mut device, &mut events), want);
        // The negative control: an interrupt that takes no time ends only what expired when it came, 500-600 us
        // (requests 0-12, at 600); 13-15 (expiring 604-620) wait for one of their own, 100 us after 604.
        let (mut device, mut events) = sixteen_timers_8us_apart(0);
        let done = run_until_idle(&mut device, &mut events);
        assert!(done[..13].iter().all(|&(at, _)| at == 600_000), "{done:?}");
        assert!(done[13..].iter().all(|&(at, _)| at == 704_000), "{done:?}");
    }

    #[test]
    fn without_the_timer_a_command_completes_at_once() {
        for irqmode in [0, 1] {
            let mut device = null_blk_device(irqmode, 500_000);
            let mut events = EventQueue::new();
            device.submit(0, read(1, 0), &mut events);
            assert_eq!(run_until_idle(&mut device, &mut events), vec![(0, 1)]);
        }
    }

    #[test]
    fn an_unknown_irqmode_is_refused() {
        let config = NullBlkConfig {
            irqmode: 3,
            completion_ns: 1,
        };
        assert!(config
            .validate()
            .unwrap_err()
            .starts_with("null_blk.irqmode: expected 0"));
    }
}
