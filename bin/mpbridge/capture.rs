//! `mpbridge capture`: the daemon streams a port's frames to the client as
//! pcapng (Enhanced Packet Blocks with the direction in their flags, and
//! an Interface Statistics Block with the frames lost, every second and at
//! the end); the client writes the stream to a file or stdout as it comes
//! and says at the end how many frames it got and how many were lost.

use std::borrow::Cow;
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bridge::capture::{CaptureHub, Captured, Direction, Filter, Sink};
use bridge::{PortId, Stopper};
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::interface_statistics::{
    InterfaceStatisticsBlock, InterfaceStatisticsOption,
};
use pcap_file::pcapng::{Block, PcapNgReader, PcapNgWriter};
use pcap_file::DataLink;

use crate::protocol::{CaptureStarted, ReplyLine, Response};

/// Captures running at once, per bridge: each makes every worker copy the
/// port's frames once more, so they are few.
pub const MAX_CAPTURES: usize = 4;

/// What a capture follows, and its place among the bridge's captures
/// (given back when dropped).
pub struct CaptureGrant {
    /// The port and directions.
    pub request: Request,
    /// The workers' hubs to attach to.
    pub hubs: Vec<Arc<CaptureHub>>,
    /// Holds one of [`MAX_CAPTURES`] places.
    pub slot: CaptureSlot,
}

/// One running capture's place; dropping it frees the place.
pub struct CaptureSlot(Arc<AtomicUsize>);

impl CaptureSlot {
    /// One of the [`MAX_CAPTURES`] places counted in `running`, if one is
    /// free. Only the owner thread takes places.
    pub fn take(running: &Arc<AtomicUsize>) -> Option<CaptureSlot> {
        // Relaxed: only the owner thread takes places, so the check and the
        // increment cannot race another taker; drops only free places.
        if running.load(Ordering::Relaxed) >= MAX_CAPTURES {
            return None;
        }
        running.fetch_add(1, Ordering::Relaxed);
        Some(CaptureSlot(Arc::clone(running)))
    }
}

