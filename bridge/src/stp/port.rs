//! One port's variables: the timers of 802.1D-2004 17.17, the per-port
//! variables of 17.19, the per-port parameters of 17.20, and the state of
//! each per-port state machine.

use super::bpdu::Bpdu;
use super::config::PortConfig;
use super::machines::{
    detection::BdmState, information::PimState, migration::PpmState, receive::PrxState,
    role_transitions::PrtState, state_transition::PstState, topology_change::TcmState,
    transmit::PtxState,
};
use super::priority::{port_identifier, PriorityVector, Times};
use super::{PortState, Role};
use crate::port_id::PortId;
use crate::wire::MacAddr;

/// 17.19 infoIs: where the port's port priority vector came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InfoIs {
    /// From a BPDU, and not yet aged out.
    Received,
    /// From this bridge: the port is designated.
    Mine,
    /// Received information aged out, or the port just came up.
    Aged,
    /// The port is not enabled.
    Disabled,
}

/// 17.19 rcvdInfo: what rcvInfo() (17.21.8) made of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RcvdInfo {
    SuperiorDesignated,
    RepeatedDesignated,
    InferiorDesignated,
    InferiorRootAlternate,
    Other,
}

/// Counters for [`super::PortStatus`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counters {
    pub rx_bpdus: u64,
    pub tx_bpdus: u64,
    pub rx_tcns: u64,
    pub tx_tcns: u64,
    pub bad_bpdus: u64,
    pub flush_requests: u64,
    pub flushes: u64,
}

/// A bridge port as the state machines see it. Field names follow the
/// standard's variables in snake case.
#[derive(Debug, Clone)]
pub(crate) struct Port {
    pub id: PortId,
    pub mac: MacAddr,
    pub config: PortConfig,

    // 17.17 timers, in seconds.
    pub edge_delay_while: u16,
    pub fd_while: u16,
    pub hello_when: u16,
    pub mdelay_while: u16,
    pub rb_while: u16,
    pub rcvd_info_while: u16,
    pub rr_while: u16,
    pub tc_while: u16,

    // 17.19 variables.
    pub agree: bool,
    pub agreed: bool,
    pub designated_priority: PriorityVector,
    pub designated_times: Times,
    pub disputed: bool,
    pub fdb_flush: bool,
    pub forward: bool,
    pub forwarding: bool,
    pub info_is: InfoIs,
    pub learn: bool,
    pub learning: bool,
    pub mcheck: bool,
    pub msg_priority: PriorityVector,
    pub msg_times: Times,
    pub new_info: bool,
    pub oper_edge: bool,
    pub port_enabled: bool,
    pub port_id: u16,
    pub port_priority: PriorityVector,
    pub port_times: Times,
    pub proposed: bool,
    pub proposing: bool,
    pub rcvd_bpdu: bool,
    pub rcvd_info: RcvdInfo,
    pub rcvd_msg: bool,
    pub rcvd_rstp: bool,
    pub rcvd_stp: bool,
    pub rcvd_tc: bool,
    pub rcvd_tc_ack: bool,
    pub rcvd_tcn: bool,
    pub re_root: bool,
    pub reselect: bool,
    pub role: Role,
    pub selected: bool,
    pub selected_role: Role,
    pub send_rstp: bool,
    pub sync: bool,
    pub synced: bool,
    pub tc_ack: bool,
    pub tc_prop: bool,
    pub tx_count: u16,
    pub updt_info: bool,

    /// The BPDU that rcvdBpdu announces, kept until the Port Information
    /// machine has read it.
    pub bpdu: Bpdu,

    // The machines' states.
    pub prx: PrxState,
    pub ppm: PpmState,
    pub bdm: BdmState,
    pub ptx: PtxState,
    pub pim: PimState,
    pub prt: PrtState,
    pub pst: PstState,
    pub tcm: TcmState,

    /// The state last reported in an [`super::Action::State`].
    pub reported: PortState,
    /// A flush was queued since the last tick: another waits for the next.
    pub flushed_in_tick: bool,
    /// A flush was asked for after this tick's: queued at the next tick.
    pub flush_pending: bool,
    pub counters: Counters,
}

