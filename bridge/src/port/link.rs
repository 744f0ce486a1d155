//! A port on a real link, tap, raw or VXLAN, as one type, so that a bridge can mix
//! both kinds while the worker stays monomorphised (an enum, not `dyn`).

use std::io;
use std::os::fd::RawFd;

use crate::wire::vxlan::Vtep;

use super::{
    Port, PortError, RawPort, RxBatch, RxReport, SendReport, TapPort, VxlanPort, VNET_HDR_LEN,
};

/// A tap queue or a packet socket.
#[derive(Debug)]
pub enum LinkPort {
    /// A tap queue.
    Tap(TapPort),
    /// A packet socket.
    Raw(RawPort),
    /// A VXLAN segment's queue.
    Vxlan(VxlanPort),
}

impl Port for LinkPort {
    // Both carry the same virtio-net header, so frames pass between them
    // with their offload state.
    const METADATA_LEN: usize = VNET_HDR_LEN;

    fn name(&self) -> &str {
        match self {
            LinkPort::Tap(port) => port.name(),
            LinkPort::Raw(port) => port.name(),
            LinkPort::Vxlan(port) => port.name(),
        }
    }

    fn raw_fd(&self) -> Option<RawFd> {
        match self {
            LinkPort::Tap(port) => port.raw_fd(),
            LinkPort::Raw(port) => port.raw_fd(),
            LinkPort::Vxlan(port) => port.raw_fd(),
        }
    }

    fn recv_batch(&mut self, batch: &mut RxBatch) -> Result<RxReport, PortError> {
        match self {
            LinkPort::Tap(port) => port.recv_batch(batch),
            LinkPort::Raw(port) => port.recv_batch(batch),
            LinkPort::Vxlan(port) => port.recv_batch(batch),
        }
    }

    fn send_batch<'a>(&mut self, frames: impl Iterator<Item = &'a [u8]>) -> SendReport {
        match self {
            LinkPort::Tap(port) => port.send_batch(frames),
            LinkPort::Raw(port) => port.send_batch(frames),
            LinkPort::Vxlan(port) => port.send_batch(frames),
        }
    }

    fn send_batch_to<'a>(
        &mut self,
        frames: impl Iterator<Item = (&'a [u8], Option<Vtep>)>,
    ) -> SendReport {
        match self {
            LinkPort::Tap(port) => port.send_batch_to(frames),
            LinkPort::Raw(port) => port.send_batch_to(frames),
            LinkPort::Vxlan(port) => port.send_batch_to(frames),
        }
    }

    fn take_error(&mut self) -> Option<io::Error> {
        match self {
            LinkPort::Tap(port) => port.take_error(),
            LinkPort::Raw(port) => port.take_error(),
            LinkPort::Vxlan(port) => port.take_error(),
        }
    }

    fn link_ready(&self) -> bool {
        match self {
            LinkPort::Tap(port) => port.link_ready(),
            LinkPort::Raw(port) => port.link_ready(),
            LinkPort::Vxlan(port) => port.link_ready(),
        }
    }

    fn link_lost(&self) -> bool {
        match self {
            LinkPort::Tap(port) => port.link_lost(),
            LinkPort::Raw(port) => port.link_lost(),
            LinkPort::Vxlan(port) => port.link_lost(),
        }
    }

    fn empty_read_is_syscall(&self) -> bool {
        match self {
            LinkPort::Tap(port) => port.empty_read_is_syscall(),
            LinkPort::Raw(port) => port.empty_read_is_syscall(),
            LinkPort::Vxlan(port) => port.empty_read_is_syscall(),
        }
    }

    fn pending(&self) -> bool {
        match self {
            LinkPort::Vxlan(port) => port.pending(),
            _ => false,
        }
    }
}
