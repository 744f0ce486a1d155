//! What the owner publishes for the threads that must answer without
//! waiting on it.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bridge::fdb::Table;
use bridge::port::vxlan::VxlanShared;
use bridge::vlan::FdbVlan;

use crate::api_error::ApiError;
use crate::ports::PortSpec;
use crate::protocol::{self, FdbEntry};

use super::ports::{find_port, port_label};

/// What the owner publishes for the threads that must answer without
/// waiting on it (`/metrics`; the control socket's reads while the owner
/// is busy with a slow request): the figures of `stats`, `port show` and
/// `mdb show` as of the owner's last look (each tick, once a second, and
/// after each request and signal it handled), and a view of the MAC table
/// itself, which readers read live. Only the owner writes it.
#[derive(Default)]
pub struct Board {
    published: arc_swap::ArcSwapOption<Published>,
    /// Set while the owner handles a request or a signal.
    busy: std::sync::atomic::AtomicBool,
}

/// One publication of the owner's (see [`Board`]).
pub struct Published {
    /// `stats` then.
    pub stats: protocol::Stats,
    /// `port show` then.
    pub ports: Vec<protocol::PortInfo>,
    /// `mdb show` then.
    pub mdb: Result<protocol::Mdb, ApiError>,
    /// The MAC table and the port names: `fdb show`, read live.
    pub fdb: FdbView,
}

impl Board {
    /// The latest publication; `None` before the first.
    pub fn latest(&self) -> Option<Arc<Published>> {
        self.published.load_full()
    }

    /// Replaces the publication.
    pub fn publish(&self, published: Published) {
        self.published.store(Some(Arc::new(published)));
    }

    /// Says whether the owner is busy with a request or a signal.
    pub fn set_busy(&self, busy: bool) {
        // Relaxed: a hint for the control thread, which only chooses
        // between asking the owner and reading the publication by it.
        self.busy.store(busy, Ordering::Relaxed);
    }

    /// Whether the owner is busy with a request or a signal now.
    pub fn busy(&self) -> bool {
        self.busy.load(Ordering::Relaxed)
    }
}

/// The MAC table with what names its ports: what `fdb show` needs, for a
/// thread other than the owner to answer it.
pub struct FdbView {
    pub(super) fdb: Arc<dyn Table>,
    pub(super) ports: Vec<Option<PortSpec>>,
    pub(super) vxlans: BTreeMap<String, Arc<VxlanShared>>,
}

impl FdbView {
    /// `fdb show`: every entry, or those on port `port` and VLAN `vlan`.
    pub fn show(
        &self,
        port: Option<&str>,
        vlan: Option<FdbVlan>,
    ) -> Result<Vec<FdbEntry>, ApiError> {
        let port = port.map(|p| find_port(&self.ports, p)).transpose()?;
        let now = self.fdb.now();
        Ok(self
            .fdb
            .records()
            .into_iter()
            .filter(|r| {
                port.is_none_or(|p| r.port == p) && vlan.is_none_or(|v| r.key.vlan == v.get())
            })
            .map(|r| {
                let label = port_label(&self.ports, r.port);
                let dst = self
                    .vxlans
                    .get(&label)
                    .and_then(|shared| shared.vteps.addr(r.vtep?));
                FdbEntry {
                    mac: r.key.mac.to_string(),
                    vlan: r.key.vlan,
                    state: match (r.is_local, r.is_static, r.is_extern) {
                        (true, _, _) => "local",
                        (false, true, _) => "static",
                        // Installed by a control plane: Linux's name.
                        (false, false, true) => "extern_learn",
                        (false, false, false) => "learned",
                    }
                    .to_owned(),
                    age_s: r.idle_secs(now),
                    dst: dst.map(|ip| ip.to_string()),
                    port: label,
                }
            })
            .collect())
    }
}
