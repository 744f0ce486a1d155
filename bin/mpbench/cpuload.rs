//! Where the CPU time went over a measured interval: every core's busy time
//! from /proc/stat, split into user, system (kernel work in a process's
//! context), softirq (receive work, among others) and hard interrupts.

use std::io;

use procfs::{CpuTime, CurrentSI, KernelStats};

/// The counters of every core at one moment, in clock ticks.
#[derive(Clone, Debug)]
pub struct CpuSample {
    cores: Vec<CpuTime>,
}

/// One core's time over an interval, in nanoseconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct CoreUse {
    pub user_ns: f64,
    pub system_ns: f64,
    pub softirq_ns: f64,
    pub irq_ns: f64,
    pub idle_ns: f64,
}

impl CoreUse {
    /// Time the core did work for this machine (steal, the hypervisor's,
    /// is not counted).
    pub fn busy_ns(&self) -> f64 {
        self.user_ns + self.system_ns + self.softirq_ns + self.irq_ns
    }
}

/// Reads every core's counters (the cpuN lines of /proc/stat).
pub fn sample() -> io::Result<CpuSample> {
    let stats = KernelStats::current().map_err(io::Error::other)?;
    Ok(CpuSample {
        cores: stats.cpu_time,
    })
}

/// What every core did between `before` and `after`.
pub fn between(before: &CpuSample, after: &CpuSample) -> Vec<CoreUse> {
    let hz = procfs::ticks_per_second().max(1) as f64;
    let ns = |ticks: u64| ticks as f64 * 1e9 / hz;
    let d = |after: u64, before: u64| ns(after.saturating_sub(before));
    // A counter this kernel does not have (iowait, irq, softirq: older
    // kernels) is 0.
    let d_opt =
        |after: Option<u64>, before: Option<u64>| d(after.unwrap_or(0), before.unwrap_or(0));
    before
        .cores
        .iter()
        .zip(&after.cores)
        .map(|(b, a)| CoreUse {
            user_ns: d(a.user, b.user) + d(a.nice, b.nice),
            system_ns: d(a.system, b.system),
            idle_ns: d(a.idle, b.idle) + d_opt(a.iowait, b.iowait),
            irq_ns: d_opt(a.irq, b.irq),
            softirq_ns: d_opt(a.softirq, b.softirq),
        })
        .collect()
}
