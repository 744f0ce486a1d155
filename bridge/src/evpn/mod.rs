//! EVPN through FRR: an `evpn=on` VXLAN port keeps a kernel mirror of
//! itself (`mirror.rs`) that FRR's zebra reads its VNI, local address and
//! local stations from, and writes remote stations and the flood list
//! into; requests to the kernel go through `netlink.rs`. docs/design.md
//! ("EVPN through FRR") says why a mirror.

pub mod mirror;
pub mod netlink;

pub use mirror::{Mirror, MirrorConfig, MirrorError, DEFAULT_MIRROR_PORT};
pub use netlink::Rtnl;
