//! Raw ports' receive rings from outside, in both layouts (`--rx-ring
//! frame` and `block`): a unicast frame longer than `LENT_HEAD` is lent to
//! the batch where it lies in the ring, whole and with the VLAN tag the
//! kernel took off put back; its slot or block stays the port's, so the
//! kernel does not write it however much arrives, until the batch is
//! released (by the queue type a worker holds), and then goes back to the
//! kernel at once. Needs root; skips with
//! a reason otherwise (fails under MPBRIDGE_REQUIRE_PRIV=1).

mod netns;

use std::os::fd::RawFd;
use std::thread;
use std::time::{Duration, Instant};

use bridge::port::raw::{RingKind, DEFAULT_RING_BYTES, MIN_RING_BYTES};
use bridge::port::{LinkQueue, Outgoing, Queue, RawQueue, RxBatch, LENT_HEAD, VNET_HDR_LEN};
use netns::{mac, privileged, tagged_test_frame, test_frame, Netns};

/// How long any one wait may take.
const WAIT: Duration = Duration::from_secs(5);

/// The receiving and the sending end of a veth pair in a new namespace;
/// the receiving end as a worker holds it.
struct Link {
    _ns: Netns,
    rx: LinkQueue,
    tx: RawQueue,
}

impl Link {
    fn new(ring: RingKind, bytes: usize) -> Link {
        let ns = Netns::new();
        ns.ip(&["link", "add", "rx0", "type", "veth", "peer", "name", "tx0"]);
        let (rx, tx) = ns.run(move || {
            let rx = RawQueue::open_with("rx0", 1, ring, bytes)
                .expect("socket on rx0")
                .remove(0);
            let rx = LinkQueue::Raw(rx);
            let tx = RawQueue::open("tx0", 1).expect("socket on tx0").remove(0);
            (rx, tx)
        });
        Link { _ns: ns, rx, tx }
    }

