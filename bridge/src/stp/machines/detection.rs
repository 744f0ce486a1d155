//! 17.25 Bridge Detection state machine: whether the port is an edge
//! port (operEdge). AdminEdge ports start as edge ports; with AutoEdge, a
//! designated port that proposes and hears no BPDU for EdgeDelay becomes
//! one. Any received BPDU clears operEdge (Port Receive, 17.23).

use super::super::bridge::Bridge;

/// The states of 17.25.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BdmState {
    Edge,
    NotEdge,
}

/// BEGIN enters EDGE when AdminEdge, NOT_EDGE otherwise.
pub(crate) fn begin(b: &mut Bridge, i: usize) {
    let state = match b.ports[i].admin_edge() {
        true => BdmState::Edge,
        false => BdmState::NotEdge,
    };
    enter(b, i, state);
}

/// Takes the machine's enabled transitions.
pub(crate) fn step(b: &mut Bridge, i: usize) -> bool {
    super::drive(b, i, next, enter)
}

fn next(b: &Bridge, i: usize) -> Option<BdmState> {
    let p = &b.ports[i];
    match p.bdm {
        BdmState::Edge => {
            ((!p.port_enabled && !p.admin_edge()) || !p.oper_edge).then_some(BdmState::NotEdge)
        }
        BdmState::NotEdge => ((!p.port_enabled && p.admin_edge())
            || (p.edge_delay_while == 0 && p.auto_edge() && p.send_rstp && p.proposing))
            .then_some(BdmState::Edge),
    }
}

fn enter(b: &mut Bridge, i: usize, state: BdmState) {
    let p = &mut b.ports[i];
    p.bdm = state;
    p.oper_edge = state == BdmState::Edge;
}
