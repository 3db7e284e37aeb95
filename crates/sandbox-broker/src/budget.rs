//! What the runner may spend on one run's brokered calls: no more than the
//! run's own share of the host, so that a flood of brokered calls, or of
//! callers waiting in them, cannot make the runner work or hold threads
//! beyond the limits the run was given.
//!
//! The run's limits are held by cgroups that contain the run's processes,
//! not the runner's threads that serve them. A thread of the runner cannot
//! join the run's cgroup v2 on its own: every thread of a process belongs to
//! the process's cgroup unless the subtree is *threaded*
//! (Documentation/admin-guide/cgroup-v2.rst, "Threads"), and a threaded
//! cgroup holds no domain controller (`memory`) and refuses `cgroup.kill`,
//! which the run's containment needs. So the broker keeps a budget derived
//! from the limits instead:
//!
//! * **CPU** (`--cpu`): the CPU time the broker's threads spend (measured
//!   with `CLOCK_THREAD_CPUTIME_ID` around their work) is drawn from a
//!   bucket that fills at the run's rate, holding at most one period's quota
//!   ([`PERIOD`], as the cgroup's `cpu.max`). While it is empty the broker
//!   takes no new request: the callers wait in the kernel, as their own
//!   throttled threads would.
//! * **Threads** (`--pids`): the broker's worker threads for the run's
//!   blocking calls number at most the run's pids limit. Each waiting call
//!   is one of the run's threads, and the run has at most that many, so no
//!   caller the kernel would let run waits for a worker; a caller beyond
//!   (when the limit is not held) waits in the queue, never for an error.
//!   Callers waiting on a FIFO hold no thread at all (see [`crate::fifo`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The period over which a CPU share is granted, as the cgroup's default
/// `cpu.max` period: the most the broker spends at once after a pause.
pub(crate) const PERIOD: Duration = Duration::from_millis(100);

/// What the runner may spend on one run's brokered calls, derived from the
/// run's limits ([`RunBudget::from_limits`]); unlimited by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunBudget {
    /// CPU time per second of wall time, in thousandths of one CPU.
    cpu_millis: Option<u32>,
    /// Worker threads at once (besides the broker's own thread).
    threads: Option<u32>,
}

impl RunBudget {
    /// The budget of a run limited by `limits`: its `--cpu` share for the
    /// broker's CPU time and its `--pids` for the broker's worker threads.
    pub fn from_limits(limits: &sandbox_core::ResourceLimits) -> Self {
        Self {
            cpu_millis: limits.cpu.map(|c| c.millis()),
            threads: limits
                .pids
                .map(|p| u32::try_from(p.get()).unwrap_or(u32::MAX)),
        }
    }

    /// The CPU share, in thousandths of one CPU, if limited.
    pub fn cpu_millis(&self) -> Option<u32> {
        self.cpu_millis
    }

    /// The worker threads at most, if limited.
    pub fn threads(&self) -> Option<u32> {
        self.threads
    }

    /// Worker threads the pool may run at once, at most `cap`.
    pub(crate) fn workers(&self, cap: usize) -> usize {
        self.threads.map_or(cap, |n| (n as usize).min(cap)).max(1)
    }
}

/// The CPU time the calling thread has used.
pub(crate) fn thread_cpu() -> Duration {
    // SAFETY: timespec is plain data; clock_gettime fills it.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid clock id and out-pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU time spent by worker threads, in nanoseconds, until the broker
/// thread charges it to the run.
#[derive(Debug, Default, Clone)]
pub(crate) struct Spent(Arc<AtomicU64>);

impl Spent {
    /// Adds the CPU time a worker spent on a call.
    pub(crate) fn add(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_add(ns, Ordering::Relaxed);
    }

    fn take(&self) -> Duration {
        Duration::from_nanos(self.0.swap(0, Ordering::Relaxed))
    }
}

/// The broker thread's CPU bucket for one run (see the module docs).
pub(crate) struct CpuBudget {
    /// `None`: no `--cpu`, never held.
    share: Option<Share>,
    workers: Spent,
    /// The broker thread's own CPU time when last charged.
    last_cpu: Duration,
}

struct Share {
    /// CPUs (the `--cpu` value).
    rate: f64,
    /// Nanoseconds of CPU time the run may still spend now; below zero, a
    /// debt that the rate pays off.
    credit: f64,
    /// The most credit held: one period's quota.
    cap: f64,
    last: Instant,
}

impl CpuBudget {
    /// Call on the broker thread: its CPU time is counted from now.
    pub(crate) fn new(budget: &RunBudget, workers: Spent) -> Self {
        let share = budget.cpu_millis.map(|m| {
            let rate = f64::from(m.max(1)) / 1000.0;
            let cap = rate * PERIOD.as_nanos() as f64;
            Share {
                rate,
                credit: cap,
                cap,
                last: Instant::now(),
            }
        });
        Self {
            share,
            workers,
            last_cpu: thread_cpu(),
        }
    }

    /// Charges what the broker thread (and the workers) spent since the
    /// last call; returns how long the broker must take no request, when
    /// the run's share is spent.
    pub(crate) fn hold(&mut self) -> Option<Duration> {
        let share = self.share.as_mut()?;
        let cpu = thread_cpu();
        let used = cpu.saturating_sub(self.last_cpu) + self.workers.take();
        self.last_cpu = cpu;
        let now = Instant::now();
        let earned = now.duration_since(share.last).as_nanos() as f64 * share.rate;
        share.last = now;
        share.credit = (share.credit + earned).min(share.cap) - used.as_nanos() as f64;
        (share.credit < 0.0).then(|| {
            // At least a millisecond: shorter waits cost more than they save.
            let ns = (-share.credit / share.rate).max(1e6);
            Duration::from_nanos(ns as u64)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(d: Duration) {
        let start = thread_cpu();
        while thread_cpu() - start < d {}
    }

    #[test]
    fn no_share_never_holds() {
        let mut b = CpuBudget::new(&RunBudget::default(), Spent::default());
        busy(Duration::from_millis(20));
        assert_eq!(b.hold(), None);
    }

    /// Spending beyond one period's quota holds the broker for the time the
    /// share takes to pay it; within it, nothing is held.
    #[test]
    fn spending_past_the_share_holds_for_the_debt() {
        let budget = RunBudget {
            cpu_millis: Some(100),
            threads: None,
        };
        let spent = Spent::default();
        let mut b = CpuBudget::new(&budget, spent.clone());
        // 10 ms is the quota of one 100 ms period at 0.1 CPU.
        assert_eq!(b.hold(), None);
        // Workers' time counts as the broker thread's.
        spent.add(Duration::from_millis(30));
        let held = b.hold().expect("a debt of about 20 ms holds");
        // 20 ms of debt at 0.1 CPU: about 200 ms of wall time.
        assert!(held >= Duration::from_millis(150), "{held:?}");
        assert!(held <= Duration::from_millis(250), "{held:?}");
    }

    #[test]
    fn workers_are_bounded_by_the_pids_limit() {
        let limits = sandbox_core::ResourceLimits {
            pids: Some("10".parse().unwrap()),
            cpu: Some("0.1".parse().unwrap()),
            ..Default::default()
        };
        let b = RunBudget::from_limits(&limits);
        assert_eq!(b.cpu_millis(), Some(100));
        assert_eq!(b.workers(64), 10);
        assert_eq!(RunBudget::default().workers(64), 64);
        let one = RunBudget {
            threads: Some(1),
            ..RunBudget::default()
        };
        assert_eq!(one.workers(64), 1);
    }
}