    /// Sends every frame (Ethernet only: a header is added), retrying what
    /// a full socket refused, within `WAIT`.
    fn send(&mut self, frames: &[Vec<u8>]) {
        let buffers: Vec<Vec<u8>> = frames
            .iter()
            .map(|frame| [&[0u8; VNET_HDR_LEN][..], frame].concat())
            .collect();
        let deadline = Instant::now() + WAIT;
        let mut sent = 0;
        while sent < buffers.len() {
            assert!(
                Instant::now() < deadline,
                "sent {sent} of {}",
                buffers.len()
            );
            let chunk = buffers[sent..].iter().take(64);
            let n = self
                .tx
                .send_batch(chunk.map(|b| Outgoing::split(b, VNET_HDR_LEN)))
                .sent;
            sent += n;
            if n == 0 {
                thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// The frames dropped since the last call, as the socket counts them.
fn drops(fd: RawFd) -> u32 {
    // tpacket_stats (TPACKET_V2) or tpacket_stats_v3: the drops second.
    let mut stats = [0u32; 3];
    let mut len = std::mem::size_of_val(&stats) as libc::socklen_t;
    // SAFETY: `stats` is writable for `len` bytes, which the kernel writes
    // at most; the socket is the test's own.
    let ret = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            stats.as_mut_ptr().cast(),
            &mut len,
        )
    };
    assert_eq!(
        ret,
        0,
        "PACKET_STATISTICS: {}",
        std::io::Error::last_os_error()
    );
    stats[1]
}

/// Whether `frame` is the tests' (tagged or not).
fn is_test_frame(frame: &[u8]) -> bool {
    let ethertype = |at: usize| {
        frame
            .get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    ethertype(12) == Some(lab::TEST_ETHERTYPE)
        || (ethertype(12) == Some(0x8100) && ethertype(16) == Some(lab::TEST_ETHERTYPE))
}

/// With a receive ring of layout `ring` and `bytes`.
fn lends_and_holds(ring: RingKind, bytes: usize) {
    let mut link = Link::new(ring, bytes);
    let (to, from) = (mac(2), mac(1));
    // (frame, whether it is lent): the last is the one held below.
    let cases = [
        (test_frame(to, from, 1, 60), false),
        (test_frame(to, from, 2, LENT_HEAD), false),
        (test_frame(to, from, 3, LENT_HEAD + 1), true),
        (test_frame(lab::BROADCAST, from, 4, 300), false),
        (tagged_test_frame(to, from, 7, 5, 300), true),
        (test_frame(to, from, 6, 300), true),
        (test_frame(to, from, 0xa5, 1514), true),
    ];
    let frames: Vec<Vec<u8>> = cases.iter().map(|(frame, _)| frame.clone()).collect();
    link.send(&frames);

    // Each receive's frames are checked before the next receive, which
    // hands back what the one before lent.
    let mut batch = RxBatch::new(64, 2048).with_metadata(VNET_HDR_LEN);
    let mut got = 0;
    let deadline = Instant::now() + WAIT;
    while got < cases.len() {
        assert!(
            Instant::now() < deadline,
            "received {got} of {}",
            cases.len()
        );
        batch.clear();
        link.rx.recv_batch(&mut batch).expect("receive");
        for i in 0..batch.len() {
            let frame = batch.frame(i).ethernet();
            if !is_test_frame(&frame) {
                continue;
            }
            let (sent, lent) = &cases[got];
            assert_eq!(&frame, sent, "frame {got} read back whole");
            assert_eq!(
                batch.is_lent(i),
                *lent,
                "frame {got} of {} bytes lent",
                sent.len()
            );
            got += 1;
        }
        if batch.is_empty() {
            thread::sleep(Duration::from_millis(2));
        }
    }
    let held = (0..batch.len())
        .rev()
        .find(|&i| batch.is_lent(i))
        .expect("the last frame in the last batch");
    assert_eq!(batch.frame(held).ethernet(), frames[frames.len() - 1]);

    // Far more than the ring holds (4 MiB at most), the batch not released: the
    // kernel fills the ring up to the held frame and drops the rest.
    let flood = vec![test_frame(to, from, 0x5a, 1514); 4000];
    link.send(&flood);
    let fd = link.rx.raw_fd().expect("a socket");
    let deadline = Instant::now() + WAIT;
    while drops(fd) == 0 {
        assert!(Instant::now() < deadline, "the ring never filled");
        thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(
        batch.frame(held).ethernet(),
        frames[frames.len() - 1],
        "a held frame's bytes are not written"
    );

    // The flood's last frames reach the full ring and are dropped.
    let deadline = Instant::now() + WAIT;
    loop {
        thread::sleep(Duration::from_millis(20));
        if drops(fd) == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the flood never ended");
    }

    // Released, the slot or block goes back to the kernel at once: a
    // frame sent before the ring is read again is taken.
    link.rx.release();
    batch.clear();
    let marker = test_frame(to, from, 8, 300);
    link.send(std::slice::from_ref(&marker));
    let mut drained = 0;
    let mut seen = false;
    let deadline = Instant::now() + WAIT;
    while !seen {
        assert!(
            Instant::now() < deadline,
            "the frame sent after release never came ({drained} read)"
        );
        batch.clear();
        link.rx.recv_batch(&mut batch).expect("receive");
        if batch.is_empty() {
            thread::sleep(Duration::from_millis(2));
        }
        seen |= (0..batch.len()).any(|i| batch.frame(i).ethernet() == marker);
        drained += batch.len();
    }
    assert!(drained > 1 && drained < flood.len(), "drained {drained}");
    // What the full ring held fits its size (each frame takes more than
    // its 1514 bytes there).
    assert!(
        drained * 1514 <= bytes,
        "drained {drained} frames from a ring of {bytes} bytes"
    );
    assert_eq!(drops(fd), 0, "the frame sent after release was not dropped");
    // The last batch handed back, as a worker does once it sent it (a
    // ring of 32 slots is all in it).
    link.rx.release();
    batch.clear();
    let after = vec![test_frame(to, from, 9, 1000); 8];
    link.send(&after);
    let mut got = 0;
    let deadline = Instant::now() + WAIT;
    while got < after.len() {
        assert!(
            Instant::now() < deadline,
            "received {got} of {} after ({ring:?}, {bytes} bytes; {} dropped)",
            after.len(),
            drops(fd)
        );
        batch.clear();
        link.rx.recv_batch(&mut batch).expect("receive");
        for i in 0..batch.len() {
            let frame = batch.frame(i).ethernet();
            if frame[frame.len() - 1] == 0x5a {
                // The last of the flood, in a block handed over late.
                continue;
            }
            assert_eq!(frame, after[got], "frame {got} after release");
            got += 1;
        }
        if batch.is_empty() {
            thread::sleep(Duration::from_millis(2));
        }
    }
}

fn frame_rings_lend_and_hold_their_slots() {
    if !privileged("frame_rings_lend_and_hold_their_slots") {
        return;
    }
    lends_and_holds(RingKind::Frame, DEFAULT_RING_BYTES);
}

fn block_rings_lend_and_hold_their_blocks() {
    if !privileged("block_rings_lend_and_hold_their_blocks") {
        return;
    }
    lends_and_holds(RingKind::Block, DEFAULT_RING_BYTES);
}

/// The smallest frame ring (`ring=64K`: 32 slots) and the smallest block
/// ring (four blocks, 1 MiB), as a container's port may have them.
fn small_rings_lend_hold_and_hold_no_more_than_asked() {
    if !privileged("small_rings_lend_hold_and_hold_no_more_than_asked") {
        return;
    }
    lends_and_holds(RingKind::Frame, MIN_RING_BYTES);
    lends_and_holds(RingKind::Block, 1 << 20);
}

lab::test_main! {
    privileged: [
        frame_rings_lend_and_hold_their_slots,
        block_rings_lend_and_hold_their_blocks,
        small_rings_lend_hold_and_hold_no_more_than_asked,
    ],
    plain: [],
}
