//! 17.30 Port State Transition state machine: makes the port's
//! forwarding state (learning, forwarding) follow what Port Role
//! Transitions decided (learn, forward), and reports each change to the
//! caller, which owns the forwarding process.

use super::super::bridge::Bridge;

/// The states of 17.30.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PstState {
    Discarding,
    Learning,
    Forwarding,
}

/// BEGIN enters DISCARDING.
pub(crate) fn begin(b: &mut Bridge, i: usize) {
    enter(b, i, PstState::Discarding);
}

/// Takes the machine's enabled transitions.
pub(crate) fn step(b: &mut Bridge, i: usize) -> bool {
    super::drive(b, i, next, enter)
}

fn next(b: &Bridge, i: usize) -> Option<PstState> {
    let p = &b.ports[i];
    match p.pst {
        PstState::Discarding => p.learn.then_some(PstState::Learning),
        PstState::Learning if !p.learn => Some(PstState::Discarding),
        PstState::Learning => p.forward.then_some(PstState::Forwarding),
        PstState::Forwarding => (!p.forward).then_some(PstState::Discarding),
    }
}

fn enter(b: &mut Bridge, i: usize, state: PstState) {
    let p = &mut b.ports[i];
    p.pst = state;
    match state {
        PstState::Discarding => {
            // 17.21.4 disableLearning(), 17.21.3 disableForwarding().
            p.learning = false;
            p.forwarding = false;
        }
        // 17.21.6 enableLearning().
        PstState::Learning => p.learning = true,
        // 17.21.5 enableForwarding().
        PstState::Forwarding => p.forwarding = true,
    }
    // The procedures complete when the caller has applied the state; the
    // action queue carries it there.
    b.report_state(i);
}
