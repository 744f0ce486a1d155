//! The forwarding experiment's laboratory: network namespaces, veth links,
//! a bridge under test, interface counters, threads inside namespaces. Every
//! namespace and process made here is removed or stopped on drop.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

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
    pub name: String,
}

impl Netns {
    pub fn new(role: &str) -> Result<Netns, String> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "mpbench-{}-{role}{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        ip(&["netns", "add", &name])?;
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

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
            // SAFETY: `file` is an open namespace file; setns moves only the
            // calling thread.
            #[allow(unsafe_code)]
            let ret = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            if ret != 0 {
                return Err(format!("setns: {}", io::Error::last_os_error()));
            }
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
        self.run(move || -> Result<(u64, u64), String> {
            // /proc/thread-self/net shows the calling thread's namespace.
            let text = std::fs::read_to_string("/proc/thread-self/net/dev")
                .map_err(|e| format!("/proc/net/dev: {e}"))?;
            for line in text.lines() {
                let Some((name, rest)) = line.split_once(':') else {
                    continue;
                };
                if name.trim() == dev {
                    let fields: Vec<u64> = rest
                        .split_whitespace()
                        .map(|f| f.parse().unwrap_or(0))
                        .collect();
                    return Ok((fields[1], fields[9]));
                }
            }
            Err(format!("no interface {dev}"))
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

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A bridge process under test, stopped on drop.
pub struct Process {
    child: Child,
}

impl Process {
    /// Starts `program args` in namespace `ns` pinned to `cpus` (a taskset
    /// list), and waits up to 10 s for a stderr line containing `ready`.
    pub fn start(ns: &Netns, cpus: &str, program: &str, args: &[&str]) -> Result<Process, String> {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns.name, "taskset", "-c", cpus, program])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {program}: {e}"))?;
        let stderr = child.stderr.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            use std::io::BufRead;
            for line in io::BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let process = Process { child };
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut seen = Vec::new();
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) if line.contains("ready") => return Ok(process),
                Ok(line) => seen.push(line),
                Err(_) => return Err(format!("{program} did not start: {}", seen.join(" / "))),
            }
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        stop_child(&mut self.child);
    }
}

/// Stops a child process we started: SIGTERM, up to 3 s to exit, then
/// SIGKILL. Returns at once if it already exited.
pub fn stop_child(child: &mut Child) {
    if !matches!(child.try_wait(), Ok(None)) {
        return;
    }
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Pins the calling thread to `cpu`.
pub fn pin_to(cpu: usize) -> Result<(), String> {
    // SAFETY: cpu_set_t is plain data, set up by CPU_ZERO/CPU_SET before
    // sched_setaffinity reads it; pid 0 means the calling thread.
    #[allow(unsafe_code)]
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(format!(
                "cannot pin to CPU {cpu}: {}",
                io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// A program that daemonises itself (writing its pid to a file), stopped
/// by that pid on drop.
pub struct Daemon {
    pid: libc::pid_t,
    dir: std::path::PathBuf,
}

impl Daemon {
    /// Runs `program args` (which must daemonise and write its pid to the
    /// `pidfile` path it is given) in namespace `ns` pinned to `cpus`, and
    /// waits up to 5 s for the pid file and for `links` to exist there.
    pub fn start(
        ns: &Netns,
        cpus: &str,
        program: &str,
        args: impl FnOnce(&std::path::Path, &std::path::Path) -> Vec<String>,
        links: &[&str],
    ) -> Result<Daemon, String> {
        let dir = std::env::temp_dir().join(&ns.name);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let pidfile = dir.join("pid");
        let status = Command::new("ip")
            .args(["netns", "exec", &ns.name, "taskset", "-c", cpus, program])
            .args(args(&dir.join("ctl"), &pidfile))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("cannot start {program}: {e}"))?;
        if !status.success() {
            return Err(format!("{program} failed to start ({status})"));
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let pid = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|s| s.trim().parse::<libc::pid_t>().ok());
            if let Some(pid) = pid {
                if links
                    .iter()
                    .all(|link| ns.ip(&["link", "show", link]).is_ok())
                {
                    return Ok(Daemon { pid, dir });
                }
                if Instant::now() > deadline {
                    // Dropping it stops it.
                    drop(Daemon { pid, dir });
                    return Err(format!("{program} did not create {}", links.join(", ")));
                }
            } else if Instant::now() > deadline {
                return Err(format!("{program} wrote no pid file"));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill has no memory preconditions; the pid is the one the
        // daemon we started wrote.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(self.pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline && Path::new(&format!("/proc/{}", self.pid)).exists() {
            thread::sleep(Duration::from_millis(10));
        }
        if Path::new(&format!("/proc/{}", self.pid)).exists() {
            // SAFETY: as above.
            #[allow(unsafe_code)]
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
