//! Where an interface's receive work runs, and where the workers should
//! run so that it does not starve them.
//!
//! A raw port's frames are copied into its packet socket's ring by the
//! kernel's receive softirq. When that runs on the core of the worker that
//! empties the ring, the two compete: under load the softirq wins, fills the
//! ring, and frames already paid for are dropped there (receive livelock).
//! The kernel tells where receive work runs: with RPS, the `rps_cpus` mask
//! of each receive queue; without it, the CPU that takes the interface's
//! interrupt (`/proc/irq/N/smp_affinity_list` of the IRQs named after it).
//! A veth has neither: its receive work runs on the sender's CPU, which is
//! not known in advance.

use std::collections::BTreeSet;
use std::path::PathBuf;

/// A set of CPU numbers.
pub type CpuSet = BTreeSet<usize>;

/// Parses a CPU list as the kernel writes it (`0-3,8,10-11`).
pub fn parse_cpu_list(text: &str) -> Result<CpuSet, String> {
    let mut cpus = CpuSet::new();
    for item in text.trim().split(',').filter(|item| !item.is_empty()) {
        let bad = || format!("invalid CPU list '{text}' (like 0-3,8)");
        let (first, last): (usize, usize) = match item.split_once('-') {
            Some((a, b)) => (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?),
            None => {
                let cpu = item.parse().map_err(|_| bad())?;
                (cpu, cpu)
            }
        };
        if first > last || last >= 4096 {
            return Err(bad());
        }
        cpus.extend(first..=last);
    }
    Ok(cpus)
}

/// Parses a CPU mask as sysfs writes it: hexadecimal 32-bit groups,
/// most significant first, separated by commas (`00000000,00000002`).
pub fn parse_cpu_mask(text: &str) -> Result<CpuSet, String> {
    let mut cpus = CpuSet::new();
    let groups: Vec<&str> = text.trim().split(',').collect();
    for (index, group) in groups.iter().rev().enumerate() {
        let bits = u32::from_str_radix(group, 16)
            .map_err(|_| format!("invalid CPU mask '{}'", text.trim()))?;
        for bit in 0..32 {
            if bits & (1 << bit) != 0 {
                cpus.insert(index * 32 + bit);
            }
        }
    }
    Ok(cpus)
}

/// Formats a CPU set as a list (`0-3,8`).
pub fn format_cpu_list(cpus: &CpuSet) -> String {
    let mut parts = Vec::new();
    let mut iter = cpus.iter().copied().peekable();
    while let Some(first) = iter.next() {
        let mut last = first;
        while iter.peek() == Some(&(last + 1)) {
            last = iter.next().expect("peeked");
        }
        parts.push(if first == last {
            first.to_string()
        } else {
            format!("{first}-{last}")
        });
    }
    parts.join(",")
}

/// Where the kernel's files are: `/` normally, a fake tree in tests.
#[derive(Debug, Clone)]
pub struct System {
    root: PathBuf,
}

impl Default for System {
    fn default() -> Self {
        System {
            root: PathBuf::from("/"),
        }
    }
}

/// How an interface's receive work is placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiveCpus {
    /// RPS steers it to these CPUs.
    Rps(CpuSet),
    /// Its interrupts go to these CPUs.
    Interrupts(CpuSet),
    /// Neither: it runs wherever the frames are sent from (a veth) or
    /// could not be read.
    Unknown,
}

impl ReceiveCpus {
    /// The CPUs, when known.
    pub fn cpus(&self) -> Option<&CpuSet> {
        match self {
            ReceiveCpus::Rps(cpus) | ReceiveCpus::Interrupts(cpus) => Some(cpus),
            ReceiveCpus::Unknown => None,
        }
    }
}

impl System {
    /// The kernel files under `root` instead of `/`.
    pub fn at(root: impl Into<PathBuf>) -> System {
        System { root: root.into() }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }

    /// Where interface `name` takes its receive work.
    pub fn receive_cpus(&self, name: &str) -> ReceiveCpus {
        let queues = self.path(&format!("sys/class/net/{name}/queues"));
        let mut rps = CpuSet::new();
        if let Ok(entries) = std::fs::read_dir(&queues) {
            for entry in entries.flatten() {
                let queue = entry.file_name().to_string_lossy().into_owned();
                if !queue.starts_with("rx-") {
                    continue;
                }
                let mask = std::fs::read_to_string(entry.path().join("rps_cpus"));
                if let Ok(cpus) = mask
                    .map_err(|e| e.to_string())
                    .and_then(|m| parse_cpu_mask(&m))
                {
                    rps.extend(cpus);
                }
            }
        }
        if !rps.is_empty() {
            return ReceiveCpus::Rps(rps);
        }
        let interrupts = self.interrupt_cpus(name);
        if interrupts.is_empty() {
            ReceiveCpus::Unknown
        } else {
            ReceiveCpus::Interrupts(interrupts)
        }
    }

    /// The CPUs of the interrupts whose name mentions interface `name`
    /// (`eth1-TxRx-0`, `eth1`), as /proc/interrupts lists them.
    fn interrupt_cpus(&self, name: &str) -> CpuSet {
        let mut cpus = CpuSet::new();
        let Ok(table) = std::fs::read_to_string(self.path("proc/interrupts")) else {
            return cpus;
        };
        for line in table.lines() {
            let Some((irq, rest)) = line.trim_start().split_once(':') else {
                continue;
            };
            let names_it = rest
                .split_whitespace()
                .last()
                .is_some_and(|device| device == name || device.starts_with(&format!("{name}-")));
            if !names_it || irq.parse::<u32>().is_err() {
                continue;
            }
            let list = self.path(&format!("proc/irq/{irq}/smp_affinity_list"));
            if let Ok(list) = std::fs::read_to_string(list) {
                cpus.extend(parse_cpu_list(&list).unwrap_or_default());
            }
        }
        cpus
    }
}

/// What [`place`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The CPUs each worker is pinned to (all of them in its set), or
    /// `None` for no pinning.
    pub workers: Vec<Option<CpuSet>>,
    /// Ports whose receive work shares a CPU with a worker: (port, CPUs).
    pub overlaps: Vec<(String, CpuSet)>,
}