impl Drop for CaptureSlot {
    fn drop(&mut self) {
        // Relaxed: a count, read only to refuse the next capture.
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Frames waiting for a slow reader before the next ones are lost.
const BACKLOG: usize = 8192;
/// Bytes of frames waiting for a slow reader before the next ones are
/// lost: with [`MAX_CAPTURES`], what captures may hold at most.
pub const BACKLOG_BYTES: usize = 8 * 1024 * 1024;
/// How long a reader may take nothing before its capture ends (its place
/// is then free for another): frames meanwhile are lost, and counted.
const STALL_LIMIT: Duration = Duration::from_secs(30);
/// How often the lost count goes out, and a gone reader is noticed.
const STATISTICS_EVERY: Duration = Duration::from_secs(1);
/// pcapng's `epb_flags` direction bits.
const INBOUND: u32 = 0b01;
const OUTBOUND: u32 = 0b10;

/// What a capture follows.
pub struct Request {
    /// The port, and its label for the file.
    pub port: PortId,
    /// "tap:acc1".
    pub label: String,
    /// Received frames, sent frames, or both.
    pub inbound: bool,
    /// See `inbound`.
    pub outbound: bool,
    /// Stop after this many frames.
    pub count: Option<u64>,
}

/// Streams a capture to `stream` until `count` frames, the client leaves,
/// or the bridge stops. The grant's hubs are those of the workers to follow
/// (all, or the one of `--queue`); its place among the bridge's captures is
/// given back when this returns.
pub fn stream(mut stream: UnixStream, grant: CaptureGrant, stopper: Arc<Stopper>) {
    let CaptureGrant {
        request,
        hubs,
        slot: _slot,
    } = grant;
    let (sender, frames) = mpsc::sync_channel(BACKLOG);
    let lost = Arc::new(AtomicU64::new(0));
    let queued = Arc::new(AtomicUsize::new(0));
    let sink = Sink {
        sender,
        lost: Arc::clone(&lost),
        queued: Arc::clone(&queued),
        max_bytes: BACKLOG_BYTES,
    };
    let filter = Filter {
        port: request.port,
        inbound: request.inbound,
        outbound: request.outbound,
    };
    let taps: Vec<(Arc<CaptureHub>, u64)> = hubs
        .into_iter()
        .map(|hub| {
            let id = hub.attach(filter, sink.clone());
            (hub, id)
        })
        .collect();
    drop(sink);
    let written = |frame: &Captured| {
        // Relaxed: the budget's count (see Sink).
        queued.fetch_sub(frame.frame.len(), Ordering::Relaxed);
    };
    let result = (|| -> io::Result<u64> {
        let _ = stream.set_nonblocking(false);
        stream.set_write_timeout(Some(STALL_LIMIT))?;
        let reply = Response::CaptureStarted(CaptureStarted {
            format: "pcapng".to_owned(),
            port: request.label.clone(),
        });
        let started: Result<_, std::convert::Infallible> = Ok(reply);
        let line = serde_json::to_string(&ReplyLine::of(started)).expect("a reply serialises");
        stream.write_all(format!("{line}\n").as_bytes())?;
        let mut writer = PcapNgWriter::new(BufWriter::new(&stream)).map_err(io::Error::other)?;
        let interface = InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            // The writer stores nanoseconds; the file must say so.
            options: vec![
                InterfaceDescriptionOption::IfName(Cow::Owned(request.label.clone())),
                InterfaceDescriptionOption::IfTsResol(9),
            ],
        };
        writer
            .write_pcapng_block(interface)
            .map_err(io::Error::other)?;
        let mut captured = 0u64;
        while request.count.is_none_or(|count| captured < count) && !stopper.is_stopped() {
            match frames.recv_timeout(STATISTICS_EVERY) {
                Ok(frame) => {
                    written(&frame);
                    write_frame(&mut writer, &frame)?;
                    captured += 1;
                    // What else waits goes in the same write.
                    while request.count.is_none_or(|count| captured < count) {
                        let Ok(frame) = frames.try_recv() else { break };
                        written(&frame);
                        write_frame(&mut writer, &frame)?;
                        captured += 1;
                    }
                    writer.get_mut().flush()?;
                }
                Err(RecvTimeoutError::Timeout) => {
                    write_statistics(&mut writer, captured, lost.load(Ordering::Relaxed))?;
                    writer.get_mut().flush()?;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        write_statistics(&mut writer, captured, lost.load(Ordering::Relaxed))?;
        writer.get_mut().flush()?;
        Ok(captured)
    })();
    for (hub, id) in taps {
        hub.detach(id);
    }
    match result {
        Ok(captured) => log::info!(
            "capture of {}: {captured} frames, {} lost",
            request.label,
            lost.load(Ordering::Relaxed)
        ),
        // The reader went away: the usual end of a capture without --count.
        Err(error) => log::debug!("capture of {} ended: {error}", request.label),
    }
}

fn write_frame<W: Write>(writer: &mut PcapNgWriter<W>, frame: &Captured) -> io::Result<()> {
    let timestamp = frame
        .time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let flags = match frame.direction {
        Direction::In => INBOUND,
        Direction::Out => OUTBOUND,
    };
    let block = EnhancedPacketBlock {
        interface_id: 0,
        timestamp,
        original_len: frame.frame.len() as u32,
        data: Cow::Borrowed(&frame.frame),
        options: vec![EnhancedPacketOption::Flags(flags)],
    };
    writer
        .write_pcapng_block(block)
        .map(|_| ())
        .map_err(io::Error::other)
}

fn write_statistics<W: Write>(
    writer: &mut PcapNgWriter<W>,
    captured: u64,
    lost: u64,
) -> io::Result<()> {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let block = InterfaceStatisticsBlock {
        interface_id: 0,
        // In the interface's resolution: nanoseconds.
        timestamp: now.as_nanos() as u64,
        options: vec![
            InterfaceStatisticsOption::IsbIfDrop(lost),
            InterfaceStatisticsOption::IsbUsrDeliv(captured),
        ],
    };
    writer
        .write_pcapng_block(block)
        .map(|_| ())
        .map_err(io::Error::other)
}

/// Copies everything read to `out` as it is read.
struct Tee<R, W> {
    inner: R,
    out: W,
}

impl<R: Read, W: Write> Read for Tee<R, W> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.out.write_all(&buf[..n])?;
        self.out.flush()?;
        Ok(n)
    }
}

/// What a capture brought.
pub struct Summary {
    /// Frames in the stream.
    pub frames: u64,
    /// Frames the daemon lost to a slow reader, as its last statistics said.
    pub lost: u64,
}

/// Copies the pcapng stream that follows the reply line to `out` and
/// counts what it holds.
pub fn receive(stream: impl Read, out: impl Write) -> Result<Summary, String> {
    let tee = Tee { inner: stream, out };
    let mut reader = PcapNgReader::new(tee).map_err(|e| format!("not a pcapng stream: {e}"))?;
    let mut summary = Summary { frames: 0, lost: 0 };
    while let Some(block) = reader.next_block() {
        match block {
            Ok(Block::EnhancedPacket(_)) => summary.frames += 1,
            Ok(Block::InterfaceStatistics(statistics)) => {
                for option in &statistics.options {
                    if let InterfaceStatisticsOption::IsbIfDrop(lost) = option {
                        summary.lost = *lost;
                    }
                }
            }
            Ok(_) => {}
            // The stream ended mid-block: the bridge stopped.
            Err(_) => break,
        }
    }
    Ok(summary)
}
