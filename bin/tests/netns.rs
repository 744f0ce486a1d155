//! Network namespaces, links and a running mpbridge for the daemon tests:
//! each piece removes what it made when dropped, also when a test fails.
#![allow(dead_code)]

#[path = "../mpbench/lab.rs"]
mod lab;

use std::fs::File;

use bridge::wire::{EtherType, FrameSpec, MacAddr, Payload};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Why this process cannot run the tests that need namespaces, taps and
/// packet sockets, found by trying to make each (not by the uid: root in a
/// container without CAP_NET_ADMIN cannot); `None` when it can. Tried once.
pub fn privilege_problem() -> Option<String> {
    static PROBLEM: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    PROBLEM.get_or_init(probe_privileges).clone()
}

fn probe_privileges() -> Option<String> {
    let ip = Command::new("ip").arg("-V").output();
    if !ip.is_ok_and(|o| o.status.success()) {
        return Some("needs iproute2 (the ip command)".to_owned());
    }
    let name = unique("mpbprobe");
    let made = Command::new("ip").args(["netns", "add", &name]).output();
    match made {
        Ok(output) if output.status.success() => {}
        Ok(output) => {
            let why = String::from_utf8_lossy(&output.stderr);
            return Some(format!(
                "cannot make a network namespace (needs CAP_SYS_ADMIN): {}",
                why.lines().next().unwrap_or("").trim()
            ));
        }
        Err(e) => return Some(format!("cannot run ip: {e}")),
    }
    let ns = Netns { name };
    ns.run(|| {
        if let Err(e) = bridge::port::TapPort::open("probe0", 1) {
            return Some(format!("cannot make a tap (needs CAP_NET_ADMIN): {e}"));
        }
        // SAFETY: a constant-argument socket call; the result is closed at
        // once.
        #[allow(unsafe_code)]
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Some(format!(
                "cannot open a packet socket (needs CAP_NET_RAW): {e}"
            ));
        }
        // SAFETY: `fd` was just opened here and is closed once.
        #[allow(unsafe_code)]
        unsafe {
            libc::close(fd);
        }
        None
    })
}

/// Whether this process may make namespaces and links. When it may not,
/// prints why and returns false, unless MPBRIDGE_REQUIRE_PRIV=1 asks for a
/// failure instead.
pub fn privileged(test: &str) -> bool {
    let Some(reason) = privilege_problem() else {
        return true;
    };
    if std::env::var("MPBRIDGE_REQUIRE_PRIV").as_deref() == Ok("1") {
        panic!("{test}: {reason}, and MPBRIDGE_REQUIRE_PRIV=1 forbids skipping");
    }
    eprintln!("skipped {test}: {reason}");
    false
}

/// One test of a suite run by [`run_tests`].
pub struct Test {
    /// Its name.
    pub name: &'static str,
    /// Its body; it fails by panicking.
    pub run: fn(),
    /// Whether it needs namespaces, taps and packet sockets.
    pub privileged: bool,
}

/// Runs a suite as `cargo test` would, with one difference: where the
/// privileges are missing, the tests that need them are reported as
/// ignored, with the reason, rather than passing without having run; under
/// MPBRIDGE_REQUIRE_PRIV=1 (CI) they fail instead.
pub fn run_tests(tests: Vec<Test>) -> ! {
    let args = libtest_mimic::Arguments::from_args();
    let problem = privilege_problem();
    let required = std::env::var("MPBRIDGE_REQUIRE_PRIV").as_deref() == Ok("1");
    if let (Some(reason), false) = (&problem, required) {
        let count = tests.iter().filter(|t| t.privileged).count();
        eprintln!("ignoring {count} tests that need privileges: {reason}");
    }
    let trials = tests
        .into_iter()
        .map(|test| {
            let run = test.run;
            match (&problem, test.privileged) {
                (Some(reason), true) if required => {
                    let message = format!("{reason}, and MPBRIDGE_REQUIRE_PRIV=1 forbids skipping");
                    libtest_mimic::Trial::test(test.name, move || Err(message.into()))
                }
                (Some(_), true) => libtest_mimic::Trial::test(test.name, move || {
                    run();
                    Ok(())
                })
                .with_ignored_flag(true),
                _ => libtest_mimic::Trial::test(test.name, move || {
                    run();
                    Ok(())
                }),
            }
        })
        .collect();
    libtest_mimic::run(&args, trials).exit()
}

