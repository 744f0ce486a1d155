//! Network namespaces, links and a running mpbridge for the daemon tests,
//! on the `lab` crate that mpbench uses too: each piece removes what it
//! made when dropped, also when a test fails.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

#[allow(unused_imports)] // each test file uses some of them
pub use lab::{
    cpu_over, cpu_seconds, mac, privileged, proc_status, rss_kib, tagged_test_frame, test_frame,
    unique, wait_exit, Station, BROADCAST,
};

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

/// A network namespace, deleted (with every link in it) on drop; what
/// fails here fails the test.
pub struct Netns(lab::Netns);

impl std::ops::Deref for Netns {
    type Target = lab::Netns;

    fn deref(&self) -> &lab::Netns {
        &self.0
    }
}

impl Netns {
    /// A namespace without IPv6, so that the only frames on its links are
    /// the ones a test makes (and IPv4's ARP): counters can be exact.
    pub fn new() -> Netns {
        let ns = lab::Netns::new("t").expect("cannot make a network namespace");
        for path in [
            "net/ipv6/conf/all/disable_ipv6",
            "net/ipv6/conf/default/disable_ipv6",
        ] {
            ns.sysctl(path, "1").expect("cannot turn IPv6 off");
        }
        Netns(ns)
    }

    /// Makes this host `i`: its `eth0` at 198.18.0.(i+1)/24 (the address
    /// [`Topology::addr`] gives), up.
    pub fn host_address(&self, i: usize) {
        let addr = format!("{}/24", Topology::addr(i));
        self.ip(&["addr", "add", &addr, "dev", "eth0"]);
        self.ip(&["link", "set", "eth0", "up"]);
    }

