//! 17.26 Port Transmit state machine: sends a BPDU when there is new
//! information (newInfo) and the Transmit Hold Count allows, and a
//! periodic one every HelloTime on designated ports (and on the root port
//! while a topology change is signalled).
//!
//! On an RSTP port every role but Disabled sends RST BPDUs; on a port
//! that speaks 802.1D only a designated port sends Configuration BPDUs
//! and only the root port sends TCNs, as an 802.1D-1998 bridge would.

use super::super::bpdu::{flags, Bpdu, BpduKind, BpduRole};
use super::super::bridge::Bridge;
use super::super::Role;

/// The states of 17.26.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PtxState {
    TransmitInit,
    TransmitPeriodic,
    TransmitConfig,
    TransmitTcn,
    TransmitRstp,
    Idle,
}

/// BEGIN enters TRANSMIT_INIT.
pub(crate) fn begin(b: &mut Bridge, i: usize) {
    enter(b, i, PtxState::TransmitInit);
}

/// Takes the machine's enabled transitions.
pub(crate) fn step(b: &mut Bridge, i: usize) -> bool {
    super::drive(b, i, next, enter)
}

fn next(b: &Bridge, i: usize) -> Option<PtxState> {
    let p = &b.ports[i];
    if p.ptx != PtxState::Idle {
        return Some(PtxState::Idle); // every other state: UCT to IDLE
    }
    // All transitions out of IDLE are qualified by selected && !updtInfo;
    // a disabled port has no link to send on.
    if !p.selected || p.updt_info || !p.port_enabled || p.role == Role::Disabled {
        return None;
    }
    let may_send = p.new_info && p.tx_count < b.tx_hold_count && p.hello_when != 0;
    if p.hello_when == 0 {
        Some(PtxState::TransmitPeriodic)
    } else if p.send_rstp && may_send {
        Some(PtxState::TransmitRstp)
    } else if !p.send_rstp && may_send && p.role == Role::Root && p.tc_while != 0 {
        // A TCN says only that the topology changed: send one while
        // tcWhile runs, not for every other change newInfo marks.
        Some(PtxState::TransmitTcn)
    } else if !p.send_rstp && may_send && p.role == Role::Designated {
        Some(PtxState::TransmitConfig)
    } else {
        None
    }
}

fn enter(b: &mut Bridge, i: usize, state: PtxState) {
    b.ports[i].ptx = state;
    match state {
        PtxState::TransmitInit => {
            let p = &mut b.ports[i];
            p.new_info = true;
            p.tx_count = 0;
        }
        PtxState::TransmitPeriodic => {
            let p = &mut b.ports[i];
            p.new_info = p.new_info
                || p.role == Role::Designated
                || (p.role == Role::Root && p.tc_while != 0);
        }
        PtxState::TransmitConfig => {
            b.ports[i].new_info = false;
            tx_config(b, i);
            let p = &mut b.ports[i];
            p.tx_count += 1;
            p.tc_ack = false;
        }
        PtxState::TransmitTcn => {
            b.ports[i].new_info = false;
            tx_tcn(b, i);
            b.ports[i].tx_count += 1;
        }
        PtxState::TransmitRstp => {
            b.ports[i].new_info = false;
            tx_rstp(b, i);
            let p = &mut b.ports[i];
            p.tx_count += 1;
            p.tc_ack = false;
        }
        PtxState::Idle => {
            let p = &mut b.ports[i];
            p.hello_when = p.hello_time();
        }
    }
}

/// 17.21.19 txConfig(): a Configuration BPDU with the port's
/// designatedPriority and designatedTimes, the TC flag while tcWhile runs
/// and the TC Acknowledgment flag from tcAck.
fn tx_config(b: &mut Bridge, i: usize) {
    let p = &b.ports[i];
    let mut f = 0;
    if p.tc_while != 0 {
        f |= flags::TC;
    }
    if p.tc_ack {
        f |= flags::TC_ACK;
    }
    let bpdu = Bpdu {
        kind: BpduKind::Config,
        flags: f,
        priority: p.designated_priority,
        times: p.designated_times,
    };
    b.send(i, &bpdu);
}

/// 17.21.20 txRstp(): an RST BPDU with designatedPriority and
/// designatedTimes, the port's role, and the Proposal, Agreement, TC,
/// Learning and Forwarding flags from proposing, agree, tcWhile,
/// learning and forwarding. The TC Acknowledgment flag is never set.
fn tx_rstp(b: &mut Bridge, i: usize) {
    let p = &b.ports[i];
    let role = match p.role {
        Role::Root => BpduRole::Root,
        Role::Designated => BpduRole::Designated,
        Role::Alternate | Role::Backup => BpduRole::AlternateBackup,
        Role::Disabled => BpduRole::Unknown,
    };
    let mut f = role.flags();
    for (set, bit) in [
        (p.tc_while != 0, flags::TC),
        (p.proposing, flags::PROPOSAL),
        (p.learning, flags::LEARNING),
        (p.forwarding, flags::FORWARDING),
        (p.agree, flags::AGREEMENT),
    ] {
        if set {
            f |= bit;
        }
    }
    let bpdu = Bpdu {
        kind: BpduKind::Rst,
        flags: f,
        priority: p.designated_priority,
        times: p.designated_times,
    };
    b.send(i, &bpdu);
}

/// 17.21.21 txTcn(): a TCN BPDU.
fn tx_tcn(b: &mut Bridge, i: usize) {
    b.send(i, &Bpdu::tcn());
}