/// `fn main` for a test file: `test_main!(privileged: [a, b], plain: [c])`.
#[macro_export]
macro_rules! test_main {
    (privileged: [$($p:ident),* $(,)?], plain: [$($q:ident),* $(,)?] $(,)?) => {
        fn main() {
            netns::run_tests(vec![
                $(netns::Test { name: stringify!($p), run: $p, privileged: true },)*
                $(netns::Test { name: stringify!($q), run: $q, privileged: false },)*
            ])
        }
    };
}

/// Runs `ip` with `args`; panics with its error output if it fails.
pub fn ip(args: &[&str]) {
    let output = Command::new("ip")
        .args(args)
        .output()
        .expect("cannot run ip");
    assert!(
        output.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

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

/// A network namespace, deleted (with every link in it) on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new() -> Netns {
        let name = unique("mpbt");
        ip(&["netns", "add", &name]);
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// Runs `ip -n NAME args`.
    pub fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        ip(&all);
    }

    /// Runs `f` on a thread that entered this namespace; returns its result.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        self.spawn(f)
            .join()
            .expect("a thread in the namespace panicked")
    }

    /// Like `run`, but returns at once with a handle.
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> thread::JoinHandle<T> {
        let path = format!("/run/netns/{}", self.name);
        thread::spawn(move || {
            let file = File::open(&path).expect("cannot open the namespace");
            // SAFETY: as in `run`.
            #[allow(unsafe_code)]
            let ret = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(ret, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A running mpbridge, stopped with SIGTERM (then SIGKILL) on drop.
pub struct Daemon {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
    pub log: Vec<String>,
}

impl Daemon {
    /// Starts mpbridge with `args` inside namespace `ns` and waits (at most
    /// 10 s) for its ready line.
    pub fn start(ns: &Netns, args: &[&str]) -> Daemon {
        Self::start_with(ns, args, &[])
    }

    /// `start` with extra environment variables.
    pub fn start_with(ns: &Netns, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns.name, env!("CARGO_BIN_EXE_mpbridge")])
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start mpbridge");
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut daemon = Daemon {
            child,
            lines,
            log: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match daemon.lines.recv_timeout(left) {
                Ok(line) => {
                    let ready = line.contains("ready");
                    daemon.log.push(line);
                    if ready {
                        return daemon;
                    }
                }
                Err(_) => panic!("mpbridge not ready within 10 s: {:?}", daemon.log),
            }
        }
    }

    /// Sends SIGTERM and waits (at most `within`) for the exit; returns the
    /// exit status and everything it printed.
    pub fn stop(self, within: Duration) -> (Option<std::process::ExitStatus>, Vec<String>) {
        self.stop_with(libc::SIGTERM, within)
    }

    /// `stop` with another signal.
    pub fn stop_with(
        mut self,
        signal: libc::c_int,
        within: Duration,
    ) -> (Option<std::process::ExitStatus>, Vec<String>) {
        // SAFETY: kill has no memory preconditions; the pid is our child's.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, signal);
        }
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break Some(status);
            }
            if Instant::now() > deadline {
                break None;
            }
            thread::sleep(Duration::from_millis(20));
        };
        let end = Instant::now() + Duration::from_secs(2);
        while let Ok(line) = self
            .lines
            .recv_timeout(end.saturating_duration_since(Instant::now()))
        {
            self.log.push(line);
        }
        (status, std::mem::take(&mut self.log))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        lab::stop_child(&mut self.child);
    }
}

/// How a host reaches the bridge.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PortKind {
    /// mpbridge makes a tap, which is then moved into the host's namespace.
    Tap,
    /// A veth pair: the host keeps one end, mpbridge opens the other raw.
    Raw,
}

/// A bridge namespace running mpbridge and N host namespaces, each with one
/// interface `eth0` addressed 198.18.0.(i+1)/24 and linked to one port.
pub struct Topology {
    pub daemon: Option<Daemon>,
    pub hosts: Vec<Netns>,
    pub bridge: Netns,
}

