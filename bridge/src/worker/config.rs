//! What a worker is told to do: batch sizes, read sections, bridge or
//! relay, sleeping or polling, VLAN filtering.

/// How long a read section lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SectionMode {
    /// One section per received batch: one lock acquisition, snapshot load or
    /// epoch pin for up to a batch of frames.
    #[default]
    PerBatch,
    /// One section per frame: the fine-grained alternative, to measure what
    /// batching saves.
    PerFrame,
}

/// What a worker does with frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// A learning bridge: the MAC table decides.
    #[default]
    Bridge,
    /// A two-port MAC relay (like OpenBSD's tpmr(4)): every frame goes out
    /// of the other port, no table, no rule; the forwarding loop alone, as
    /// the reference the bridge is measured against.
    Relay,
}

/// Frames a worker takes from one queue at a time, unless told otherwise
/// (`mpbridge run --batch`): of 32, 64, 128 and 256, the fastest through
/// vhost-user ports with the default lock, epoch, and level with 64 under
/// mutex (docs/benchmarks.md, "The batch's size").
pub const DEFAULT_BATCH: usize = 128;

/// Worker settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerConfig {
    /// The most frames received from one port in one batch
    /// ([`DEFAULT_BATCH`] unless set).
    pub batch_size: usize,
    /// The largest frame a receive buffer holds.
    pub frame_capacity: usize,
    /// How long read sections last.
    pub section: SectionMode,
    /// Bridge or relay.
    pub mode: Mode,
    /// Busy-poll the queues instead of sleeping in `poll(2)` when idle.
    pub busy_poll: bool,
    /// Collect the lock statistics of the MAC table's sections (see
    /// [`locks::lockstat`]; the caller turns counting on).
    pub lockstat: bool,
    /// 802.1Q VLAN filtering (see [`crate::vlan`]): ports are members of
    /// VLANs, set with [`Worker::set_vlans`](super::Worker::set_vlans) or [`PortControl::add_with_vlans`](super::PortControl::add_with_vlans).
    pub vlan_filtering: bool,
    /// Spanning tree runs: BPDUs are handed to it (through the
    /// [`EventSink`](super::EventSink)) rather than flooded.
    pub stp: bool,
    /// The move limit on stations, if any (without it, a port whose
    /// stations move often is only warned of).
    pub move_limit: Option<super::MoveLimit>,
    /// The link-local groups 01:80:C2:00:00:0X forwarded (flooded) when
    /// bit X is set, as the Linux bridge's `group_fwd_mask`; bits 0 to 2
    /// (STP, MAC pause, LACP) are never set.
    pub group_fwd_mask: u16,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            batch_size: DEFAULT_BATCH,
            frame_capacity: 2048,
            section: SectionMode::PerBatch,
            mode: Mode::Bridge,
            busy_poll: false,
            lockstat: false,
            vlan_filtering: false,
            stp: false,
            move_limit: None,
            group_fwd_mask: 0,
        }
    }
}
