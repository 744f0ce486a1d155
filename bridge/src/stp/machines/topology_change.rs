//! 17.31 Topology Change state machine: a non-edge port that starts
//! forwarding as root or designated port is a topology change (DETECTED);
//! so is a TC flag or a TCN heard on such a port (NOTIFIED_TC,
//! NOTIFIED_TCN). Either way every other such port flushes what it
//! learned (tcProp, PROPAGATING) and signals the change onward for tcWhile.
//! A port leaving the active topology flushes too (INACTIVE).
//!
//! A port with restrictedTcn (802.1Q-2018 13.27.65) keeps what it hears
//! and detects to itself: no tcProp for the others, so no flush.
//!
//! On a port that speaks 802.1D, tcWhile lasts Max Age + Forward Delay,
//! the root port sends TCNs until acknowledged (ACKNOWLEDGED), and a
//! designated port that hears a TCN acknowledges it (tcAck).

use super::super::bridge::Bridge;
use super::super::Role;

/// The states of 17.31.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TcmState {
    Inactive,
    Learning,
    Detected,
    Active,
    NotifiedTcn,
    NotifiedTc,
    Propagating,
    Acknowledged,
}

/// BEGIN enters INACTIVE. Nothing has been learned yet, so the flush it
/// asks for is already done.
pub(crate) fn begin(b: &mut Bridge, i: usize) {
    let p = &mut b.ports[i];
    p.tcm = TcmState::Inactive;
    p.tc_while = 0;
    p.tc_ack = false;
    p.fdb_flush = false;
}

/// Takes the machine's enabled transitions.
pub(crate) fn step(b: &mut Bridge, i: usize) -> bool {
    super::drive(b, i, next, enter)
}

fn next(b: &Bridge, i: usize) -> Option<TcmState> {
    use TcmState::*;
    let p = &b.ports[i];
    let active_role = p.role == Role::Root || p.role == Role::Designated;
    let notified = p.rcvd_tc || p.rcvd_tcn || p.rcvd_tc_ack || p.tc_prop;
    match p.tcm {
        Inactive => (p.learn && !p.fdb_flush).then_some(Learning),
        Learning => {
            if !(active_role || p.learn || p.learning || notified) {
                Some(Inactive)
            } else if notified {
                Some(Learning)
            } else if active_role && p.forward && !p.oper_edge {
                Some(Detected)
            } else {
                None
            }
        }
        Detected | NotifiedTcn | NotifiedTc | Propagating | Acknowledged => {
            // NOTIFIED_TCN goes on to NOTIFIED_TC; the others to ACTIVE.
            Some(if p.tcm == NotifiedTcn {
                NotifiedTc
            } else {
                Active
            })
        }
        Active => {
            if !active_role || p.oper_edge {
                Some(Learning)
            } else if p.rcvd_tcn {
                Some(NotifiedTcn)
            } else if p.rcvd_tc {
                Some(NotifiedTc)
            } else if p.tc_prop && !p.oper_edge {
                Some(Propagating)
            } else if p.rcvd_tc_ack {
                Some(Acknowledged)
            } else {
                None
            }
        }
    }
}

fn enter(b: &mut Bridge, i: usize, state: TcmState) {
    use TcmState::*;
    b.ports[i].tcm = state;
    match state {
        Inactive => {
            let p = &mut b.ports[i];
            p.tc_while = 0;
            p.tc_ack = false;
            // An edge port leaving the topology has no bridges behind it
            // whose paths could have moved.
            if !p.oper_edge {
                b.flush(i);
            }
        }
        Learning => {
            let p = &mut b.ports[i];
            p.rcvd_tc = false;
            p.rcvd_tcn = false;
            p.rcvd_tc_ack = false;
            p.tc_prop = false;
        }
        Detected => {
            new_tc_while(b, i);
            set_tc_prop_tree(b, i);
            b.ports[i].new_info = true;
        }
        Active => {}
        NotifiedTcn => new_tc_while(b, i),
        NotifiedTc => {
            let p = &mut b.ports[i];
            p.rcvd_tcn = false;
            p.rcvd_tc = false;
            if p.role == Role::Designated {
                p.tc_ack = true;
            }
            set_tc_prop_tree(b, i);
        }
        Propagating => {
            new_tc_while(b, i);
            b.flush(i);
            b.ports[i].tc_prop = false;
        }
        Acknowledged => {
            let p = &mut b.ports[i];
            p.tc_while = 0;
            p.rcvd_tc_ack = false;
        }
    }
}

/// 17.21.7 newTcWhile(): starts tcWhile if it is not running: for twice
/// HelloTime on an RSTP port, which then sends at once (newInfo); for
/// rootTimes' Max Age + Forward Delay on an 802.1D port, where the
/// periodic BPDUs carry the change.
fn new_tc_while(b: &mut Bridge, i: usize) {
    let root_times = b.root_times;
    let p = &mut b.ports[i];
    if p.tc_while != 0 {
        return;
    }
    if p.send_rstp {
        p.tc_while = 2 * p.hello_time();
        p.new_info = true;
    } else {
        p.tc_while = root_times.max_age + root_times.forward_delay;
    }
}

/// 17.21.18 setTcPropTree(): tcProp = TRUE for every port but this one,
/// unless this one has restrictedTcn (802.1Q-2018 13.29.29): then the
/// change stays on this port and no other port flushes for it.
fn set_tc_prop_tree(b: &mut Bridge, i: usize) {
    b.tc_events += 1;
    if b.ports[i].config.restricted_tcn {
        return;
    }
    for (j, p) in b.ports.iter_mut().enumerate() {
        if j != i {
            p.tc_prop = true;
        }
    }
}