impl Topology {
    pub fn new(kind: PortKind, hosts: usize, extra: &[&str]) -> Topology {
        let bridge = Netns::new();
        let hosts: Vec<Netns> = (0..hosts).map(|_| Netns::new()).collect();
        let mut args = vec!["run".to_owned()];
        for (i, host) in hosts.iter().enumerate() {
            let port = format!("p{i}");
            if kind == PortKind::Raw {
                host.ip(&[
                    "link",
                    "add",
                    "eth0",
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &port,
                    "netns",
                    &bridge.name,
                ]);
                args.push(format!("--port=raw:{port}"));
            } else {
                args.push(format!("--port=tap:{port}"));
            }
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let daemon = Daemon::start(&bridge, &args);
        for (i, host) in hosts.iter().enumerate() {
            if kind == PortKind::Tap {
                let port = format!("p{i}");
                bridge.ip(&["link", "set", &port, "netns", &host.name]);
                host.ip(&["link", "set", &port, "name", "eth0"]);
            }
            let addr = format!("198.18.0.{}/24", i + 1);
            host.ip(&["addr", "add", &addr, "dev", "eth0"]);
            host.ip(&["link", "set", "eth0", "up"]);
        }
        Topology {
            daemon: Some(daemon),
            hosts,
            bridge,
        }
    }

    /// The IPv4 address of host `i`.
    pub fn addr(i: usize) -> std::net::Ipv4Addr {
        std::net::Ipv4Addr::new(198, 18, 0, i as u8 + 1)
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        // The daemon first, so that its taps go before their namespaces.
        self.daemon.take();
    }
}

/// A test station: a packet socket on a host's `eth0` that sends frames
/// and collects the frames of the test EtherType that arrive.
pub struct Station {
    port: bridge::port::RawPort,
    batch: bridge::port::RxBatch,
}

/// The IEEE local experimental EtherType: nothing but the tests sends it.
pub const TEST_ETHERTYPE: u16 = 0x88b5;

impl Station {
    pub fn on(host: &Netns) -> Station {
        let port = host.run(|| {
            let mut ports = bridge::port::RawPort::open("eth0", 1).expect("packet socket on eth0");
            ports.pop().unwrap()
        });
        Station {
            port,
            batch: bridge::port::RxBatch::new(64, 65_600),
        }
    }

    /// Sends one Ethernet frame (no virtio-net header: one is added).
    pub fn send(&mut self, frame: &[u8]) {
        use bridge::port::Port;
        let mut buffer = vec![0u8; bridge::port::VNET_HDR_LEN];
        buffer.extend_from_slice(frame);
        let sent = self
            .port
            .send_batch(std::iter::once(&buffer[..]))
            .into_result()
            .expect("send");
        assert_eq!(sent, 1, "frame not sent");
    }

    /// The test frames that arrive within `wait` (Ethernet frames only).
    pub fn collect(&mut self, wait: Duration) -> Vec<Vec<u8>> {
        use bridge::port::Port;
        let deadline = Instant::now() + wait;
        let mut frames = Vec::new();
        while Instant::now() < deadline {
            self.batch.clear();
            self.port.recv_batch(&mut self.batch).expect("receive");
            for frame in self.batch.iter() {
                let frame = &frame[bridge::port::VNET_HDR_LEN..];
                if is_test_frame(frame) {
                    frames.push(frame.to_vec());
                }
            }
            if self.batch.is_empty() {
                thread::sleep(Duration::from_millis(5));
            }
        }
        frames
    }

    /// Sends frames (Ethernet only: headers are added) in batches; returns
    /// how many the socket took.
    pub fn send_many(&mut self, frames: &[Vec<u8>]) -> usize {
        use bridge::port::Port;
        let buffers: Vec<Vec<u8>> = frames
            .iter()
            .map(|frame| {
                let mut buffer = vec![0u8; bridge::port::VNET_HDR_LEN];
                buffer.extend_from_slice(frame);
                buffer
            })
            .collect();
        self.port.send_batch(buffers.iter().map(Vec::as_slice)).sent
    }

    /// Drops whatever arrived so far.
    pub fn clear(&mut self) {
        self.collect(Duration::from_millis(1));
    }
}

fn is_test_frame(frame: &[u8]) -> bool {
    let ethertype = |at: usize| {
        frame
            .get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    match ethertype(12) {
        Some(TEST_ETHERTYPE) => true,
        Some(0x8100) => ethertype(16) == Some(TEST_ETHERTYPE),
        _ => false,
    }
}

/// A test frame from `src` to `dst`, `len` bytes, payload tagged with `tag`.
pub fn test_frame(dst: [u8; 6], src: [u8; 6], tag: u8, len: usize) -> Vec<u8> {
    test_spec(dst, src, tag, len).build()
}

/// The same, with an 802.1Q tag for `vlan`.
pub fn tagged_test_frame(dst: [u8; 6], src: [u8; 6], vlan: u16, tag: u8, len: usize) -> Vec<u8> {
    test_spec(dst, src, tag, len).tagged(vlan).build()
}

fn test_spec(dst: [u8; 6], src: [u8; 6], tag: u8, len: usize) -> FrameSpec {
    FrameSpec::new(MacAddr(dst), MacAddr(src))
        .ethertype(EtherType(TEST_ETHERTYPE))
        .len(len)
        .payload(Payload::Fill(tag))
}

/// A locally administered unicast MAC ending in `n`.
pub fn mac(n: u16) -> [u8; 6] {
    let b = n.to_be_bytes();
    [0x02, 0x42, 0x00, 0x00, b[0], b[1]]
}

pub const BROADCAST: [u8; 6] = [0xff; 6];

/// CPU seconds (user and system) process `pid` has used.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("process gone");
    // Fields after the command name, which ends at the last ')'.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    #[allow(unsafe_code)]
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / hz
}

/// CPU seconds process `pid` uses over `span`.
pub fn cpu_over(pid: u32, span: Duration) -> f64 {
    let before = cpu_seconds(pid);
    thread::sleep(span);
    cpu_seconds(pid) - before
}

/// A field of /proc/PID/status, e.g. "VmRSS" (in KiB) or "CapEff" (hex).
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
    proc_status(pid, "VmRSS")
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap()
}

