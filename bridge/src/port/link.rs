//! A worker's queue of a port on a real link, tap, raw, VXLAN or vhost-user, as one
//! type, so that a bridge can mix the kinds while the worker stays
//! monomorphised (an enum, not `dyn`).

use std::io;
use std::os::fd::RawFd;

use crate::wire::vxlan::Vtep;

use super::{
    Outgoing, PortError, Queue, RawQueue, RxBatch, RxReport, SendReport, TapQueue, VhostQueue,
    VxlanQueue, VNET_HDR_LEN,
};

/// A tap queue, a packet socket, a VXLAN queue or a vhost-user queue pair.
#[derive(Debug)]
pub enum LinkQueue {
    /// A tap queue.
    Tap(TapQueue),
    /// A packet socket.
    Raw(RawQueue),
    /// A VXLAN segment's queue.
    Vxlan(VxlanQueue),
    /// A vhost-user port's queue pair.
    Vhost(VhostQueue),
}

impl Queue for LinkQueue {
    // All carry the same virtio-net header, so frames pass between them
    // with their offload state.
    const METADATA_LEN: usize = VNET_HDR_LEN;

    fn name(&self) -> &str {
        match self {
            LinkQueue::Tap(port) => port.name(),
            LinkQueue::Raw(port) => port.name(),
            LinkQueue::Vxlan(port) => port.name(),
            LinkQueue::Vhost(port) => port.name(),
        }
    }

    fn raw_fd(&self) -> Option<RawFd> {
        match self {
            LinkQueue::Tap(port) => port.raw_fd(),
            LinkQueue::Raw(port) => port.raw_fd(),
            LinkQueue::Vxlan(port) => port.raw_fd(),
            LinkQueue::Vhost(port) => port.raw_fd(),
        }
    }

    fn recv_batch(&mut self, batch: &mut RxBatch) -> Result<RxReport, PortError> {
        match self {
            LinkQueue::Tap(port) => port.recv_batch(batch),
            LinkQueue::Raw(port) => port.recv_batch(batch),
            LinkQueue::Vxlan(port) => port.recv_batch(batch),
            LinkQueue::Vhost(port) => port.recv_batch(batch),
        }
    }

    fn release(&mut self) {
        match self {
            LinkQueue::Raw(port) => port.release(),
            LinkQueue::Vhost(port) => port.release(),
            LinkQueue::Tap(_) | LinkQueue::Vxlan(_) => {}
        }
    }

    fn send_batch<'a>(&mut self, frames: impl Iterator<Item = Outgoing<'a>>) -> SendReport {
        match self {
            LinkQueue::Tap(port) => port.send_batch(frames),
            LinkQueue::Raw(port) => port.send_batch(frames),
            LinkQueue::Vxlan(port) => port.send_batch(frames),
            LinkQueue::Vhost(port) => port.send_batch(frames),
        }
    }

    fn send_batch_to<'a>(
        &mut self,
        frames: impl Iterator<Item = (Outgoing<'a>, Option<Vtep>)>,
    ) -> SendReport {
        match self {
            LinkQueue::Tap(port) => port.send_batch_to(frames),
            LinkQueue::Raw(port) => port.send_batch_to(frames),
            LinkQueue::Vxlan(port) => port.send_batch_to(frames),
            LinkQueue::Vhost(port) => port.send_batch_to(frames),
        }
    }

    fn take_error(&mut self) -> Option<io::Error> {
        match self {
            LinkQueue::Tap(port) => port.take_error(),
            LinkQueue::Raw(port) => port.take_error(),
            LinkQueue::Vxlan(port) => port.take_error(),
            LinkQueue::Vhost(port) => port.take_error(),
        }
    }

    fn link_ready(&self) -> bool {
        match self {
            LinkQueue::Tap(port) => port.link_ready(),
            LinkQueue::Raw(port) => port.link_ready(),
            LinkQueue::Vxlan(port) => port.link_ready(),
            LinkQueue::Vhost(port) => port.link_ready(),
        }
    }

    fn link_fd(&self) -> Option<RawFd> {
        match self {
            LinkQueue::Vhost(port) => port.link_fd(),
            _ => None,
        }
    }

    fn link_lost(&self) -> bool {
        match self {
            LinkQueue::Tap(port) => port.link_lost(),
            LinkQueue::Raw(port) => port.link_lost(),
            LinkQueue::Vxlan(port) => port.link_lost(),
            LinkQueue::Vhost(port) => port.link_lost(),
        }
    }

    fn empty_read_is_syscall(&self) -> bool {
        match self {
            LinkQueue::Tap(port) => port.empty_read_is_syscall(),
            LinkQueue::Raw(port) => port.empty_read_is_syscall(),
            LinkQueue::Vxlan(port) => port.empty_read_is_syscall(),
            LinkQueue::Vhost(port) => port.empty_read_is_syscall(),
        }
    }

    fn before_sleep(&mut self) -> bool {
        match self {
            LinkQueue::Vhost(port) => port.before_sleep(),
            _ => true,
        }
    }

    fn pending(&self) -> bool {
        match self {
            LinkQueue::Vxlan(port) => port.pending(),
            LinkQueue::Vhost(port) => port.pending(),
            _ => false,
        }
    }
}
