//! mpbridge on real ports, driven by kernel traffic in network namespaces.
//! Needs root; skips with a reason otherwise (fails under
//! MPBRIDGE_REQUIRE_PRIV=1).

mod netns;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use netns::{privileged, PortKind, Topology};

const TRANSFER: usize = 8 << 20;

/// Deterministic, incompressible-looking bytes.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
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
fn tcp_transfer(topology: &Topology, from: usize, to: usize, port: u16, seed: u64) {
    let server_addr = SocketAddr::from((Topology::addr(to), port));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = topology.hosts[to].spawn(move || {
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
    topology.hosts[from].run(move || {
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

fn tcp_through(kind: PortKind, lock: &str) {
    if !privileged("tcp_through") {
        return;
    }
    let topology = Topology::new(kind, 2, &["--lock", lock]);
    tcp_transfer(&topology, 0, 1, 5001, 7);
    tcp_transfer(&topology, 1, 0, 5002, 9);
}

macro_rules! tcp_tests {
    ($($name:ident: $kind:expr, $lock:literal;)*) => {
        $( #[test] fn $name() { tcp_through($kind, $lock); } )*
    };
}

tcp_tests! {
    tcp_tap_mutex: PortKind::Tap, "mutex";
    tcp_tap_rwlock: PortKind::Tap, "rwlock";
    tcp_tap_rmlock: PortKind::Tap, "rmlock";
    tcp_tap_sharded: PortKind::Tap, "sharded";
    tcp_tap_rcu: PortKind::Tap, "rcu";
    tcp_tap_epoch: PortKind::Tap, "epoch";
    tcp_raw_mutex: PortKind::Raw, "mutex";
    tcp_raw_rwlock: PortKind::Raw, "rwlock";
    tcp_raw_rmlock: PortKind::Raw, "rmlock";
    tcp_raw_sharded: PortKind::Raw, "sharded";
    tcp_raw_rcu: PortKind::Raw, "rcu";
    tcp_raw_epoch: PortKind::Raw, "epoch";
}
