//! Processes under test: started in a namespace, pinned, stopped on drop;
//! their CPU time, memory and status as /proc shows them (read with
//! procfs, but for a status field by name).

use std::io;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::Netns;

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
    let _ = kill(Pid::from_raw(child.id() as libc::pid_t), Signal::SIGTERM);
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
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu)
        .map_err(|e| format!("cannot pin to CPU {cpu}: {e}"))?;
    // Pid 0: the calling thread.
    nix::sched::sched_setaffinity(Pid::from_raw(0), &set)
        .map_err(|e| format!("cannot pin to CPU {cpu}: {e}"))
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
        // The pid is the one the daemon we started wrote.
        let _ = kill(Pid::from_raw(self.pid), Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline && Path::new(&format!("/proc/{}", self.pid)).exists() {
            thread::sleep(Duration::from_millis(10));
        }
        if Path::new(&format!("/proc/{}", self.pid)).exists() {
            let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// /proc/PID of process (or thread) `pid`; panics if it is gone.
fn proc_of(pid: u32) -> procfs::process::Process {
    let pid = i32::try_from(pid).expect("a pid fits an i32");
    procfs::process::Process::new(pid).expect("process gone")
}

/// CPU seconds (user and system) process `pid` has used.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = proc_of(pid).stat().expect("process gone");
    let ticks = stat.utime as f64 + stat.stime as f64;
    ticks / procfs::ticks_per_second() as f64
}

/// CPU seconds process `pid` uses over `span`.
pub fn cpu_over(pid: u32, span: Duration) -> f64 {
    let before = cpu_seconds(pid);
    thread::sleep(span);
    cpu_seconds(pid) - before
}

/// A field of /proc/PID/status, e.g. "VmRSS" (in KiB) or "CapEff" (hex),
/// as the kernel wrote it.
///
/// Read by hand, not with procfs: procfs parses the file into typed fields
/// and keeps none by its name, while callers ask for any field by name and
/// compare or parse its text themselves (Threads, NoNewPrivs, the Cap*
/// sets); giving that text back from typed values would mean formatting
/// each field again the way the kernel does.
pub fn proc_status(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("process gone");
    status
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .trim()
        .to_owned()
}

/// The resident set size of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = proc_of(pid).status().expect("process gone");
    status
        .vmrss
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"))
}

/// Waits (at most `within`) for `child` to exit; kills it and panics if it
/// does not.
pub fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {within:?}");
        }
        thread::sleep(Duration::from_millis(10));
    }
}
