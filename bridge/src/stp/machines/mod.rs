//! The state machines of 802.1D-2004 17.22-17.31, one module each.
//!
//! Each per-port machine has a state enum, `begin` (the state that BEGIN
//! enters, with its actions) and `step`, which takes every transition
//! whose condition holds, running each new state's actions, until none
//! does. The Port Role Selection machine is per bridge. The standard's
//! machines run concurrently; [`crate::stp::bridge::Bridge::run`] steps
//! them in turn until all rest, which is one of the orders they may take.

pub(crate) mod detection;
pub(crate) mod information;
pub(crate) mod migration;
pub(crate) mod receive;
pub(crate) mod role_transitions;
pub(crate) mod selection;
pub(crate) mod state_transition;
pub(crate) mod timers;
pub(crate) mod topology_change;
pub(crate) mod transmit;

use super::bridge::Bridge;

/// More transitions than any machine takes in a row between two inputs;
/// reaching it means two states enable each other, a bug.
const MAX_TRANSITIONS: usize = 64;

/// Takes transitions of one port's machine until none is enabled: `next`
/// says which state a condition leads to, `enter` runs its actions.
/// Whether any transition was taken.
fn drive<S: Copy>(
    b: &mut Bridge,
    i: usize,
    next: fn(&Bridge, usize) -> Option<S>,
    enter: fn(&mut Bridge, usize, S),
) -> bool {
    let mut moved = false;
    for _ in 0..MAX_TRANSITIONS {
        match next(b, i) {
            Some(state) => {
                enter(b, i, state);
                moved = true;
            }
            None => return moved,
        }
    }
    debug_assert!(
        false,
        "a state machine of port {} does not rest",
        b.ports[i].id
    );
    moved
}
