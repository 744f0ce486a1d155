//! 17.27 Port Information state machine: records the best information
//! heard on the port (portPriority, portTimes), ages it out when the
//! neighbour falls silent (rcvdInfoWhile), replaces it with this bridge's
//! when the port is designated (UPDATE), and turns the flags of received
//! BPDUs into proposals, agreements, disputes and topology change notes.

use super::super::bpdu::{flags, BpduKind, BpduRole};
use super::super::bridge::Bridge;
use super::super::port::{InfoIs, Port, RcvdInfo};

/// The states of 17.27.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PimState {
    Disabled,
    Aged,
    Update,
    Current,
    Receive,
    SuperiorDesignated,
    RepeatedDesignated,
    InferiorDesignated,
    NotDesignated,
    Other,
}

/// BEGIN enters DISABLED.
pub(crate) fn begin(b: &mut Bridge, i: usize) {
    enter(b, i, PimState::Disabled);
}

/// Takes the machine's enabled transitions.
pub(crate) fn step(b: &mut Bridge, i: usize) -> bool {
    super::drive(b, i, next, enter)
}

fn next(b: &Bridge, i: usize) -> Option<PimState> {
    let p = &b.ports[i];
    // Global: (!portEnabled && (infoIs != Disabled)).
    if !p.port_enabled && p.info_is != InfoIs::Disabled {
        return Some(PimState::Disabled);
    }
    use PimState::*;
    match p.pim {
        Disabled if p.port_enabled => Some(Aged),
        Disabled if p.rcvd_msg => Some(Disabled),
        Aged if p.selected && p.updt_info => Some(Update),
        Update => Some(Current),
        Current if p.selected && p.updt_info => Some(Update),
        Current
            if p.info_is == InfoIs::Received
                && p.rcvd_info_while == 0
                && !p.updt_info
                && !p.rcvd_msg =>
        {
            Some(Aged)
        }
        Current if p.rcvd_msg && !p.updt_info => Some(Receive),
        Receive => Some(match p.rcvd_info {
            RcvdInfo::SuperiorDesignated => SuperiorDesignated,
            RcvdInfo::RepeatedDesignated => RepeatedDesignated,
            RcvdInfo::InferiorDesignated => InferiorDesignated,
            RcvdInfo::InferiorRootAlternate => NotDesignated,
            RcvdInfo::Other => Other,
        }),
        SuperiorDesignated | RepeatedDesignated | InferiorDesignated | NotDesignated | Other => {
            Some(Current)
        }
        _ => None,
    }
}

fn enter(b: &mut Bridge, i: usize, state: PimState) {
    let rstp_version = b.rstp_version();
    let p = &mut b.ports[i];
    p.pim = state;
    match state {
        PimState::Disabled => {
            p.rcvd_msg = false;
            p.proposing = false;
            p.proposed = false;
            p.agree = false;
            p.agreed = false;
            p.rcvd_info_while = 0;
            p.info_is = InfoIs::Disabled;
            p.reselect = true;
            p.selected = false;
        }
        PimState::Aged => {
            p.info_is = InfoIs::Aged;
            p.reselect = true;
            p.selected = false;
        }
        PimState::Update => {
            p.proposing = false;
            p.proposed = false;
            p.agreed = p.agreed && better_or_same_info(p, InfoIs::Mine);
            p.synced = p.synced && p.agreed;
            p.port_priority = p.designated_priority;
            p.port_times = p.designated_times;
            p.updt_info = false;
            p.info_is = InfoIs::Mine;
            p.new_info = true;
        }
        PimState::Current => {}
        PimState::Receive => p.rcvd_info = rcv_info(p),
        PimState::SuperiorDesignated => {
            p.agreed = false;
            p.proposing = false;
            record_proposal(p);
            set_tc_flags(p);
            p.agree = p.agree && better_or_same_info(p, InfoIs::Received);
            record_priority(p);
            record_times(p);
            updt_rcvd_info_while(p);
            p.info_is = InfoIs::Received;
            p.reselect = true;
            p.selected = false;
            p.rcvd_msg = false;
        }
        PimState::RepeatedDesignated => {
            record_proposal(p);
            set_tc_flags(p);
            updt_rcvd_info_while(p);
            p.rcvd_msg = false;
        }
        PimState::InferiorDesignated => {
            record_dispute(p);
            p.rcvd_msg = false;
        }
        PimState::NotDesignated => {
            record_agreement(p, rstp_version);
            set_tc_flags(p);
            p.rcvd_msg = false;
        }
        PimState::Other => p.rcvd_msg = false,
    }
}

/// The role a received BPDU conveys. A Configuration BPDU conveys a
/// Designated Port Role, and so does an RST BPDU whose role is Unknown
/// (9.2.9: it is treated as a Configuration BPDU). A TCN conveys none of
/// its own; only a Root Port sends one.
fn conveyed_role(p: &Port) -> BpduRole {
    match p.bpdu.kind {
        BpduKind::Config => BpduRole::Designated,
        BpduKind::Tcn => BpduRole::Root,
        BpduKind::Rst => match p.bpdu.role() {
            Some(BpduRole::Unknown) | None => BpduRole::Designated,
            Some(role) => role,
        },
    }
}

