//! vhost-user ports against a frontend written for the tests (`lab::vhost`,
//! on the `vhost` crate's frontend side, with memfd memory): negotiation,
//! learning and flooding, a hostile driver, disconnects and reconnects,
//! client mode, queue pairs, and the socket's life. Needs no privileges:
//! the frames cross shared memory only.

mod netns;

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lab::vhost::{
    Frontend, CSUM, EVENT_IDX, GUEST_CSUM, GUEST_TSO4, HEADER, HOST_TSO4, MQ, MRG_RXBUF,
    PROTOCOL_FEATURES, VERSION_1,
};
use netns::{bridge_here, ctl_json, ctl_ok, mac, port_stats, test_frame, TempDir, BROADCAST};

/// What a QEMU or DPDK frontend takes of what mpbridge offers.
const FEATURES: u64 = VERSION_1 | MRG_RXBUF | EVENT_IDX | PROTOCOL_FEATURES | MQ;

fn port(path: &Path) -> String {
    format!("vhost:{}", path.display())
}

/// Waits (at most 5 s) until `port`'s link reads `link` in `stats`.
fn wait_link(ctl: &Path, port: &str, link: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = ctl_json(ctl, &["stats", "--json"]);
        let now = port_stats(&stats, port)["link"].clone();
        if now == link {
            return;
        }
        assert!(Instant::now() < deadline, "{port}: link {now}, not {link}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The frames `frontend` got on pair 0 within a short quiet time.
fn frames(frontend: &mut Frontend) -> Vec<Vec<u8>> {
    // Long enough for a worker on a loaded 2-core machine to get a turn.
    frontend
        .receive(0, Duration::from_millis(500))
        .into_iter()
        .map(|(_, frame)| frame)
        .collect()
}

/// Asserts that `got` are `want`, saying how they differ in a line.
fn same(got: &[Vec<u8>], want: &[Vec<u8>]) {
    let brief = |frames: &[Vec<u8>]| -> Vec<String> {
        frames
            .iter()
            .map(|f| format!("{} bytes {:02x?}", f.len(), &f[..f.len().min(16)]))
            .collect()
    };
    assert!(got == want, "got {:?}, want {:?}", brief(got), brief(want));
}

fn vhost_counter(ctl: &Path, port: &str, name: &str) -> u64 {
    let stats = ctl_json(ctl, &["stats", "--json"]);
    port_stats(&stats, port)["vhost"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no vhost counter {name} in {stats}"))
}

/// Two frontends on a bridge of three ports: flooding, learning, and
/// unicast to the one port that has the station.
fn learning_and_flooding(lock: &str) {
    let dir = TempDir::new("vhost");
    let sockets: Vec<PathBuf> = (0..3).map(|i| dir.path(&format!("p{i}.sock"))).collect();
    let ports: Vec<String> = sockets.iter().map(|s| port(s)).collect();
    let (daemon, ctl) = bridge_here(&dir, &ports, &["--lock", lock]);
    let mut fronts: Vec<Frontend> = sockets
        .iter()
        .map(|s| Frontend::connect(s, 1, FEATURES).expect("negotiates"))
        .collect();
    for (front, port) in fronts.iter_mut().zip(&ports) {
        wait_link(&ctl, port, "up");
        assert_eq!(
            front.features, FEATURES,
            "every feature asked for is offered"
        );
        front.post_room(0, 64);
    }
    let (a, b, c) = (mac(1), mac(2), mac(3));
    // A broadcast from a reaches b's and c's ports, not its own.
    let hello = test_frame(BROADCAST, a, 1, 60);
    assert!(fronts[0].send(0, &hello));
    same(&frames(&mut fronts[1]), std::slice::from_ref(&hello));
    same(&frames(&mut fronts[2]), std::slice::from_ref(&hello));
    assert!(frames(&mut fronts[0]).is_empty());
    // b answers a: a is known, so only a's port has it.
    let answer = test_frame(a, b, 2, 1514);
    assert!(fronts[1].send(0, &answer));
    same(&frames(&mut fronts[0]), std::slice::from_ref(&answer));
    assert!(frames(&mut fronts[2]).is_empty());
    // To b, now known: only b's port.
    let to_b = test_frame(b, a, 3, 512);
    assert!(fronts[0].send(0, &to_b));
    same(&frames(&mut fronts[1]), std::slice::from_ref(&to_b));
    assert!(frames(&mut fronts[2]).is_empty());
    // An unknown destination floods.
    let unknown = test_frame(c, a, 4, 60);
    assert!(fronts[0].send(0, &unknown));
    assert_eq!(frames(&mut fronts[1]).len(), 1);
    assert_eq!(frames(&mut fronts[2]).len(), 1);
    // The table names the vhost ports.
    let (code, out, _) = netns::ctl(&ctl, &["fdb", "show"]);
    assert_eq!(code, 0);
    for (station, port) in [(a, &ports[0]), (b, &ports[1])] {
        let text = station.map(|b| format!("{b:02x}")).join(":");
        assert!(
            out.lines()
                .any(|l| l.starts_with(&text) && l.contains(&format!("port {port} "))),
            "{text} on {port}: {out}"
        );
    }
    let stats = ctl_json(&ctl, &["stats", "--json"]);
    let first = port_stats(&stats, &ports[0]);
    assert_eq!(first["rx_frames"], 3, "{first}");
    assert_eq!(first["tx_frames"], 1, "{first}");
    assert_eq!(first["vhost"]["connects"], 1, "{first}");
    drop(fronts);
    let (status, log) = daemon.stop(Duration::from_secs(5));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    for socket in &sockets {
        assert!(!socket.exists(), "{} left behind", socket.display());
    }
}

strategy_tests!(learning_and_flooding: learning_and_flooding_mutex, learning_and_flooding_rwlock,
    learning_and_flooding_rmlock, learning_and_flooding_sharded, learning_and_flooding_rcu,
    learning_and_flooding_epoch);

/// Frames of every size cross byte-identical, with and without mergeable
/// buffers and event indices, in both directions.
fn frames_cross_whole_with_each_feature_set() {
    for features in [
        FEATURES,
        VERSION_1 | PROTOCOL_FEATURES,
        VERSION_1,
        MRG_RXBUF | PROTOCOL_FEATURES,
    ] {
        let dir = TempDir::new("vhost");
        let (s0, s1) = (dir.path("a.sock"), dir.path("b.sock"));
        let (daemon, ctl) = bridge_here(&dir, &[port(&s0), port(&s1)], &[]);
        let mut a = Frontend::connect(&s0, 1, features).unwrap();
        let mut b = Frontend::connect(&s1, 1, features).unwrap();
        wait_link(&ctl, &port(&s0), "up");
        wait_link(&ctl, &port(&s1), "up");
        a.post_room(0, 200);
        b.post_room(0, 200);
        let mut sent = Vec::new();
        for (n, len) in [60, 64, 128, 512, 1000, 1514, 1518, 61, 999]
            .into_iter()
            .enumerate()
        {
            let frame = test_frame(mac(2), mac(1), n as u8, len);
            assert!(a.send(0, &frame));
            sent.push(frame);
        }
        let got = b.receive(0, Duration::from_millis(300));
        let frames: Vec<Vec<u8>> = got.iter().map(|(_, f)| f.clone()).collect();
        println!("features {features:#x}");
        same(&frames, &sent);
        for (header, _) in &got {
            assert_eq!(header.len(), a.header_len());
            if header.len() == HEADER {
                assert_eq!(&header[10..], &1u16.to_le_bytes(), "num_buffers");
            }
        }
        assert_eq!(a.sent_back(0), sent.len() as u16, "each chain returned");
        let back = test_frame(mac(1), mac(2), 9, 300);
        assert!(b.send(0, &back));
        same(&frames_of(&mut a), std::slice::from_ref(&back));
        drop((a, b));
        drop(daemon);
    }
}

fn frames_of(frontend: &mut Frontend) -> Vec<Vec<u8>> {
    frames(frontend)
}

/// A driver that breaks the rules: each bad chain is counted and returned,
/// the ring goes on, and the other ports keep forwarding; a ring outside
/// memory is refused; a bad message closes the connection, and the next
/// frontend negotiates afresh.
fn a_hostile_driver_is_counted_and_survived() {
    use bridge::port::vhost::ring::driver;
    let dir = TempDir::new("vhost");
    let (s0, s1) = (dir.path("a.sock"), dir.path("b.sock"));
    let (p0, p1) = (port(&s0), port(&s1));
    let (daemon, ctl) = bridge_here(&dir, &[p0.clone(), p1.clone()], &[]);
    let mut evil = Frontend::connect(&s0, 1, FEATURES).unwrap();
    let mut good = Frontend::connect(&s1, 1, FEATURES).unwrap();
    wait_link(&ctl, &p0, "up");
    wait_link(&ctl, &p1, "up");
    good.post_room(0, 64);
    let rx_errors = |ctl: &Path| {
        let stats = ctl_json(ctl, &["stats", "--json"]);
        port_stats(&stats, &p0)["rx_errors"].as_u64().unwrap()
    };
    let errors_before = rx_errors(&ctl);
    let tx = evil.layout(1);
    let memory_end = 0x4000_0000u64 + 0x10_0000 * 64; // far past the memfd
    let buffers = tx.desc + 0x10_0000;
    let cases: [(u16, u64, u32, u16, u16); 6] = [
        // (descriptor, addr, len, flags, next)
        (10, memory_end, 64, 0, 0),             // outside memory
        (11, buffers, 64, driver::NEXT, 11),    // a loop onto itself
        (12, buffers, 0, 0, 0),                 // zero length
        (13, buffers, 64, driver::INDIRECT, 0), // indirect, not negotiated
        (14, buffers, 64, driver::WRITE, 0),    // device-writable on transmit
        (15, buffers, 64, driver::NEXT, 300),   // next outside the ring
    ];
    for &(index, addr, len, flags, next) in &cases {
        driver::set_descriptor(evil.memory(), &tx, index, addr, len, flags, next);
        evil.make_available(1, index);
    }
    // Then a good frame: the ring goes on past the bad chains.
    let frame = test_frame(mac(2), mac(1), 7, 100);
    assert!(evil.send(0, &frame));
    same(&frames(&mut good), std::slice::from_ref(&frame));
    assert_eq!(evil.wait_used(1, 7), 7, "every chain returned");
    assert_eq!(vhost_counter(&ctl, &p0, "bad_chains"), 6);
    assert_eq!(rx_errors(&ctl) - errors_before, 6);
    // An avail index that runs ahead of the ring: the port is faulted,
    // counted once, and the bridge goes on.
    driver::set_avail_idx(evil.memory(), &tx, 7 + 1000);
    drop(evil);
    // A ring outside the memory table is refused.
    let mut outside = Frontend::connect(&s0, 1, FEATURES).unwrap();
    wait_link(&ctl, &p0, "up");
    {
        use vhost::VhostBackend;
        let c = outside.connection();
        let config = vhost::VringConfigData {
            queue_max_size: 256,
            queue_size: 256,
            flags: 0,
            desc_table_addr: memory_end,
            used_ring_addr: memory_end,
            avail_ring_addr: memory_end,
            log_addr: None,
        };
        c.set_vring_addr(1, &config).unwrap();
    }
    wait_link(&ctl, &p0, "down");
    assert!(vhost_counter(&ctl, &p0, "bad_rings") >= 1);
    drop(outside);
    // Garbage on the socket closes the connection; it is counted.
    let before = vhost_counter(&ctl, &p0, "bad_messages");
    {
        use std::io::Write;
        let mut raw = UnixStream::connect(&s0).unwrap();
        // A header of request 0xffff with a body length past the maximum.
        let mut garbage = Vec::new();
        garbage.extend_from_slice(&0xffffu32.to_le_bytes());
        garbage.extend_from_slice(&1u32.to_le_bytes());
        garbage.extend_from_slice(&0x00ff_ffff_u32.to_le_bytes());
        raw.write_all(&garbage).unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 16];
        let n = std::io::Read::read(&mut raw, &mut buf).unwrap_or(0);
        assert_eq!(n, 0, "the connection is closed");
    }
    assert_eq!(vhost_counter(&ctl, &p0, "bad_messages"), before + 1);
    // A frontend that goes away in the middle of negotiating.
    {
        use vhost::VhostBackend;
        let stream = UnixStream::connect(&s0).unwrap();
        let c = vhost::vhost_user::Frontend::from_stream(stream, 2);
        c.set_owner().unwrap();
        c.get_features().unwrap();
    }
    // The next frontend negotiates afresh and frames pass again.
    let mut again = Frontend::connect(&s0, 1, FEATURES).unwrap();
    wait_link(&ctl, &p0, "up");
    let frame = test_frame(mac(2), mac(5), 8, 200);
    assert!(again.send(0, &frame));
    same(&frames(&mut good), std::slice::from_ref(&frame));
    // The good port forwarded throughout; the daemon never died.
    let (status, log) = daemon.stop(Duration::from_secs(5));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    assert!(!log.iter().any(|l| l.contains("panicked")), "{log:?}");
}

/// A bridge of three vhost-user ports, each with a frontend, their links
/// up: one frontend to turn hostile, two to forward beside it.
struct Hostile {
    dir: TempDir,
    daemon: netns::Daemon,
    ctl: PathBuf,
    evil_port: String,
    evil: Frontend,
    a: Frontend,
    b: Frontend,
}

impl Hostile {
    fn start() -> Hostile {
        let dir = TempDir::new("vhost");
        let sockets = [dir.path("e.sock"), dir.path("a.sock"), dir.path("b.sock")];
        let ports: Vec<String> = sockets.iter().map(|s| port(s)).collect();
        let (daemon, ctl) = bridge_here(&dir, &ports, &[]);
        let mut fronts = sockets
            .iter()
            .map(|s| Frontend::connect(s, 1, FEATURES).unwrap());
        let (evil, a, b) = (
            fronts.next().unwrap(),
            fronts.next().unwrap(),
            fronts.next().unwrap(),
        );
        for p in &ports {
            wait_link(&ctl, p, "up");
        }
        Hostile {
            dir,
            daemon,
            ctl,
            evil_port: ports[0].clone(),
            evil,
            a,
            b,
        }
    }
}

/// Makes `fd`, which the frontend shares with the device, blocking again.
fn clear_nonblock(fd: &impl std::os::fd::AsRawFd) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    // SAFETY: the descriptor is open for as long as `fd` is borrowed.
    #[allow(unsafe_code)]
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd.as_raw_fd()) };
    fcntl(fd, FcntlArg::F_SETFL(OFlag::empty())).expect("F_SETFL");
}

