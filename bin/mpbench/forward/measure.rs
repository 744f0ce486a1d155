//! One measurement: the generator sending from its transmit ring, what the
//! generator's and the sink's interfaces counted, and every core's CPU time
//! over the interval; and the medians over runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::cpuload::{self, CoreUse};
use crate::generator::TxRing;
use crate::report;

use super::topology::{frame, Bench, GENERATOR_MAC, SINK_MAC};

/// The generator sends this long before the interval is measured (and a
/// switched table warms up this long before its first measurement).
pub(super) const WARMUP: Duration = Duration::from_millis(300);

/// One measurement's result: frames per second, and the CPU time spent.
#[derive(Clone, Debug)]
pub(super) struct Rates {
    pub(super) offered: f64,
    pub(super) delivered: f64,
    /// Every core's time over the interval.
    pub(super) cores: Vec<CoreUse>,
    pub(super) seconds: f64,
}

impl Rates {
    /// CPU nanoseconds per delivered frame, all cores together.
    pub(super) fn ns_per_frame(&self) -> f64 {
        let busy: f64 = self.cores.iter().map(CoreUse::busy_ns).sum();
        busy / (self.delivered * self.seconds).max(1.0)
    }

    /// The same without the generator's own work: the user and system
    /// time of the generator's CPU 0, where nothing else runs in process
    /// context. Softirq time there is receive work (placement a, or RPS
    /// dispatch in b) and stays in: it is a cost of forwarding.
    pub(super) fn forwarding_ns_per_frame(&self) -> f64 {
        let busy: f64 = self.cores.iter().map(CoreUse::busy_ns).sum();
        let generator = self
            .cores
            .first()
            .map_or(0.0, |core| core.user_ns + core.system_ns);
        (busy - generator).max(0.0) / (self.delivered * self.seconds).max(1.0)
    }
}

/// The generator: frames from the transmit ring at `rate` frames per
/// second (0: flat out) until `stop`.
fn generate(size: usize, rate: f64, stop: &AtomicBool) -> Result<u64, String> {
    lab::pin_to(0)?;
    let mut ring = TxRing::open("eth0", &frame(SINK_MAC, GENERATOR_MAC, size))
        .map_err(|e| format!("generator ring: {e}"))?;
    let start = Instant::now();
    let mut sent = 0u64;
    // Relaxed: a stop flag; nothing is published through it.
    while !stop.load(Ordering::Relaxed) {
        let n = if rate > 0.0 {
            let due = (start.elapsed().as_secs_f64() * rate) as u64;
            if sent >= due {
                thread::sleep(Duration::from_micros(50));
                continue;
            }
            (due - sent).min(256) as usize
        } else {
            256
        };
        sent += ring.send(n).map_err(|e| format!("generator: {e}"))? as u64;
    }
    Ok(sent)
}

pub(super) fn measure(
    bench: &Bench,
    size: usize,
    seconds: f64,
    rate: f64,
) -> Result<Rates, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let generator = {
        let stop = Arc::clone(&stop);
        bench.generator.spawn(move || generate(size, rate, &stop))
    };
    thread::sleep(WARMUP);
    let gen0 = bench.generator.counters("eth0")?;
    let sink0 = bench.sink.counters("eth0")?;
    let cpu0 = cpuload::sample().map_err(|e| format!("/proc/stat: {e}"))?;
    let t0 = Instant::now();
    thread::sleep(Duration::from_secs_f64(seconds));
    let cpu1 = cpuload::sample().map_err(|e| format!("/proc/stat: {e}"))?;
    let dt = t0.elapsed().as_secs_f64();
    let gen1 = bench.generator.counters("eth0")?;
    let sink1 = bench.sink.counters("eth0")?;
    stop.store(true, Ordering::Relaxed);
    generator
        .join()
        .map_err(|_| "the generator panicked".to_owned())???;
    let offered = (gen1.tx_packets + gen1.tx_dropped) - (gen0.tx_packets + gen0.tx_dropped);
    Ok(Rates {
        offered: offered as f64 / dt,
        delivered: (sink1.rx_packets - sink0.rx_packets) as f64 / dt,
        cores: cpuload::between(&cpu0, &cpu1),
        seconds: dt,
    })
}

/// samples[setup][size][load point] = one Rates per run.
pub(super) type Samples = Vec<Vec<Vec<Vec<Rates>>>>;

/// The median over runs of one figure of each run.
pub(super) fn median_of(runs: &[Rates], f: impl Fn(&Rates) -> f64) -> f64 {
    report::median(&runs.iter().map(f).collect::<Vec<_>>())
}

/// The run whose delivered rate is the median: its per-core split is shown.
pub(super) fn median_run(runs: &[Rates]) -> &Rates {
    let mut order: Vec<&Rates> = runs.iter().collect();
    order.sort_by(|a, b| a.delivered.total_cmp(&b.delivered));
    order[order.len() / 2]
}
