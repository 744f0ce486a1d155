//! Test stations: a packet socket on an interface that sends frames of the
//! test EtherType and collects those that arrive.

use std::thread;
use std::time::{Duration, Instant};

use bridge::wire::tag::{TAG_LEN, TAG_OFFSET};
use bridge::wire::{EtherType, FrameSpec, MacAddr, Payload};

use crate::Netns;

/// A test station: a packet socket on a host's `eth0` that sends frames
/// and collects the frames of the test EtherType that arrive.
pub struct Station {
    port: bridge::port::RawQueue,
    batch: bridge::port::RxBatch,
}

/// The IEEE local experimental EtherType: nothing but the tests sends it.
pub const TEST_ETHERTYPE: u16 = 0x88b5;

impl Station {
    /// A station on interface `eth0` of namespace `host`.
    pub fn on(host: &Netns) -> Station {
        let port = host
            .run(|| {
                let mut ports =
                    bridge::port::RawQueue::open("eth0", 1).expect("packet socket on eth0");
                ports.pop().unwrap()
            })
            .expect("cannot enter the namespace");
        Station {
            port,
            batch: bridge::port::RxBatch::new(64, 65_600).with_metadata(bridge::port::VNET_HDR_LEN),
        }
    }

    /// Sends one Ethernet frame (no virtio-net header: one is added).
    pub fn send(&mut self, frame: &[u8]) {
        use bridge::port::{Outgoing, Queue};
        let header = [0u8; bridge::port::VNET_HDR_LEN];
        let outgoing = Outgoing {
            meta: &header,
            pieces: [frame, &[], &[]],
            ..Outgoing::default()
        };
        let sent = self
            .port
            .send_batch(std::iter::once(outgoing))
            .into_result()
            .expect("send");
        assert_eq!(sent, 1, "frame not sent");
    }

    /// The test frames that arrive within `wait` (Ethernet frames only).
    pub fn collect(&mut self, wait: Duration) -> Vec<Vec<u8>> {
        use bridge::port::Queue;
        let deadline = Instant::now() + wait;
        let mut frames = Vec::new();
        while Instant::now() < deadline {
            self.batch.clear();
            self.port.recv_batch(&mut self.batch).expect("receive");
            for frame in self.batch.iter() {
                // The first bytes say; a frame the port lent is copied whole.
                if is_test_frame(frame.eth) {
                    frames.push(frame.ethernet());
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
        use bridge::port::Queue;
        let buffers: Vec<Vec<u8>> = frames
            .iter()
            .map(|frame| {
                let mut buffer = vec![0u8; bridge::port::VNET_HDR_LEN];
                buffer.extend_from_slice(frame);
                buffer
            })
            .collect();
        let meta = bridge::port::VNET_HDR_LEN;
        let outgoing = buffers
            .iter()
            .map(|b| bridge::port::Outgoing::split(b, meta));
        self.port.send_batch(outgoing).sent
    }

    /// Drops whatever arrived so far (waiting at least a millisecond).
    pub fn clear(&mut self) {
        self.collect(Duration::from_millis(1));
    }

    /// Drops whatever arrived so far, however much, without waiting: a
    /// receive ring left full (by a TCP transfer nobody collected) drops
    /// what comes next.
    pub fn drain(&mut self) {
        use bridge::port::Queue;
        // Bounded: at most a million frames, far more than a ring holds.
        for _ in 0..(1 << 20) / 64 {
            self.batch.clear();
            if self.port.recv_batch(&mut self.batch).is_err() || self.batch.is_empty() {
                break;
            }
        }
    }
}

fn is_test_frame(frame: &[u8]) -> bool {
    let ethertype = |at: usize| {
        frame
            .get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    // Past any number of tags (802.1Q, and 802.1ad outside it).
    let mut at = TAG_OFFSET;
    loop {
        match ethertype(at).map(EtherType) {
            Some(EtherType(TEST_ETHERTYPE)) => return true,
            Some(tpid) if tpid.is_vlan_tag() => at += TAG_LEN,
            _ => return false,
        }
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

/// The broadcast address.
pub const BROADCAST: [u8; 6] = [0xff; 6];
