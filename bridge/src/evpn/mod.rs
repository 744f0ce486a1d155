//! EVPN through FRR: an `evpn=on` VXLAN port keeps a kernel mirror of
//! itself (`mirror.rs`) that FRR's zebra reads its VNI, local address and
//! local stations from, and writes remote stations and the flood list
//! into (`fdb.rs` writes the one and reads the other); requests to the
//! kernel go through `crate::rtnl`. docs/design.md
//! ("EVPN through FRR") says why a mirror.

pub mod fdb;
pub mod mirror;

pub use fdb::{Change, FdbEvents, Installed};
pub use mirror::{Mirror, MirrorConfig, MirrorError, DEFAULT_MIRROR_PORT};