impl Port {
    /// A port with every variable at rest; `Bridge::add_port` then runs
    /// the machines' BEGIN states.
    pub fn new(id: PortId, config: PortConfig, mac: MacAddr, times: Times) -> Port {
        let port_id = port_identifier(config.priority, Self::number(id));
        Port {
            id,
            mac,
            config,
            edge_delay_while: 0,
            fd_while: 0,
            hello_when: 0,
            mdelay_while: 0,
            rb_while: 0,
            rcvd_info_while: 0,
            rr_while: 0,
            tc_while: 0,
            agree: false,
            agreed: false,
            designated_priority: PriorityVector::default(),
            designated_times: times,
            disputed: false,
            fdb_flush: false,
            forward: false,
            forwarding: false,
            info_is: InfoIs::Disabled,
            learn: false,
            learning: false,
            mcheck: false,
            msg_priority: PriorityVector::default(),
            msg_times: Times::default(),
            new_info: false,
            oper_edge: false,
            port_enabled: false,
            port_id,
            port_priority: PriorityVector::default(),
            port_times: times,
            proposed: false,
            proposing: false,
            rcvd_bpdu: false,
            rcvd_info: RcvdInfo::Other,
            rcvd_msg: false,
            rcvd_rstp: false,
            rcvd_stp: false,
            rcvd_tc: false,
            rcvd_tc_ack: false,
            rcvd_tcn: false,
            re_root: false,
            reselect: false,
            role: Role::Disabled,
            selected: false,
            selected_role: Role::Disabled,
            send_rstp: false,
            sync: false,
            synced: false,
            tc_ack: false,
            tc_prop: false,
            tx_count: 0,
            updt_info: false,
            bpdu: Bpdu::tcn(),
            prx: PrxState::Discard,
            ppm: PpmState::CheckingRstp,
            bdm: BdmState::NotEdge,
            ptx: PtxState::Idle,
            pim: PimState::Disabled,
            prt: PrtState::InitPort,
            pst: PstState::Discarding,
            tcm: TcmState::Inactive,
            reported: PortState::Discarding,
            flushed_in_tick: false,
            flush_pending: false,
            counters: Counters::default(),
        }
    }

    /// The 802.1D Port Number of a port: its index plus one (0 is not a
    /// valid port number), in 12 bits.
    pub fn number(id: PortId) -> u16 {
        (id.0.wrapping_add(1)) & 0x0fff
    }

    /// The port's current forwarding state, from the Port State
    /// Transition machine's variables.
    pub fn state(&self) -> PortState {
        if self.forwarding {
            PortState::Forwarding
        } else if self.learning {
            PortState::Learning
        } else {
            PortState::Discarding
        }
    }

    /// 17.19 PortPathCost.
    pub fn port_path_cost(&self) -> u32 {
        self.config.path_cost
    }

    /// 17.20.1 AdminEdge.
    pub fn admin_edge(&self) -> bool {
        self.config.admin_edge
    }

    /// 17.20.2 AutoEdge.
    pub fn auto_edge(&self) -> bool {
        self.config.auto_edge
    }

    /// 6.4.3 operPointToPointMAC.
    pub fn oper_point_to_point_mac(&self) -> bool {
        self.config.point_to_point
    }

    /// 17.20.6 FwdDelay: the Forward Delay of designatedTimes.
    pub fn fwd_delay(&self) -> u16 {
        self.designated_times.forward_delay
    }

    /// 17.20.7 HelloTime: the Hello Time of designatedTimes.
    pub fn hello_time(&self) -> u16 {
        self.designated_times.hello_time
    }

    /// 17.20.8 MaxAge: the Max Age of designatedTimes.
    pub fn max_age(&self) -> u16 {
        self.designated_times.max_age
    }

    /// 17.20.5 forwardDelay: HelloTime when the port speaks RSTP (the
    /// wait only covers a missed agreement), FwdDelay otherwise.
    pub fn forward_delay(&self) -> u16 {
        if self.send_rstp {
            self.hello_time()
        } else {
            self.fwd_delay()
        }
    }

    /// 17.20.4 EdgeDelay: MigrateTime on a point-to-point link, MaxAge
    /// otherwise.
    pub fn edge_delay(&self, migrate_time: u16) -> u16 {
        if self.oper_point_to_point_mac() {
            migrate_time
        } else {
            self.max_age()
        }
    }
}