/// 17.21.8 rcvInfo(): decodes the message priority vector and times into
/// msgPriority and msgTimes and classifies the message against the port
/// priority vector.
///
/// A TCN BPDU carries no priority vector; its message priority is taken
/// to be the port's own, so that it reads as the Root Port message it is
/// and NOT_DESIGNATED records its notification (setTcFlags()).
fn rcv_info(p: &mut Port) -> RcvdInfo {
    if p.bpdu.kind == BpduKind::Tcn {
        p.msg_priority = p.port_priority;
        p.msg_times = p.port_times;
        return RcvdInfo::InferiorRootAlternate;
    }
    p.msg_priority = p.bpdu.priority;
    p.msg_priority.bridge_port = p.port_id;
    p.msg_times = p.bpdu.times;
    let msg = &p.msg_priority;
    let port = &p.port_priority;
    match conveyed_role(p) {
        BpduRole::Designated => {
            if msg.same(port) {
                if p.msg_times != p.port_times {
                    RcvdInfo::SuperiorDesignated
                } else {
                    RcvdInfo::RepeatedDesignated
                }
            } else if msg.superior(port) {
                RcvdInfo::SuperiorDesignated
            } else {
                RcvdInfo::InferiorDesignated
            }
        }
        _ if !msg.better(port) => RcvdInfo::InferiorRootAlternate,
        _ => RcvdInfo::Other,
    }
}

/// 17.21.1 betterorsameInfo(newInfoIs): whether the information about to
/// be recorded (received: msgPriority; mine: designatedPriority) is
/// better than or the same as the port priority vector of the same
/// origin.
fn better_or_same_info(p: &Port, new_info_is: InfoIs) -> bool {
    match new_info_is {
        InfoIs::Received => {
            p.info_is == InfoIs::Received && p.msg_priority.better_or_same(&p.port_priority)
        }
        InfoIs::Mine => {
            p.info_is == InfoIs::Mine && p.designated_priority.better_or_same(&p.port_priority)
        }
        InfoIs::Aged | InfoIs::Disabled => false,
    }
}

/// 17.21.9 recordAgreement(): an RST BPDU's Agreement flag, on a
/// point-to-point link of a bridge that runs RSTP, sets agreed and ends
/// the proposal; anything else clears agreed.
fn record_agreement(p: &mut Port, rstp_version: bool) {
    if rstp_version
        && p.oper_point_to_point_mac()
        && p.bpdu.kind == BpduKind::Rst
        && p.bpdu.flags & flags::AGREEMENT != 0
    {
        p.agreed = true;
        p.proposing = false;
    } else {
        p.agreed = false;
    }
}

/// 17.21.10 recordDispute(): an inferior designated RST BPDU with the
/// Learning flag comes from a port that does not hear this one (a link
/// that fails one way): the port is disputed and stops relying on an
/// agreement, so the Port Role Transitions machine makes it discard.
fn record_dispute(p: &mut Port) {
    if p.bpdu.kind == BpduKind::Rst && p.bpdu.flags & flags::LEARNING != 0 {
        p.disputed = true;
        p.agreed = false;
    }
}

/// 17.21.11 recordProposal(): a designated message with the Proposal flag
/// sets proposed.
fn record_proposal(p: &mut Port) {
    if conveyed_role(p) == BpduRole::Designated
        && p.bpdu.kind == BpduKind::Rst
        && p.bpdu.flags & flags::PROPOSAL != 0
    {
        p.proposed = true;
    }
}

/// 17.21.12 recordPriority(): portPriority = msgPriority.
fn record_priority(p: &mut Port) {
    p.port_priority = p.msg_priority;
}

/// 17.21.13 recordTimes(): portTimes = msgTimes, with a Hello Time of at
/// least one second so that the information can be aged.
fn record_times(p: &mut Port) {
    p.port_times = p.msg_times;
    p.port_times.hello_time = p.port_times.hello_time.max(1);
}

/// 17.21.17 setTcFlags(): rcvdTc and rcvdTcAck from a Configuration or
/// RST BPDU's flags, rcvdTcn for a TCN BPDU.
fn set_tc_flags(p: &mut Port) {
    match p.bpdu.kind {
        BpduKind::Config | BpduKind::Rst => {
            if p.bpdu.flags & flags::TC != 0 {
                p.rcvd_tc = true;
            }
            if p.bpdu.kind == BpduKind::Config && p.bpdu.flags & flags::TC_ACK != 0 {
                p.rcvd_tc_ack = true;
            }
        }
        BpduKind::Tcn => p.rcvd_tcn = true,
    }
}

/// 17.21.23 updtRcvdInfoWhile(): three times the neighbour's Hello Time
/// while Message Age + 1 s does not exceed Max Age, else 0 (the
/// information has travelled too far and is dropped at once).
fn updt_rcvd_info_while(p: &mut Port) {
    let t = &p.port_times;
    p.rcvd_info_while = if t.message_age.saturating_add(1) <= t.max_age {
        t.hello_time.saturating_mul(3)
    } else {
        0
    };
}
