//! 17.28 Port Role Selection state machine (one per bridge): whenever a
//! port asks for it (reselect), computes the root priority vector, the
//! root port, every port's designated priority vector and times, and
//! every port's selectedRole (updtRolesTree(), 17.21.25).

use std::cmp::Ordering;

use super::super::bridge::Bridge;
use super::super::port::InfoIs;
use super::super::priority::PriorityVector;
use super::super::Role;

/// The states of 17.28.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PrsState {
    InitBridge,
    RoleSelection,
}

/// BEGIN enters INIT_BRIDGE.
pub(crate) fn begin(b: &mut Bridge) {
    enter(b, PrsState::InitBridge);
}

/// Takes the machine's enabled transitions.
pub(crate) fn step(b: &mut Bridge) -> bool {
    let mut moved = false;
    // INIT_BRIDGE -> ROLE_SELECTION is UCT; ROLE_SELECTION re-enters
    // while any port has reselect set, and clears them all on entry.
    for _ in 0..2 {
        let next = match b.prs {
            PrsState::InitBridge => PrsState::RoleSelection,
            PrsState::RoleSelection if b.ports.iter().any(|p| p.reselect) => {
                PrsState::RoleSelection
            }
            PrsState::RoleSelection => return moved,
        };
        enter(b, next);
        moved = true;
    }
    moved
}

fn enter(b: &mut Bridge, state: PrsState) {
    b.prs = state;
    match state {
        PrsState::InitBridge => updt_role_disabled_tree(b),
        PrsState::RoleSelection => {
            clear_reselect_tree(b);
            updt_roles_tree(b);
            set_selected_tree(b);
        }
    }
}

/// 17.21.24 updtRoleDisabledTree(): selectedRole = DisabledPort for all
/// ports.
fn updt_role_disabled_tree(b: &mut Bridge) {
    for p in &mut b.ports {
        p.selected_role = Role::Disabled;
    }
}

/// 17.21.2 clearReselectTree(): reselect = FALSE for all ports.
fn clear_reselect_tree(b: &mut Bridge) {
    for p in &mut b.ports {
        p.reselect = false;
    }
}

/// 17.21.16 setSelectedTree(): selected = TRUE for all ports, unless one
/// has asked for another selection meanwhile.
fn set_selected_tree(b: &mut Bridge) {
    if b.ports.iter().any(|p| p.reselect) {
        return;
    }
    for p in &mut b.ports {
        p.selected = true;
    }
}

/// 17.21.25 updtRolesTree().
fn updt_roles_tree(b: &mut Bridge) {
    let own_address = b.bridge_identifier.address();
    // a), b): the best of the bridge priority vector and the root path
    // priority vectors (the port priority vector, plus the port's path
    // cost, with the port's identifier as the last tie-breaker) of the
    // ports with received information that did not come from this bridge.
    // A port with restrictedRole is left out (802.1Q-2018 13.29.36 b):
    // it never becomes root port, and what it heard then makes it an
    // alternate port below (its information is better than what this
    // bridge would send there), or designated if it is not.
    let mut best = b.bridge_priority;
    let mut root_index = None;
    for (i, p) in b.ports.iter().enumerate() {
        if p.info_is != InfoIs::Received
            || p.config.restricted_role
            || p.port_priority.designated_bridge.address() == own_address
        {
            continue;
        }
        let candidate = PriorityVector {
            root_path_cost: p
                .port_priority
                .root_path_cost
                .saturating_add(p.port_path_cost()),
            bridge_port: p.port_id,
            ..p.port_priority
        };
        if candidate.cmp_all(&best) == Ordering::Less {
            best = candidate;
            root_index = Some(i);
        }
    }
    b.root_priority = best;
    // c): rootTimes are the bridge's own when it is root, else the root
    // port's portTimes with Message Age one second older.
    b.root_times = match root_index {
        None => b.bridge_times,
        Some(r) => {
            let mut times = b.ports[r].port_times;
            times.message_age = times.message_age.saturating_add(1);
            times
        }
    };
    b.root_port_id = root_index.map_or(0, |r| b.ports[r].port_id);
    b.root_port = root_index.map(|r| b.ports[r].id);

    let bridge_id = b.bridge_identifier;
    let hello_time = b.bridge_times.hello_time;
    let root_priority = b.root_priority;
    let root_times = b.root_times;
    for (i, p) in b.ports.iter_mut().enumerate() {
        // d), e): the designated priority vector and times this port
        // would send as a designated port.
        p.designated_priority = PriorityVector {
            root_bridge: root_priority.root_bridge,
            root_path_cost: root_priority.root_path_cost,
            designated_bridge: bridge_id,
            designated_port: p.port_id,
            bridge_port: p.port_id,
        };
        p.designated_times = root_times;
        p.designated_times.hello_time = hello_time;
        // f)-l): the role.
        match p.info_is {
            InfoIs::Disabled => p.selected_role = Role::Disabled,
            InfoIs::Aged => {
                p.updt_info = true;
                p.selected_role = Role::Designated;
            }
            InfoIs::Mine => {
                p.selected_role = Role::Designated;
                if !p.port_priority.same(&p.designated_priority)
                    || p.port_times != p.designated_times
                {
                    p.updt_info = true;
                }
            }
            InfoIs::Received if root_index == Some(i) => {
                p.selected_role = Role::Root;
                p.updt_info = false;
            }
            InfoIs::Received if !p.designated_priority.better(&p.port_priority) => {
                // The port's information is at least as good as what this
                // bridge would send: another bridge's port is designated
                // (Alternate), or another port of this bridge (Backup).
                p.selected_role = if p.port_priority.designated_bridge.address() != own_address {
                    Role::Alternate
                } else {
                    Role::Backup
                };
                p.updt_info = false;
            }
            InfoIs::Received => {
                p.selected_role = Role::Designated;
                p.updt_info = true;
            }
        }
    }
}