/// The hardware address of `dev` in namespace `ns`.
pub fn link_mac(ns: &Netns, dev: &str) -> [u8; 6] {
    let output = Command::new("ip")
        .args(["-n", &ns.name, "-o", "link", "show", dev])
        .output()
        .expect("ip");
    let text = String::from_utf8_lossy(&output.stdout);
    let at = text.find("link/ether ").expect("no ether address") + "link/ether ".len();
    let mut mac = [0u8; 6];
    for (byte, part) in mac.iter_mut().zip(text[at..at + 17].split(':')) {
        *byte = u8::from_str_radix(part, 16).unwrap();
    }
    mac
}

/// One named counter from a port's line of the final report.
pub fn port_counter(log: &[String], port: &str, counter: &str) -> u64 {
    let line = log
        .iter()
        .find(|l| l.contains(&format!("{port}: rx")))
        .unwrap_or_else(|| panic!("no counters for {port}: {log:?}"));
    let at = line
        .find(&format!(" {counter} "))
        .unwrap_or_else(|| panic!("no {counter} in {line}"))
        + counter.len()
        + 2;
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

pub const TRANSFER: usize = 8 << 20;

/// Deterministic, incompressible-looking bytes.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// Sends TRANSFER bytes from host `from` to host `to` over TCP (ARP first,
/// implicitly) and checks every byte. Every step is bounded in time.
pub fn tcp_transfer(hosts: &[Netns], from: usize, to: usize, port: u16, seed: u64) {
    let server_addr = SocketAddr::from((Topology::addr(to), port));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = hosts[to].spawn(move || {
        let listener = TcpListener::bind(server_addr).expect("bind");
        listener.set_nonblocking(true).unwrap();
        ready_tx.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut stream = loop {
            match listener.accept() {
                Ok((stream, _)) => break stream,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => panic!("accept: {e}"),
            }
        };
        stream.set_nonblocking(false).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut received = Vec::with_capacity(TRANSFER);
        stream.read_to_end(&mut received).expect("read");
        received
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("server not listening");
    hosts[from].run(move || {
        let mut stream =
            TcpStream::connect_timeout(&server_addr, Duration::from_secs(10)).expect("connect");
        stream
            .set_write_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        stream.write_all(&pattern(TRANSFER, seed)).expect("write");
        stream.shutdown(std::net::Shutdown::Write).unwrap();
    });
    let received = server.join().expect("server panicked");
    assert_eq!(received.len(), TRANSFER, "byte count");
    assert!(received == pattern(TRANSFER, seed), "content differs");
}

/// Writes `buf` to descriptor `fd` (a tap queue); returns what was written.
pub fn write_fd(fd: &std::os::fd::OwnedFd, buf: &[u8]) -> usize {
    // SAFETY: `buf` is valid for reads of its length.
    #[allow(unsafe_code)]
    let n = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
    assert!(n >= 0, "write: {}", std::io::Error::last_os_error());
    n as usize
}

/// Reads one frame from non-blocking descriptor `fd`, if one waits.
pub fn read_fd(fd: &std::os::fd::OwnedFd, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: `buf` is valid for writes of its length.
    #[allow(unsafe_code)]
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    (n >= 0).then_some(n as usize)
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

/// Runs mpbridge with `args` (in namespace `ns`, if given) until it exits,
/// at most `within`; returns its exit status and stderr.
pub fn run_to_exit(
    ns: Option<&Netns>,
    args: &[&str],
    within: Duration,
) -> (std::process::ExitStatus, String) {
    let mut command = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &ns.name, env!("CARGO_BIN_EXE_mpbridge")]);
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_mpbridge")),
    };
    let mut child = command
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start mpbridge");
    // Read stderr while waiting, so that a chatty child never blocks.
    let mut stderr = child.stderr.take().unwrap();
    let reader = thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let status = wait_exit(&mut child, within);
    (status, reader.join().unwrap())
}
