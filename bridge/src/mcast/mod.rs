//! IGMP and MLD snooping as the Linux bridge does it (`br_multicast.c`
//! with `multicast_snooping` 1, `multicast_igmp_version` 2,
//! `multicast_mld_version` 1, no per-VLAN contexts): multicast goes only
//! to the ports that asked for it and to the router ports, once a querier
//! makes the ports' reports trustworthy.
//!
//! The module does no I/O and reads no clock. It has three parts:
//!
//! - [`classify`], on the workers: one call per multicast frame, without
//!   allocation, that says where it goes ([`Forward`]) and whether the
//!   control plane must see it.
//! - [`Snooping`], on the control plane, one thread: frames in
//!   ([`Snooping::receive`]), port events, time ([`Snooping::tick`] at
//!   [`Snooping::next_deadline`]), and out [`Action`]s
//!   ([`Snooping::take_actions`]): queries to send and table changes to
//!   publish.
//! - [`GroupTable`], between them: the control plane applies the actions
//!   ([`GroupTable::apply`]), the workers read it under the bridge's lock
//!   strategy. A worker forwards a [`Forward::Group`] frame to the group's
//!   members and the family's router ports, a [`Forward::Routers`] frame
//!   to the router ports, each only while
//!   [`GroupTable::querier_present`] says so for the family; otherwise it
//!   floods, as the Linux bridge does.
//!
//! - `classify`: the frame parser both sides share.
//! - `snooping`: the state machine and its parameters.
//! - [`query`]: the queries the bridge sends as querier.
//! - `table`: the forwarding side's view.
//!
//! Where this differs from Linux it says so beside the code; the main
//! difference is that the bridge has no host of its own here, so nothing
//! the bridge device would receive or join is modelled.

mod classify;
pub mod query;
mod snooping;
mod table;

#[cfg(test)]
mod tests;

pub use classify::{classify, Classified, Family, Forward, GroupKey};
pub use snooping::{
    Action, GroupRecord, PortGroups, QuerierStatus, RouterMode, RouterRecord, SnoopConfig,
    SnoopStats, Snooping, MAX_REPORT_RECORDS,
};
pub use table::{GroupMap, GroupReader, GroupSection, GroupTable, Groups};