/// A frontend that turns its kick and call eventfds blocking (the open
/// file description is shared) and fills a call eventfd's counter, so that
/// reading an empty kick or signalling the call would wait on it: the
/// worker never does, the other ports keep forwarding, `port add` works,
/// and SIGTERM stops the bridge. A kick that is not an eventfd is refused.
fn a_frontend_cannot_block_a_worker_on_its_eventfds() {
    use std::os::fd::{FromRawFd, IntoRawFd};
    use vhost::VhostBackend;
    let Hostile {
        dir,
        daemon,
        ctl,
        evil_port: p0,
        mut evil,
        mut a,
        mut b,
    } = Hostile::start();
    for index in [0, 1] {
        let (kick, call) = evil.eventfds(index);
        clear_nonblock(kick);
        clear_nonblock(call);
    }
    // The largest count an eventfd holds: a further write waits.
    evil.eventfds(0).1.write(u64::MAX - 1).unwrap();
    evil.post_room(0, 64);
    a.post_room(0, 64);
    b.post_room(0, 64);
    // A broadcast goes to the hostile port too, whose call is full.
    let hello = test_frame(BROADCAST, mac(1), 1, 100);
    assert!(a.send(0, &hello));
    same(&frames(&mut b), std::slice::from_ref(&hello));
    same(&frames(&mut evil), std::slice::from_ref(&hello));
    // Idle in between (an empty kick, read before each sleep), the
    // worker goes on serving the others.
    for id in 2..6 {
        let frame = test_frame(mac(1), mac(2), id, 200);
        assert!(b.send(0, &frame));
        same(&frames(&mut a), std::slice::from_ref(&frame));
    }
    // The control socket answers (ctl_json fails otherwise).
    ctl_json(&ctl, &["stats", "--json"]);
    ctl_ok(&ctl, &["port", "add", &port(&dir.path("c.sock"))]);
    // A kick that is a pipe breaks the protocol: the connection closes.
    let before = vhost_counter(&ctl, &p0, "bad_messages");
    let (read, _write) = nix::unistd::pipe().unwrap();
    // SAFETY: `read` is a descriptor of ours, handed over whole; the
    // EventFd owns and closes it.
    #[allow(unsafe_code)]
    let pipe = unsafe { vmm_sys_util::eventfd::EventFd::from_raw_fd(read.into_raw_fd()) };
    let _ = evil.connection().set_vring_kick(1, &pipe);
    wait_link(&ctl, &p0, "down");
    assert_eq!(vhost_counter(&ctl, &p0, "bad_messages"), before + 1);
    let (status, log) = daemon.stop(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    assert!(
        log.iter().any(|l| l.contains("not an eventfd")),
        "the refusal is logged: {log:?}"
    );
}

/// Frames from `a` to `b` (a station `b` announced) in `window`: each
/// round posts as much room as `b` took, sends 32 and reads what came.
fn pump(a: &mut Frontend, b: &mut Frontend, window: Duration) -> usize {
    let frame = test_frame(mac(2), mac(1), 9, 100);
    let end = Instant::now() + window;
    let mut delivered = 0;
    while Instant::now() < end {
        for _ in 0..32 {
            if !a.send(0, &frame) {
                break;
            }
        }
        let got = b.receive(0, Duration::from_millis(20)).len();
        b.post_room(0, got as u16);
        delivered += got;
    }
    delivered
}

/// A driver that keeps its transmit ring (32768 entries) full of chains
/// that each run through 1024 empty descriptors and more, reposting them
/// as fast as they come back: each round the worker takes a bounded share
/// of them and serves the other ports, which forward at a rate comparable
/// to the same run without it.
fn a_hostile_ring_cannot_hold_a_worker() {
    use bridge::port::vhost::ring::driver;
    let Hostile {
        dir: _dir,
        daemon,
        ctl,
        evil_port: p0,
        mut evil,
        mut a,
        mut b,
    } = Hostile::start();
    a.post_room(0, 64);
    b.post_room(0, 64);
    // b announces itself, so that a's frames go to b alone.
    assert!(b.send(0, &test_frame(mac(1), mac(2), 1, 60)));
    assert_eq!(frames(&mut a).len(), 1);
    let window = Duration::from_secs(2);
    let quiet = pump(&mut a, &mut b, window);
    const SIZE: u16 = 32_768;
    let tx = evil.resize_ring(1, SIZE).unwrap();
    for index in 0..SIZE {
        let last = index == SIZE - 1;
        let (flags, next) = if last {
            (0, 0)
        } else {
            (driver::NEXT, index + 1)
        };
        driver::set_descriptor(evil.memory(), &tx, index, tx.desc, 0, flags, next);
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    let hostile = std::thread::scope(|scope| {
        let (memory, kick) = (evil.memory(), evil.eventfds(1).0);
        let stop = &stop;
        // Every avail entry is head 0 (the memory starts zeroed): the
        // driver keeps the index a whole ring ahead of what came back.
        scope.spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let used = driver::used_idx(memory, &tx);
                driver::set_avail_idx(memory, &tx, used.wrapping_add(SIZE));
                let _ = kick.write(1);
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let delivered = pump(&mut a, &mut b, window);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        delivered
    });
    eprintln!("a to b in {window:?}: {quiet} frames alone, {hostile} beside the hostile ring");
    assert!(quiet > 0, "frames pass at all");
    assert!(
        hostile * 5 >= quiet,
        "{hostile} frames beside the hostile ring, {quiet} without it"
    );
    assert!(vhost_counter(&ctl, &p0, "bad_chains") > 0);
    assert!(vhost_counter(&ctl, &p0, "over_budget") > 0);
    drop(evil);
    let (status, log) = daemon.stop(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
}

/// A memory table larger than the port's `max_memory`, or with a region
/// whose file is on a disk rather than tmpfs or hugetlbfs, is refused and
/// counted; the connection stays and a good table is taken after it.
fn memory_over_the_limit_or_off_tmpfs_is_refused() {
    use std::os::fd::AsRawFd;
    use vhost::{VhostBackend, VhostUserMemoryRegionInfo};
    let dir = TempDir::new("vhost");
    let (s0, s1) = (dir.path("a.sock"), dir.path("b.sock"));
    let limited = format!("{},max_memory=1M", port(&s0));
    let (p0, p1) = (port(&s0), port(&s1));
    let (daemon, ctl) = bridge_here(&dir, &[limited, p1.clone()], &[]);
    // The test frontend shares 3 MiB.
    let error = Frontend::connect(&s0, 1, FEATURES).err().expect("refused");
    assert!(error.contains("SET_MEM_TABLE"), "{error}");
    assert_eq!(vhost_counter(&ctl, &p0, "bad_memory"), 1);
    let (code, out, _) = netns::ctl(&ctl, &["port", "show"]);
    assert_eq!(code, 0);
    assert!(out.contains("max_memory=1M"), "{out}");
    // A region backed by a file in the test's directory (not tmpfs).
    let file = dir.path("memory");
    std::fs::write(&file, vec![0u8; 1 << 16]).unwrap();
    let file = std::fs::File::open(&file).unwrap();
    let stream = UnixStream::connect(&s1).unwrap();
    let c = vhost::vhost_user::Frontend::from_stream(stream, 2);
    c.set_owner().unwrap();
    c.get_features().unwrap();
    c.set_features(VERSION_1).unwrap();
    let region = |fd| VhostUserMemoryRegionInfo {
        guest_phys_addr: 0x4000_0000,
        memory_size: 1 << 16,
        userspace_addr: 0x4000_0000,
        mmap_offset: 0,
        mmap_handle: fd,
    };
    // Without REPLY_ACK the refusal shows in the counter and the log.
    let _ = c.set_mem_table(&[region(file.as_raw_fd())]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while vhost_counter(&ctl, &p1, "bad_memory") == 0 {
        assert!(Instant::now() < deadline, "the table on disk was taken");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(c);
    let (status, log) = daemon.stop(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    assert!(
        log.iter().any(|l| l.contains("over the port's max_memory")),
        "{log:?}"
    );
    assert!(
        log.iter().any(|l| l.contains("not tmpfs or hugetlbfs")),
        "{log:?}"
    );
}

/// `port del` removes the socket it bound and nothing else: not a file
/// put in the socket's place, nor a file reached through its directory
/// swapped for a symlink since.
fn port_del_removes_only_the_socket_it_bound() {
    let dir = TempDir::new("vhost");
    let (s0, s1) = (dir.path("a.sock"), dir.path("b.sock"));
    let (daemon, ctl) = bridge_here(&dir, &[port(&s0), port(&s1)], &[]);
    let sub = dir.path("sub");
    std::fs::create_dir(&sub).unwrap();
    let x = sub.join("x.sock");
    ctl_ok(&ctl, &["port", "add", &port(&x)]);
    assert!(x.exists());
    std::fs::rename(&sub, dir.path("old")).unwrap();
    let other = dir.path("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("x.sock"), b"precious").unwrap();
    std::os::unix::fs::symlink(&other, &sub).unwrap();
    ctl_ok(&ctl, &["port", "del", &port(&x)]);
    assert_eq!(
        std::fs::read(other.join("x.sock")).unwrap(),
        b"precious",
        "a file through the swapped directory stays"
    );
    assert!(
        !dir.path("old").join("x.sock").exists(),
        "the socket bound is removed where it is"
    );
    let y = dir.path("y.sock");
    ctl_ok(&ctl, &["port", "add", &port(&y)]);
    std::fs::remove_file(&y).unwrap();
    std::fs::write(&y, b"precious").unwrap();
    ctl_ok(&ctl, &["port", "del", &port(&y)]);
    assert_eq!(
        std::fs::read(&y).unwrap(),
        b"precious",
        "a file in its place stays"
    );
    let (status, log) = daemon.stop(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    assert!(!s0.exists() && !s1.exists(), "its own sockets go on stop");
}

/// A frontend that shrinks the memfd behind its memory (unsealed, as
/// DPDK's without hugepages) loses its connection, not the bridge its
/// life: the worker that touches it takes a SIGBUS, survives it, drops the
/// batch, and the port goes down until a frontend comes with new memory;
/// the other ports forward throughout.
fn a_frontend_that_shrinks_its_memory_loses_its_port() {
    let Hostile {
        dir,
        daemon,
        ctl,
        evil_port: p0,
        evil,
        mut a,
        mut b,
    } = Hostile::start();
    a.post_room(0, 64);
    b.post_room(0, 64);
    evil.shrink_memory();
    // A kick touches no memory here; the worker then reads the ring.
    evil.kick(1);
    wait_link(&ctl, &p0, "down");
    assert_eq!(vhost_counter(&ctl, &p0, "memory_faults"), 1);
    // The others forward; the daemon lives.
    let hello = test_frame(BROADCAST, mac(1), 1, 100);
    assert!(a.send(0, &hello));
    same(&frames(&mut b), std::slice::from_ref(&hello));
    drop(evil);
    // The next frontend, with memory of its own, brings the port back.
    let mut again = Frontend::connect(&dir.path("e.sock"), 1, FEATURES).unwrap();
    wait_link(&ctl, &p0, "up");
    again.post_room(0, 64);
    let frame = test_frame(BROADCAST, mac(2), 2, 200);
    assert!(b.send(0, &frame));
    same(&frames(&mut again), std::slice::from_ref(&frame));
    let (status, log) = daemon.stop(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    let told = log
        .iter()
        .filter(|l| l.contains("shrank under its mapping"))
        .count();
    assert!(told >= 1, "{log:?}");
}

/// Reads `stream` until the bridge closes it (at most 10 s); whether it
/// did.
fn closed_by_the_bridge(stream: &mut UnixStream) -> bool {
    use std::io::Read;
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return true,
        }
    }
    false
}

/// A frontend that sends half a message and stalls, or sends requests
/// and reads none of the replies, is closed within a bounded time (the
/// `vhost` crate itself would wait for it for ever), counted, and the next
/// frontend is served.
fn a_stalled_frontend_is_closed_and_the_next_served() {
    use std::io::Write;
    let dir = TempDir::new("vhost");
    let (s0, s1) = (dir.path("a.sock"), dir.path("b.sock"));
    let (p0, p1) = (port(&s0), port(&s1));
    let (daemon, ctl) = bridge_here(&dir, &[p0.clone(), p1.clone()], &[]);
    // Half a header.
    let mut half = UnixStream::connect(&s0).unwrap();
    half.write_all(&1u32.to_le_bytes()[..]).unwrap();
    half.write_all(&[1, 0]).unwrap();
    assert!(
        closed_by_the_bridge(&mut half),
        "half a message held the port"
    );
    assert_eq!(vhost_counter(&ctl, &p0, "bad_messages"), 1);
    // GET_FEATURES (1), version 1, no body, again and again, no reply read.
    let mut deaf = UnixStream::connect(&s0).unwrap();
    deaf.set_nonblocking(true).unwrap();
    let mut request = Vec::new();
    request.extend_from_slice(&1u32.to_le_bytes());
    request.extend_from_slice(&1u32.to_le_bytes());
    request.extend_from_slice(&0u32.to_le_bytes());
    let requests = request.repeat(256);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut sent = 0usize;
    while Instant::now() < deadline && sent < 16 << 20 {
        match deaf.write(&requests) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(_) => break,
        }
    }
    deaf.set_nonblocking(false).unwrap();
    // Its replies waited unread, then it was closed.
    let before = Instant::now();
    let deadline = before + Duration::from_secs(10);
    while vhost_counter(&ctl, &p0, "bad_messages") < 2 {
        if Instant::now() > deadline {
            let (_, log) = daemon.stop(Duration::from_secs(10));
            panic!("unread replies held the port ({sent} bytes of requests sent): {log:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(closed_by_the_bridge(&mut deaf));
    // The next frontend is served.
    let mut next = Frontend::connect(&s0, 1, FEATURES).unwrap();
    wait_link(&ctl, &p0, "up");
    let mut other = Frontend::connect(&s1, 1, FEATURES).unwrap();
    wait_link(&ctl, &p1, "up");
    next.post_room(0, 8);
    let frame = test_frame(BROADCAST, mac(3), 3, 80);
    assert!(other.send(0, &frame));
    same(&frames(&mut next), std::slice::from_ref(&frame));
    let (status, log) = daemon.stop(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    assert!(
        log.iter().any(|l| l.contains("half-sent")) && log.iter().any(|l| l.contains("unread")),
        "{log:?}"
    );
}

/// A frontend that goes away takes the link down, flushes its stations
/// and costs nothing while gone; the next one brings it up again.
fn a_disconnect_is_link_down_and_a_reconnect_brings_it_back() {
    let dir = TempDir::new("vhost");
    let (s0, s1) = (dir.path("a.sock"), dir.path("b.sock"));
    let (p0, p1) = (port(&s0), port(&s1));
    let (daemon, ctl) = bridge_here(&dir, &[p0.clone(), p1.clone()], &[]);
    let mut a = Frontend::connect(&s0, 1, FEATURES).unwrap();
    let mut b = Frontend::connect(&s1, 1, FEATURES).unwrap();
    wait_link(&ctl, &p0, "up");
    b.post_room(0, 64);
    a.post_room(0, 64);
    assert!(a.send(0, &test_frame(BROADCAST, mac(1), 1, 60)));
    assert_eq!(frames(&mut b).len(), 1);
    let learned = |ctl: &Path| {
        let (_, out, _) = ctl_ok_out(ctl, &["fdb", "show"]);
        out.lines()
            .filter(|l| l.contains(&format!("port {p0} ")))
            .count()
    };
    assert_eq!(learned(&ctl), 1);
    drop(a);
    wait_link(&ctl, &p0, "down");
    // The link reads down as soon as the frontend goes; the worker that
    // serves the port flushes its stations when it next polls it.
    let left = lab::poll(
        Duration::from_secs(5),
        Duration::from_millis(20),
        || learned(&ctl),
        |&n| n == 0,
    );
    assert_eq!(left, 0, "stations flushed");
    // Frames to the gone port are not sent anywhere; the bridge idles.
    assert!(b.send(0, &test_frame(mac(1), mac(2), 2, 60)));
    let cpu = netns::cpu_over(daemon.child.id(), Duration::from_millis(500));
    assert!(cpu < 0.1, "{cpu} s of CPU in 0.5 s with a port gone");
    let mut a = Frontend::connect(&s0, 1, FEATURES).unwrap();
    wait_link(&ctl, &p0, "up");
    a.post_room(0, 64);
    let frame = test_frame(mac(1), mac(2), 3, 60);
    // Sent until the worker has taken the port back (within its back-off).
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut got = Vec::new();
    while got.is_empty() && Instant::now() < deadline {
        assert!(b.send(0, &frame));
        got = frames(&mut a);
    }
    assert!(got.first() == Some(&frame), "{} frames back", got.len());
    assert_eq!(vhost_counter(&ctl, &p0, "connects"), 2);
    assert_eq!(vhost_counter(&ctl, &p0, "disconnects"), 1);
    drop(daemon);
}

fn ctl_ok_out(socket: &Path, args: &[&str]) -> (i32, String, String) {
    let out = netns::ctl(socket, args);
    assert_eq!(out.0, 0, "{args:?}: {}", out.2);
    out
}

/// `,client`: mpbridge connects to a frontend that listens, retries while
/// it is absent, and again after it goes.
fn client_mode_connects_and_reconnects() {
    let dir = TempDir::new("vhost");
    let (listen, s1) = (dir.path("front.sock"), dir.path("b.sock"));
    let client = format!("vhost:{},client", listen.display());
    let (daemon, ctl) = bridge_here(&dir, &[client.clone(), port(&s1)], &[]);
    let label = port(&listen);
    wait_link(&ctl, &label, "down");
    let mut b = Frontend::connect(&s1, 1, FEATURES).unwrap();
    b.post_room(0, 64);
    for round in 0..2 {
        let listener = UnixListener::bind(&listen).unwrap();
        listener.set_nonblocking(false).unwrap();
        let (stream, _) = accept_within(&listener, Duration::from_secs(5));
        let mut a = Frontend::negotiate(stream, 1, FEATURES).unwrap();
        wait_link(&ctl, &label, "up");
        let frame = test_frame(mac(2), mac(1), round, 100);
        assert!(a.send(0, &frame));
        same(&frames(&mut b), std::slice::from_ref(&frame));
        drop(a);
        drop(listener);
        std::fs::remove_file(&listen).unwrap();
        wait_link(&ctl, &label, "down");
    }
    let (code, out, _) = netns::ctl(&ctl, &["port", "show"]);
    assert_eq!(code, 0);
    assert!(out.contains(",client"), "{out}");
    drop(daemon);
}

fn accept_within(
    listener: &UnixListener,
    within: Duration,
) -> (UnixStream, std::os::unix::net::SocketAddr) {
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + within;
    loop {
        match listener.accept() {
            Ok((stream, addr)) => {
                stream.set_nonblocking(false).unwrap();
                return (stream, addr);
            }
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("mpbridge did not connect: {e}"),
        }
    }
}

/// Two workers serve two queue pairs; a frontend may use fewer.
fn queue_pairs_follow_the_workers() {
    let dir = TempDir::new("vhost");
    let (s0, s1) = (dir.path("a.sock"), dir.path("b.sock"));
    let (p0, p1) = (port(&s0), port(&s1));
    let (daemon, ctl) = bridge_here(&dir, &[p0.clone(), p1.clone()], &["--workers", "2"]);
    // One pair per worker is offered, and no more are taken.
    assert_eq!(Frontend::queue_pairs(&s0), Ok(2));
    assert!(Frontend::connect(&s0, 3, FEATURES).is_err(), "a third pair");
    let mut a = Frontend::connect(&s0, 2, FEATURES).unwrap();
    let mut b = Frontend::connect(&s1, 1, FEATURES).unwrap();
    wait_link(&ctl, &p0, "up");
    wait_link(&ctl, &p1, "up");
    b.post_room(0, 64);
    a.post_room(0, 64);
    a.post_room(1, 64);
    // Sent on pair 1 (worker 1), received on b's only pair.
    let frame = test_frame(mac(2), mac(1), 1, 100);
    assert!(a.send(1, &frame));
    same(&frames(&mut b), std::slice::from_ref(&frame));
    // Back from b (worker 0) to a, on a's pair 0.
    let back = test_frame(mac(1), mac(2), 2, 100);
    assert!(b.send(0, &back));
    same(&frames(&mut a), std::slice::from_ref(&back));
    drop(daemon);
}

/// With mergeable buffers a frame larger than one buffer spans several
/// and says how many; without, it is refused and smaller ones still pass.
fn frames_larger_than_a_buffer_merge_or_are_refused() {
    let dir = TempDir::new("vhost");
    let (s0, s1, s2) = (dir.path("a.sock"), dir.path("b.sock"), dir.path("c.sock"));
    let (daemon, ctl) = bridge_here(&dir, &[port(&s0), port(&s1), port(&s2)], &[]);
    let mut a = Frontend::connect(&s0, 1, FEATURES).unwrap();
    let mut merging = Frontend::connect(&s1, 1, FEATURES).unwrap();
    let mut plain = Frontend::connect(&s2, 1, VERSION_1 | PROTOCOL_FEATURES).unwrap();
    for s in [&s0, &s1, &s2] {
        wait_link(&ctl, &port(s), "up");
    }
    merging.post_room_of(0, 64, 256);
    plain.post_room_of(0, 64, 256);
    let big = test_frame(BROADCAST, mac(1), 1, 1514);
    assert!(a.send(0, &big));
    let got = merging.receive(0, Duration::from_millis(300));
    assert_eq!(got.len(), 1, "one frame");
    let (header, frame) = &got[0];
    // 12 + 1514 bytes in 256-byte buffers: 6 of them.
    assert_eq!(&header[10..], &6u16.to_le_bytes(), "num_buffers");
    same(std::slice::from_ref(frame), std::slice::from_ref(&big));
    assert!(plain.receive(0, Duration::from_millis(200)).is_empty());
    let small = test_frame(BROADCAST, mac(1), 2, 200);
    assert!(a.send(0, &small));
    same(&frames_of(&mut plain), std::slice::from_ref(&small));
    let stats = ctl_json(&ctl, &["stats", "--json"]);
    assert_eq!(port_stats(&stats, &port(&s2))["tx_errors"], 1, "{stats}");
    drop(daemon);
}

/// A TCP/IPv4 frame of `payload` bytes from 198.18.0.1 to 198.18.0.2 with
/// its checksum left partial (the pseudo-header's sum), as a sender with
/// checksum offload leaves it.
fn partial_tcp(payload: usize) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&mac(2));
    f.extend_from_slice(&mac(1));
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let total = (40 + payload) as u16;
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2,
    ];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let sum = !fold(sum16(&ip));
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut tcp = vec![0u8; 20];
    tcp[0..2].copy_from_slice(&1000u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&2000u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&1u32.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x18;
    tcp[14..16].copy_from_slice(&65535u16.to_be_bytes());
    let pseudo = fold(pseudo_sum(&ip, 20 + payload));
    tcp[16..18].copy_from_slice(&pseudo.to_be_bytes());
    f.extend_from_slice(&tcp);
    f.extend((0..payload).map(|n| (n % 251) as u8));
    f
}

fn sum16(bytes: &[u8]) -> u32 {
    bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum()
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

fn pseudo_sum(ip: &[u8], tcp_len: usize) -> u32 {
    sum16(&ip[12..20]) + 6 + tcp_len as u32
}

/// Whether the TCP checksum of a whole frame verifies.
fn tcp_checksum_ok(frame: &[u8]) -> bool {
    let ip = &frame[14..34];
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let tcp = &frame[34..14 + total];
    fold(pseudo_sum(ip, tcp.len()) + sum16(tcp)) == 0xffff
}

/// Offloads travel with the frame to a driver that took them; for one that
/// did not, the checksum is filled in and TSO segments are cut first.
fn offloads_the_driver_did_not_take_are_done_first() {
    let dir = TempDir::new("vhost");
    let (s0, s1, s2) = (dir.path("a.sock"), dir.path("b.sock"), dir.path("c.sock"));
    let (daemon, ctl) = bridge_here(&dir, &[port(&s0), port(&s1), port(&s2)], &[]);
    let offloads = FEATURES | CSUM | HOST_TSO4;
    let mut a = Frontend::connect(&s0, 1, offloads).unwrap();
    let mut taker = Frontend::connect(&s1, 1, FEATURES | GUEST_CSUM | GUEST_TSO4).unwrap();
    let mut plain = Frontend::connect(&s2, 1, FEATURES).unwrap();
    for s in [&s0, &s1, &s2] {
        wait_link(&ctl, &port(s), "up");
    }
    taker.post_room(0, 64);
    plain.post_room(0, 64);
    // Partial checksum: csum_start 34, csum_offset 16.
    let mut header = [0u8; HEADER];
    header[0] = 1;
    header[6..8].copy_from_slice(&34u16.to_le_bytes());
    header[8..10].copy_from_slice(&16u16.to_le_bytes());
    let frame = partial_tcp(300);
    assert!(!tcp_checksum_ok(&frame));
    assert!(a.send_with_header(0, &header, &frame));
    let kept = taker.receive(0, Duration::from_millis(300));
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].0[0], 1, "NEEDS_CSUM kept for a driver that took it");
    same(
        std::slice::from_ref(&kept[0].1),
        std::slice::from_ref(&frame),
    );
    let whole = plain.receive(0, Duration::from_millis(300));
    assert_eq!(whole.len(), 1);
    assert_eq!(whole[0].0[..10], [0; 10], "no offload left");
    assert!(tcp_checksum_ok(&whole[0].1), "checksum filled in");
    // A TSO frame of 1400 payload bytes, 500 per segment.
    let mut tso = header;
    tso[1] = 1; // TCPv4
    tso[2..4].copy_from_slice(&54u16.to_le_bytes());
    tso[4..6].copy_from_slice(&500u16.to_le_bytes());
    let large = partial_tcp(1400);
    assert!(a.send_with_header(0, &tso, &large));
    let kept = taker.receive(0, Duration::from_millis(300));
    assert_eq!(kept.len(), 1, "one TSO frame for a driver that takes them");
    assert_eq!(kept[0].0[1], 1);
    let segments = plain.receive(0, Duration::from_millis(300));
    let lens: Vec<usize> = segments.iter().map(|(_, f)| f.len()).collect();
    assert_eq!(lens, [554, 554, 454], "cut into segments");
    let mut payload = Vec::new();
    for (_, segment) in &segments {
        assert!(tcp_checksum_ok(segment));
        payload.extend_from_slice(&segment[54..]);
    }
    assert!(
        payload == large[54..],
        "the segments carry the payload in order"
    );
    drop(daemon);
}

/// A new memory table and a ring stopped (GET_VRING_BASE) and set up
/// again take effect between batches; frames pass before and after, an
/// idle connected bridge sleeps, and so does one that busy-polls not.
fn memory_tables_and_ring_resets_are_honoured() {
    let dir = TempDir::new("vhost");
    let (s0, s1) = (dir.path("a.sock"), dir.path("b.sock"));
    let (daemon, ctl) = bridge_here(&dir, &[port(&s0), port(&s1)], &[]);
    let mut a = Frontend::connect(&s0, 1, FEATURES).unwrap();
    let mut b = Frontend::connect(&s1, 1, FEATURES).unwrap();
    wait_link(&ctl, &port(&s0), "up");
    wait_link(&ctl, &port(&s1), "up");
    b.post_room(0, 128);
    let frame = |n: u8| test_frame(mac(2), mac(1), n, 100);
    assert!(a.send(0, &frame(1)));
    same(&frames(&mut b), &[frame(1)]);
    // Idle with both frontends connected: the worker sleeps on the kicks.
    let cpu = netns::cpu_over(daemon.child.id(), Duration::from_millis(500));
    assert!(cpu < 0.1, "{cpu} s of CPU in 0.5 s while idle");
    a.resend_memory().unwrap();
    b.resend_memory().unwrap();
    assert!(a.send(0, &frame(2)));
    same(&frames(&mut b), &[frame(2)]);
    // a's transmit ring stopped: its base is where the device stopped.
    let base = a.stop_vring(1);
    assert_eq!(base, 2, "two chains taken");
    wait_link(&ctl, &port(&s0), "down");
    a.restart_vring(1, base as u16).unwrap();
    wait_link(&ctl, &port(&s0), "up");
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut got = Vec::new();
    while got.is_empty() && Instant::now() < deadline {
        assert!(a.send(0, &frame(3)));
        got = frames(&mut b);
    }
    assert!(
        got.first() == Some(&frame(3)),
        "{} frames after the reset",
        got.len()
    );
    drop(daemon);
}

/// `--poll`: the worker busy-polls vhost rings instead of sleeping.
fn poll_mode_forwards_too() {
    let dir = TempDir::new("vhost");
    let (s0, s1) = (dir.path("a.sock"), dir.path("b.sock"));
    let (daemon, ctl) = bridge_here(&dir, &[port(&s0), port(&s1)], &["--poll"]);
    let mut a = Frontend::connect(&s0, 1, FEATURES).unwrap();
    let mut b = Frontend::connect(&s1, 1, FEATURES).unwrap();
    wait_link(&ctl, &port(&s0), "up");
    wait_link(&ctl, &port(&s1), "up");
    b.post_room(0, 128);
    let sent: Vec<Vec<u8>> = (0..50)
        .map(|n| test_frame(mac(2), mac(1), n, 200))
        .collect();
    for frame in &sent {
        assert!(a.send(0, frame));
    }
    same(&frames(&mut b), &sent);
    drop(daemon);
}

/// A client whose standard output is closed (`mpbridge stats | head -1`)
/// ends quietly, without a panic.
fn a_client_with_its_output_closed_ends_quietly() {
    let dir = TempDir::new("vhost");
    let (s0, s1) = (dir.path("a.sock"), dir.path("b.sock"));
    let (daemon, ctl) = bridge_here(&dir, &[port(&s0), port(&s1)], &[]);
    let mut client = std::process::Command::new(env!("CARGO_BIN_EXE_mpbridge"))
        .arg("--ctl")
        .arg(&ctl)
        .arg("stats")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(client.stdout.take());
    let output = client.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    drop(daemon);
}

/// The socket's life: a stale socket is replaced, one in use or a file
/// that is not a socket is refused with one line, and the port comes and
/// goes with `port add` and `port del`.
fn the_socket_is_made_refused_and_removed() {
    let dir = TempDir::new("vhost");
    let file = dir.path("file");
    std::fs::write(&file, b"not a socket").unwrap();
    let other = dir.path("other.sock");
    let (status, err) = netns::run_to_exit(
        None,
        &[
            "run",
            &format!("--ctl={}", dir.path("x.sock").display()),
            &format!("--port=vhost:{}", file.display()),
            &format!("--port={}", port(&other)),
        ],
        Duration::from_secs(5),
    );
    assert!(!status.success());
    assert!(err.contains("exists and is not a socket"), "{err}");
    assert!(file.exists(), "a file that is not a socket stays");
    // A stale socket (nobody listening) is replaced.
    let stale = dir.path("stale.sock");
    drop(UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    let (daemon, ctl) = bridge_here(&dir, &[port(&stale), port(&other)], &[]);
    let _a = Frontend::connect(&stale, 1, FEATURES).unwrap();
    wait_link(&ctl, &port(&stale), "up");
    // A socket in use is refused, here by a second port on it.
    let (code, _, err) = netns::ctl(&ctl, &["port", "add", &port(&stale)]);
    assert_ne!(code, 0);
    assert!(!err.trim().contains('\n') && !err.is_empty(), "{err}");
    let added = dir.path("added.sock");
    ctl_ok(&ctl, &["port", "add", &port(&added)]);
    assert!(added.exists());
    let mut c = Frontend::connect(&added, 1, FEATURES).unwrap();
    wait_link(&ctl, &port(&added), "up");
    c.post_room(0, 8);
    ctl_ok(&ctl, &["port", "del", &port(&added)]);
    assert!(!added.exists(), "removed with its port");
    drop(c);
    drop(daemon);
}

lab::test_main! {
    privileged: [],
    plain: [
        learning_and_flooding_mutex,
        learning_and_flooding_rwlock,
        learning_and_flooding_rmlock,
        learning_and_flooding_sharded,
        learning_and_flooding_rcu,
        learning_and_flooding_epoch,
        frames_cross_whole_with_each_feature_set,
        a_hostile_driver_is_counted_and_survived,
        a_frontend_cannot_block_a_worker_on_its_eventfds,
        a_hostile_ring_cannot_hold_a_worker,
        memory_over_the_limit_or_off_tmpfs_is_refused,
        port_del_removes_only_the_socket_it_bound,
        a_frontend_that_shrinks_its_memory_loses_its_port,
        a_stalled_frontend_is_closed_and_the_next_served,
        a_disconnect_is_link_down_and_a_reconnect_brings_it_back,
        client_mode_connects_and_reconnects,
        queue_pairs_follow_the_workers,
        the_socket_is_made_refused_and_removed,
        frames_larger_than_a_buffer_merge_or_are_refused,
        offloads_the_driver_did_not_take_are_done_first,
        memory_tables_and_ring_resets_are_honoured,
        poll_mode_forwards_too,
        a_client_with_its_output_closed_ends_quietly,
    ],
}
