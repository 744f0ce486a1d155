//! Where the CPU time went over a measured interval: every core's busy time
//! from /proc/stat, split into user, system (kernel work in a process's
//! context), softirq (receive work, among others) and hard interrupts.

use std::io;

/// The counters of every core at one moment, in clock ticks.
#[derive(Clone, Debug)]
pub struct CpuSample {
    cores: Vec<[u64; 8]>,
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
    let text = std::fs::read_to_string("/proc/stat")?;
    let cores = text
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .map(|line| {
            let mut fields = [0u64; 8];
            for (slot, value) in fields.iter_mut().zip(line.split_whitespace().skip(1)) {
                *slot = value.parse().unwrap_or(0);
            }
            fields
        })
        .collect();
    Ok(CpuSample { cores })
}

/// What every core did between `before` and `after`.
pub fn between(before: &CpuSample, after: &CpuSample) -> Vec<CoreUse> {
    // SAFETY: sysconf has no preconditions.
    #[allow(unsafe_code)]
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let ns = |ticks: u64| ticks as f64 * 1e9 / hz;
    before
        .cores
        .iter()
        .zip(&after.cores)
        .map(|(b, a)| {
            let d = |i: usize| ns(a[i].saturating_sub(b[i]));
            // user nice system idle iowait irq softirq steal
            CoreUse {
                user_ns: d(0) + d(1),
                system_ns: d(2),
                idle_ns: d(3) + d(4),
                irq_ns: d(5),
                softirq_ns: d(6),
            }
        })
        .collect()
}
