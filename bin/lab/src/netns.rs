//! Network namespaces and veth links, removed on drop.

use std::fs::File;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;

use procfs::net::InterfaceDeviceStatus;
use procfs::FromRead;

/// A name no other test of any run on this machine is using now: the
/// process id and a counter.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}{}x{}",
        std::process::id() % 100_000,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs `ip args`; an error carries its message.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let reason = stderr.lines().next().unwrap_or("failed").trim().to_owned();
        Err(format!("ip {}: {reason}", args.join(" ")))
    }
}

/// A network namespace, deleted (with its links) on drop.
pub struct Netns {
    /// Its name under /run/netns.
    pub name: String,
}

impl Netns {
    /// A new namespace, named after this process, `role` and a counter,
    /// with its loopback up.
    pub fn new(role: &str) -> Result<Netns, String> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "mpb-{}-{role}{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        ip(&["netns", "add", &name])?;
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Runs `ip -n NAME args`.
    pub fn ip(&self, args: &[&str]) -> Result<(), String> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// A veth pair: `eth0` here, `peer` in namespace `other`.
    pub fn add_veth(&self, peer: &str, other: &Netns) -> Result<(), String> {
        self.ip(&[
            "link",
            "add",
            "eth0",
            "type",
            "veth",
            "peer",
            "name",
            peer,
            "netns",
            &other.name,
        ])
    }

    /// Runs `f` on a thread inside this namespace.
    pub fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        self.spawn(f)
            .join()
            .map_err(|_| "a thread in a namespace panicked".to_owned())?
    }

    /// Starts `f` on a thread inside this namespace.
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> thread::JoinHandle<Result<T, String>> {
        let path = format!("/run/netns/{}", self.name);
        thread::spawn(move || {
            let file = File::open(&path).map_err(|e| format!("{path}: {e}"))?;
            // setns moves only the calling thread.
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| format!("setns: {e}"))?;
            Ok(f())
        })
    }

    /// Writes a sysctl-style file under /proc/sys as seen from this
    /// namespace.
    pub fn sysctl(&self, path: &'static str, value: &'static str) -> Result<(), String> {
        self.run(move || std::fs::write(format!("/proc/sys/{path}"), value))?
            .map_err(|e| format!("{path}: {e}"))
    }

    /// The (rx, tx) packet counters of `dev` in this namespace.
    pub fn packets(&self, dev: &'static str) -> Result<(u64, u64), String> {
        let c = self.counters(dev)?;
        Ok((c.rx_packets, c.tx_packets))
    }

    /// The packet and drop counters of `dev` in this namespace.
    pub fn counters(&self, dev: &'static str) -> Result<DevCounters, String> {
        self.run(move || -> Result<DevCounters, String> {
            // /proc/net is /proc/self/net, the namespace of the process's
            // main thread; /proc/thread-self/net shows the calling
            // thread's, the one `run` moved into this namespace.
            let devices = InterfaceDeviceStatus::from_file("/proc/thread-self/net/dev")
                .map_err(|e| format!("/proc/net/dev: {e}"))?;
            let status = devices
                .0
                .get(dev)
                .ok_or_else(|| format!("no interface {dev}"))?;
            Ok(DevCounters {
                rx_packets: status.recv_packets,
                rx_dropped: status.recv_drop,
                tx_packets: status.sent_packets,
                tx_dropped: status.sent_drop,
            })
        })?
    }

    /// Steers receive processing of `dev` to the CPUs in `mask` (RPS).
    pub fn rps(&self, dev: &str, mask: u64) -> Result<(), String> {
        let path = format!("/sys/class/net/{dev}/queues/rx-0/rps_cpus");
        let status = Command::new("ip")
            .args(["netns", "exec", &self.name, "sh", "-c"])
            .arg(format!("echo {mask:x} > {path}"))
            .status()
            .map_err(|e| format!("cannot set RPS: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("cannot set RPS on {dev}"))
        }
    }
}

/// An interface's counters as /proc/net/dev shows them.
#[derive(Clone, Copy, Debug, Default)]
pub struct DevCounters {
    /// Frames received.
    pub rx_packets: u64,
    /// Frames dropped on receive.
    pub rx_dropped: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Frames dropped on transmit (for a veth, also those its peer's
    /// backlog refused).
    pub tx_dropped: u64,
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}