    /// Runs `ip -n NAME args`.
    pub fn ip(&self, args: &[&str]) {
        if let Err(error) = self.0.ip(args) {
            panic!("{error}");
        }
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
        let inner = self.0.spawn(f);
        thread::spawn(move || match inner.join() {
            Ok(Ok(value)) => value,
            Ok(Err(error)) => panic!("{error}"),
            Err(panic) => std::panic::resume_unwind(panic),
        })
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
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &ns.name, env!("CARGO_BIN_EXE_mpbridge")])
            .args(named(args))
            .envs(env.iter().copied());
        Self::spawn(command)
    }

    /// Starts mpbridge with `args` here, in the test's own namespace: for
    /// bridges of ports that need none (vhost-user sockets).
    pub fn start_here(args: &[&str]) -> Daemon {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mpbridge"));
        command.args(named(args));
        Self::spawn(command)
    }

    /// Starts `command` and waits (at most 10 s) for mpbridge's ready line.
    fn spawn(mut command: Command) -> Daemon {
        let mut child = command
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
        Topology::with_options(kind, &vec![""; hosts], extra)
    }

    /// One host per entry of `options`, its port given those options
    /// (`access=10`; empty for none).
    pub fn with_options(kind: PortKind, options: &[&str], extra: &[&str]) -> Topology {
        let bridge = Netns::new();
        let hosts: Vec<Netns> = options.iter().map(|_| Netns::new()).collect();
        let mut args = vec!["run".to_owned()];
        for (i, host) in hosts.iter().enumerate() {
            let port = format!("p{i}");
            let options = match options[i] {
                "" => String::new(),
                given => format!(",{given}"),
            };
            if kind == PortKind::Raw {
                host.add_veth(&port, &bridge).expect("veth");
                args.push(format!("--port=raw:{port}{options}"));
            } else {
                args.push(format!("--port=tap:{port}{options}"));
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
            host.host_address(i);
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

impl Topology {
    /// A station on every host, once frames of the set-up have passed.
    pub fn stations(&self) -> Vec<Station> {
        let mut stations: Vec<Station> = self.hosts.iter().map(|host| Station::on(host)).collect();
        settle_counts(&mut stations);
        stations
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        // The daemon first, so that its taps go before their namespaces.
        self.daemon.take();
    }
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
    tcp_transfer_to(&hosts[from], &hosts[to], Topology::addr(to), port, seed)
}

/// `tcp_transfer` from namespace `from` to `to`, whose address is `addr`.
pub fn tcp_transfer_to(from: &Netns, to: &Netns, addr: std::net::Ipv4Addr, port: u16, seed: u64) {
    let server_addr = SocketAddr::from((addr, port));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = to.spawn(move || {
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
    from.run(move || {
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
        .args(named(args))
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

/// `args` with a bridge name of this test's own added to a `run` that names
/// none, so that bridges of tests running at once have control sockets of
/// their own.
pub fn named(args: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let names = |a: &String| a.starts_with("--name") || a.starts_with("--ctl");
    if args.first().is_some_and(|a| a == "run") && !args.iter().any(names) {
        args.push(format!("--name={}", unique("t")));
    }
    args
}

/// Lets frames in flight arrive (250 ms), then says how many test frames
/// each station got.
pub fn settle_counts(stations: &mut [Station]) -> Vec<usize> {
    thread::sleep(Duration::from_millis(250));
    stations
        .iter_mut()
        .map(|s| s.collect(Duration::from_millis(1)).len())
        .collect()
}

/// Runs `f` while byte-checked TCP transfers go back and forth between
/// hosts 0 and 1, one after another on ports from `first_port` on, and
/// checks that at least one completed; returns what `f` returned.
pub fn while_tcp_flows<T>(hosts: &[Netns], first_port: u16, f: impl FnOnce() -> T) -> T {
    let stop = std::sync::atomic::AtomicBool::new(false);
    thread::scope(|scope| {
        let stop = &stop;
        let transfers = scope.spawn(move || {
            let mut count = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let port = first_port + count as u16;
                tcp_transfer(hosts, count % 2, 1 - count % 2, port, count as u64);
                count += 1;
            }
            count
        });
        // Stops the transfers also when `f` panics, or the scope would
        // wait for them for ever.
        struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let result = {
            let _stop = Stop(stop);
            f()
        };
        let count = transfers.join().expect("a transfer failed");
        assert!(count >= 1, "no transfer completed");
        result
    })
}

/// Runs the client: `mpbridge --ctl PATH args`; returns exit code, stdout
/// and stderr.
pub fn ctl(socket: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_mpbridge"))
        .arg("--ctl")
        .arg(socket)
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The client's JSON output of `args` (which must succeed).
pub fn ctl_json(socket: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let (code, out, err) = ctl(socket, args);
    assert_eq!(code, 0, "mpbridge {args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Runs the client, which must succeed.
pub fn ctl_ok(socket: &std::path::Path, args: &[&str]) {
    let (code, _, err) = ctl(socket, args);
    assert_eq!(code, 0, "mpbridge {args:?}: {err}");
}

/// The counters of `port` in a `stats --json` reply.
pub fn port_stats(stats: &serde_json::Value, port: &str) -> serde_json::Value {
    stats["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == port)
        .unwrap_or_else(|| panic!("no {port} in {stats}"))
        .clone()
}

/// A control socket path of a test's own, and the `--ctl` argument for it.
pub fn ctl_socket(prefix: &str) -> (std::path::PathBuf, String) {
    let socket = std::env::temp_dir()
        .join(unique(prefix))
        .with_extension("sock");
    let arg = format!("--ctl={}", socket.display());
    (socket, arg)
}

/// A folder of a test's own (for sockets), removed on drop.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> TempDir {
        let dir = std::env::temp_dir().join(unique(prefix));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// mpbridge started here with `ports` (vhost-user ones need no namespace)
/// and `extra` options, its control socket in `dir`.
pub fn bridge_here(
    dir: &TempDir,
    ports: &[String],
    extra: &[&str],
) -> (Daemon, std::path::PathBuf) {
    let ctl = dir.path("ctl.sock");
    let mut args = vec!["run".to_owned(), format!("--ctl={}", ctl.display())];
    args.extend(ports.iter().map(|p| format!("--port={p}")));
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    (Daemon::start_here(&args), ctl)
}

/// One test per lock strategy, each calling `$body` with the strategy's
/// name: `strategy_tests!(body: t_mutex, t_rwlock, t_rmlock, t_sharded,
/// t_rcu, t_epoch);`.
#[macro_export]
macro_rules! strategy_tests {
    ($body:ident: $mutex:ident, $rwlock:ident, $rmlock:ident, $sharded:ident, $rcu:ident, $epoch:ident) => {
        fn $mutex() {
            $body("mutex")
        }
        fn $rwlock() {
            $body("rwlock")
        }
        fn $rmlock() {
            $body("rmlock")
        }
        fn $sharded() {
            $body("sharded")
        }
        fn $rcu() {
            $body("rcu")
        }
        fn $epoch() {
            $body("epoch")
        }
    };
}

/// A scenario for the six strategies and, as `$linux`, with the Linux
/// reference in mpbridge's place: `$body("linux")`.
#[macro_export]
macro_rules! reference_tests {
    ($body:ident: $($strategy:ident),+; $linux:ident) => {
        strategy_tests!($body: $($strategy),+);
        fn $linux() {
            $body("linux")
        }
    };
}