/// Places `workers` workers on `allowed` CPUs (the process's, or those of
/// `--cpus`), away from the receive work of `ports` where that is known.
/// `pinned` says the CPUs were chosen by the user (`--cpus`): workers are
/// then pinned to them whatever the overlap.
///
/// The rule: the CPUs free of known receive work are preferred; if there
/// are any, the workers are spread over them, one CPU each in turn; if none
/// are free, the workers run on the allowed CPUs (pinned only when the user
/// chose them), and every port whose receive work shares a CPU with them is
/// reported.
pub fn place(
    allowed: &CpuSet,
    pinned: bool,
    workers: usize,
    ports: &[(String, ReceiveCpus)],
) -> Placement {
    let busy: CpuSet = ports
        .iter()
        .filter_map(|(_, receive)| receive.cpus())
        .flatten()
        .copied()
        .collect();
    let free: Vec<usize> = allowed.difference(&busy).copied().collect();
    let (plan, used): (Vec<Option<CpuSet>>, CpuSet) = if !free.is_empty() && !busy.is_empty() {
        let plan = (0..workers)
            .map(|w| Some(CpuSet::from([free[w % free.len()]])))
            .collect::<Vec<_>>();
        let used = plan.iter().flatten().flatten().copied().collect();
        (plan, used)
    } else if pinned {
        let cpus: Vec<usize> = allowed.iter().copied().collect();
        let plan = (0..workers)
            .map(|w| Some(CpuSet::from([cpus[w % cpus.len()]])))
            .collect::<Vec<_>>();
        let used = plan.iter().flatten().flatten().copied().collect();
        (plan, used)
    } else {
        (vec![None; workers], allowed.clone())
    };
    let overlaps = ports
        .iter()
        .filter_map(|(port, receive)| {
            let shared: CpuSet = receive.cpus()?.intersection(&used).copied().collect();
            (!shared.is_empty()).then(|| (port.clone(), shared))
        })
        .collect();
    Placement {
        workers: plan,
        overlaps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(cpus: &[usize]) -> CpuSet {
        cpus.iter().copied().collect()
    }

    #[test]
    fn lists_and_masks_parse() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11").unwrap(),
            set(&[0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("1\n").unwrap(), set(&[1]));
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("x").is_err());
        assert_eq!(parse_cpu_mask("00000000,00000002\n").unwrap(), set(&[1]));
        assert_eq!(parse_cpu_mask("1,00000001").unwrap(), set(&[0, 32]));
        assert_eq!(parse_cpu_mask("0").unwrap(), set(&[]));
        assert_eq!(format_cpu_list(&set(&[0, 1, 2, 5, 7, 8])), "0-2,5,7-8");
    }

    /// A fake sysfs and procfs: RPS masks per queue, interrupts.
    fn fake(rps: &[(&str, &str, &str)], interrupts: &[(u32, &str, &str)]) -> (System, PathBuf) {
        let root = std::env::temp_dir().join(format!(
            "mpbplace{}x{}",
            std::process::id(),
            rps.len() * 10 + interrupts.len()
        ));
        let _ = std::fs::remove_dir_all(&root);
        for (dev, queue, mask) in rps {
            let dir = root.join(format!("sys/class/net/{dev}/queues/{queue}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("rps_cpus"), mask).unwrap();
        }
        let mut table = String::from("           CPU0       CPU1\n");
        for (irq, device, list) in interrupts {
            table.push_str(&format!(" {irq}:   10   20   PCI-MSI  {device}\n"));
            let dir = root.join(format!("proc/irq/{irq}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("smp_affinity_list"), list).unwrap();
        }
        std::fs::create_dir_all(root.join("proc")).unwrap();
        std::fs::write(root.join("proc/interrupts"), table).unwrap();
        (System::at(&root), root)
    }

    #[test]
    fn receive_work_is_found_by_rps_then_interrupts() {
        let (system, root) = fake(
            &[
                ("veth1", "rx-0", "00000002"),
                ("eth1", "rx-0", "0"),
                ("eth1", "tx-0", "f"),
            ],
            &[
                (40, "eth1-TxRx-0", "3"),
                (41, "eth1-TxRx-1", "2"),
                (42, "eth10", "0"),
            ],
        );
        assert_eq!(system.receive_cpus("veth1"), ReceiveCpus::Rps(set(&[1])));
        assert_eq!(
            system.receive_cpus("eth1"),
            ReceiveCpus::Interrupts(set(&[2, 3]))
        );
        assert_eq!(system.receive_cpus("veth9"), ReceiveCpus::Unknown);
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn workers_go_where_receive_work_is_not() {
        let ports = [("raw:a".to_owned(), ReceiveCpus::Rps(set(&[1])))];
        let plan = place(&set(&[0, 1]), false, 1, &ports);
        assert_eq!(plan.workers, vec![Some(set(&[0]))]);
        assert!(plan.overlaps.is_empty());
        // Two workers on the one free CPU: both there, still no overlap.
        let plan = place(&set(&[0, 1]), false, 2, &ports);
        assert_eq!(plan.workers, vec![Some(set(&[0])), Some(set(&[0]))]);
    }

    #[test]
    fn no_free_cpu_means_a_warning() {
        let ports = [
            ("raw:a".to_owned(), ReceiveCpus::Rps(set(&[0, 1]))),
            ("raw:b".to_owned(), ReceiveCpus::Unknown),
        ];
        let plan = place(&set(&[0, 1]), false, 1, &ports);
        assert_eq!(plan.workers, vec![None]);
        assert_eq!(plan.overlaps, vec![("raw:a".to_owned(), set(&[0, 1]))]);
        // The user's choice is kept, and the overlap named.
        let ports = [("raw:a".to_owned(), ReceiveCpus::Rps(set(&[1])))];
        let plan = place(&set(&[1]), true, 1, &ports);
        assert_eq!(plan.workers, vec![Some(set(&[1]))]);
        assert_eq!(plan.overlaps, vec![("raw:a".to_owned(), set(&[1]))]);
    }

    #[test]
    fn unknown_receive_work_leaves_workers_unpinned() {
        let ports = [("raw:a".to_owned(), ReceiveCpus::Unknown)];
        let plan = place(&set(&[0, 1]), false, 2, &ports);
        assert_eq!(plan.workers, vec![None, None]);
        assert!(plan.overlaps.is_empty());
        // With --cpus, pinned round-robin.
        let plan = place(&set(&[0, 1]), true, 3, &ports);
        assert_eq!(
            plan.workers,
            vec![Some(set(&[0])), Some(set(&[1])), Some(set(&[0]))]
        );
    }
}
