//! The bridge core: frames, the MAC learning table, the forwarding decision,
//! ports and workers.
//!
//! - [`wire`]: zero-copy views of Ethernet frames and MAC addresses.
//! - [`port_id`]: what names a port: its id, sets of ports, the most a bridge has.
//! - [`fdb`]: the MAC learning table, generic over a [`locks::Strategy`].
//! - [`forward`]: the forwarding pipeline: each frame's verdict from pure stages.
//! - [`port`]: the batched port abstraction and the in-memory port.
//! - [`worker`]: the forwarding loop.
//! - [`monitor`]: link state and local addresses of raw ports.
//! - [`counters`]: per-port counters.
//! - [`capture`]: copies of a port's frames for a capture.
//! - [`stp`]: the Rapid Spanning Tree Protocol (802.1D-2004 clause 17), I/O-free.
//! - [`mcast`]: IGMP and MLD snooping as the Linux bridge does it, I/O-free.

#![deny(unsafe_code)]

pub mod capture;
pub mod counters;
pub mod evpn;
pub mod fdb;
pub mod forward;
pub mod mcast;
pub mod monitor;
pub mod port;
pub mod port_id;
pub mod rtnl;
pub mod stp;
pub mod vlan;
pub mod wire;
pub mod worker;

pub use fdb::{FdbConfig, FdbKey, MacTable};
pub use forward::{decide, Decision, DropReason, Verdict};
pub use port_id::{PortId, PortSet, MAX_PORTS};
pub use worker::{Mode, SectionMode, Stopper, Worker, WorkerConfig, DEFAULT_BATCH};
