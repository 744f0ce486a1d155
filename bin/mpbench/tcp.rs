//! Bulk TCP for `mpbench forward --tcp`: one connection from the generator's
//! namespace to the sink's through whatever forwards, with the kernel's
//! default offloads (TSO and checksum offload on veth and taps, so that
//! 64 KiB segments cross the forwarder whole). Goodput is what the
//! receiving socket read.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use lab::Netns;

use crate::cpuload::{self, CoreUse};

pub const SENDER_ADDRESS: &str = "198.18.0.1/24";
pub const RECEIVER_ADDRESS: &str = "198.18.0.2/24";
const RECEIVER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const PORT: u16 = 5201;
const WRITE_SIZE: usize = 256 * 1024;
/// Time for the connection to leave slow start before measuring.
const WARMUP: Duration = Duration::from_millis(500);

/// One transfer's result.
#[derive(Clone, Debug)]
pub struct TcpRates {
    /// Bytes the receiver read per second.
    pub bytes_per_s: f64,
    /// Every core's time over the interval.
    pub cores: Vec<CoreUse>,
    pub seconds: f64,
}

impl TcpRates {
    pub fn mbit_per_s(&self) -> f64 {
        self.bytes_per_s * 8.0 / 1e6
    }

    /// CPU nanoseconds, all cores, per KiB delivered.
    pub fn ns_per_kib(&self) -> f64 {
        let busy: f64 = self.cores.iter().map(CoreUse::busy_ns).sum();
        busy / (self.bytes_per_s * self.seconds / 1024.0).max(1.0)
    }
}

/// Gives the two hosts their addresses (RFC 2544 range, inside their own
/// namespaces only).
pub fn address(sender: &Netns, receiver: &Netns) -> Result<(), String> {
    sender.ip(&["addr", "add", SENDER_ADDRESS, "dev", "eth0"])?;
    receiver.ip(&["addr", "add", RECEIVER_ADDRESS, "dev", "eth0"])?;
    Ok(())
}

/// Runs one transfer: the receiver and the sender pinned to CPU 0, where
/// the frame generator runs in the frame tests.
pub fn transfer(sender: &Netns, receiver: &Netns, seconds: f64) -> Result<TcpRates, String> {
    let received = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let reader = {
        let received = Arc::clone(&received);
        receiver.spawn(move || -> Result<(), String> {
            lab::pin_to(0)?;
            let listener =
                TcpListener::bind((RECEIVER, PORT)).map_err(|e| format!("listen: {e}"))?;
            let _ = ready_tx.send(());
            listener.set_nonblocking(true).map_err(|e| e.to_string())?;
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut stream = loop {
                match listener.accept() {
                    Ok((stream, _)) => break stream,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if Instant::now() > deadline {
                            return Err("no connection within 5 s".to_owned());
                        }
                        thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return Err(format!("accept: {e}")),
                }
            };
            stream.set_nonblocking(false).map_err(|e| e.to_string())?;
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .map_err(|e| e.to_string())?;
            let mut buffer = vec![0u8; WRITE_SIZE];
            loop {
                match stream.read(&mut buffer) {
                    Ok(0) => return Ok(()),
                    // Relaxed: a counter read for a rate.
                    Ok(n) => received.fetch_add(n as u64, Ordering::Relaxed),
                    Err(e) => return Err(format!("receive: {e}")),
                };
            }
        })
    };
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .map_err(|_| "the receiver did not start".to_owned())?;
    let writer = {
        let stop = Arc::clone(&stop);
        sender.spawn(move || -> Result<(), String> {
            lab::pin_to(0)?;
            let address = SocketAddr::from((RECEIVER, PORT));
            let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5))
                .map_err(|e| format!("connect: {e}"))?;
            stream
                .set_write_timeout(Some(Duration::from_secs(5)))
                .map_err(|e| e.to_string())?;
            let buffer = vec![0x5au8; WRITE_SIZE];
            // Relaxed: a stop flag.
            while !stop.load(Ordering::Relaxed) {
                stream
                    .write_all(&buffer)
                    .map_err(|e| format!("send: {e}"))?;
            }
            Ok(())
        })
    };
    thread::sleep(WARMUP);
    let bytes0 = received.load(Ordering::Relaxed);
    let cpu0 = cpuload::sample().map_err(|e| format!("/proc/stat: {e}"))?;
    let t0 = Instant::now();
    thread::sleep(Duration::from_secs_f64(seconds));
    let cpu1 = cpuload::sample().map_err(|e| format!("/proc/stat: {e}"))?;
    let bytes1 = received.load(Ordering::Relaxed);
    let dt = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let sent = writer
        .join()
        .map_err(|_| "the sender panicked".to_owned())?;
    let read = reader
        .join()
        .map_err(|_| "the receiver panicked".to_owned())?;
    sent??;
    read??;
    Ok(TcpRates {
        bytes_per_s: (bytes1 - bytes0) as f64 / dt,
        cores: cpuload::between(&cpu0, &cpu1),
        seconds: dt,
    })
}
