//! 17.23 Port Receive state machine: hands a received BPDU to the other
//! machines (rcvdMsg), notes its version for Port Protocol Migration, and
//! clears operEdge, since a BPDU means a bridge is attached.

use super::super::bpdu::BpduKind;
use super::super::bridge::{Bridge, MIGRATE_TIME};

/// The states of 17.23.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PrxState {
    Discard,
    Receive,
}

/// BEGIN enters DISCARD.
pub(crate) fn begin(b: &mut Bridge, i: usize) {
    enter(b, i, PrxState::Discard);
}

/// Takes the machine's enabled transitions.
pub(crate) fn step(b: &mut Bridge, i: usize) -> bool {
    super::drive(b, i, next, enter)
}

fn next(b: &Bridge, i: usize) -> Option<PrxState> {
    let p = &b.ports[i];
    // Global: ((rcvdBpdu || (edgeDelayWhile != MigrateTime)) && !portEnabled).
    if (p.rcvd_bpdu || p.edge_delay_while != MIGRATE_TIME) && !p.port_enabled {
        return Some(PrxState::Discard);
    }
    match p.prx {
        PrxState::Discard if p.rcvd_bpdu && p.port_enabled => Some(PrxState::Receive),
        PrxState::Receive if p.rcvd_bpdu && p.port_enabled && !p.rcvd_msg => {
            Some(PrxState::Receive)
        }
        _ => None,
    }
}

fn enter(b: &mut Bridge, i: usize, state: PrxState) {
    let p = &mut b.ports[i];
    p.prx = state;
    match state {
        PrxState::Discard => {
            p.rcvd_bpdu = false;
            p.rcvd_rstp = false;
            p.rcvd_stp = false;
            p.rcvd_msg = false;
            p.edge_delay_while = MIGRATE_TIME;
        }
        PrxState::Receive => {
            // 17.21.22 updtBPDUVersion(): rcvdSTP for a Configuration or
            // TCN BPDU, rcvdRSTP for an RST BPDU.
            match p.bpdu.kind {
                BpduKind::Config | BpduKind::Tcn => p.rcvd_stp = true,
                BpduKind::Rst => p.rcvd_rstp = true,
            }
            p.oper_edge = false;
            p.rcvd_bpdu = false;
            p.rcvd_msg = true;
            p.edge_delay_while = MIGRATE_TIME;
        }
    }
}
