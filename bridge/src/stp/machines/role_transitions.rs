//! 17.29 Port Role Transitions state machine: moves each port into the
//! role Port Role Selection chose, and decides when it may learn and
//! forward (learn, forward). This is where RSTP is rapid: a root port
//! forwards at once when no recent root port may still forward (reRooted),
//! and a designated port forwards as soon as its point-to-point neighbour
//! agrees (agreed), after this bridge has agreed to its own root port's
//! proposal by making every other port discard or agree (sync, synced).
//! Without agreement, a designated port waits forwardDelay twice.

use super::super::bridge::Bridge;
use super::super::Role;

/// The states of 17.29 (Figures 17-20 to 17-23).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PrtState {
    // Disabled Port role.
    InitPort,
    DisablePort,
    DisabledPort,
    // Root Port role.
    RootPort,
    RootProposed,
    RootAgreed,
    Reroot,
    RootForward,
    RootLearn,
    Rerooted,
    // Designated Port role.
    DesignatedPort,
    DesignatedPropose,
    DesignatedSynced,
    DesignatedRetired,
    DesignatedDiscard,
    DesignatedLearn,
    DesignatedForward,
    // Alternate and Backup Port roles.
    BlockPort,
    AlternatePort,
    AlternateProposed,
    AlternateAgreed,
    BackupPort,
}

/// BEGIN enters INIT_PORT.
pub(crate) fn begin(b: &mut Bridge, i: usize) {
    enter(b, i, PrtState::InitPort);
}

/// Takes the machine's enabled transitions.
pub(crate) fn step(b: &mut Bridge, i: usize) -> bool {
    super::drive(b, i, next, enter)
}

fn next(b: &Bridge, i: usize) -> Option<PrtState> {
    use PrtState::*;
    let p = &b.ports[i];
    // The states whose only exit is unconditional.
    match p.prt {
        InitPort => return Some(DisablePort),
        RootProposed | RootAgreed | Reroot | RootForward | RootLearn | Rerooted => {
            return Some(RootPort)
        }
        DesignatedPropose | DesignatedSynced | DesignatedRetired | DesignatedDiscard
        | DesignatedLearn | DesignatedForward => return Some(DesignatedPort),
        AlternateProposed | AlternateAgreed | BackupPort => return Some(AlternatePort),
        _ => {}
    }
    // Every other transition is qualified by selected && !updtInfo.
    if !p.selected || p.updt_info {
        return None;
    }
    // The global transitions into each role.
    if p.selected_role != p.role {
        return Some(match p.selected_role {
            Role::Disabled => DisablePort,
            Role::Root => RootPort,
            Role::Designated => DesignatedPort,
            Role::Alternate | Role::Backup => BlockPort,
        });
    }
    match p.prt {
        DisablePort => (!p.learning && !p.forwarding).then_some(DisabledPort),
        DisabledPort => {
            (p.fd_while != p.max_age() || p.sync || p.re_root || !p.synced).then_some(DisabledPort)
        }
        RootPort => {
            let timely = p.fd_while == 0 || (b.re_rooted(i) && p.rb_while == 0 && b.rstp_version());
            if p.proposed && !p.agree {
                Some(RootProposed)
            } else if (b.all_synced() && !p.agree) || (p.proposed && p.agree) {
                Some(RootAgreed)
            } else if !p.forward && !p.re_root {
                Some(Reroot)
            } else if p.rr_while != p.fwd_delay() {
                Some(RootPort)
            } else if p.re_root && p.forward {
                Some(Rerooted)
            } else if timely && !p.learn {
                Some(RootLearn)
            } else if timely && p.learn && !p.forward {
                Some(RootForward)
            } else {
                None
            }
        }
        DesignatedPort => {
            let may_forward = (p.fd_while == 0 || p.agreed || p.oper_edge)
                && (p.rr_while == 0 || !p.re_root)
                && !p.sync;
            if ((p.sync && !p.synced) || (p.re_root && p.rr_while != 0) || p.disputed)
                && !p.oper_edge
                && (p.learn || p.forward)
            {
                Some(DesignatedDiscard)
            } else if !p.forward && !p.agreed && !p.proposing && !p.oper_edge {
                Some(DesignatedPropose)
            } else if (!p.learning && !p.forwarding && !p.synced)
                || (p.agreed && !p.synced)
                || (p.oper_edge && !p.synced)
                || (p.sync && p.synced)
            {
                Some(DesignatedSynced)
            } else if p.rr_while == 0 && p.re_root {
                Some(DesignatedRetired)
            } else if may_forward && !p.learn {
                Some(DesignatedLearn)
            } else if may_forward && p.learn && !p.forward {
                Some(DesignatedForward)
            } else {
                None
            }
        }
        BlockPort => (!p.learning && !p.forwarding).then_some(AlternatePort),
        AlternatePort => {
            if p.proposed && !p.agree {
                Some(AlternateProposed)
            } else if (b.all_synced() && !p.agree) || (p.proposed && p.agree) {
                Some(AlternateAgreed)
            } else if p.fd_while != p.forward_delay() || p.sync || p.re_root || !p.synced {
                Some(AlternatePort)
            } else if p.rb_while != 2 * p.hello_time() && p.role == Role::Backup {
                Some(BackupPort)
            } else {
                None
            }
        }
        _ => None,
    }
}

fn enter(b: &mut Bridge, i: usize, state: PrtState) {
    use PrtState::*;
    b.ports[i].prt = state;
    match state {
        // 17.21.14 setSyncTree() and 17.21.15 setReRootTree() act on all
        // ports, so these three come first.
        RootProposed | AlternateProposed => {
            set_sync_tree(b);
            b.ports[i].proposed = false;
            return;
        }
        Reroot => {
            set_re_root_tree(b);
            return;
        }
        _ => {}
    }
    let p = &mut b.ports[i];
    match state {
        InitPort => {
            p.role = Role::Disabled;
            p.learn = false;
            p.forward = false;
            p.synced = false;
            p.sync = true;
            p.re_root = true;
            p.rr_while = p.fwd_delay();
            p.fd_while = p.max_age();
            p.rb_while = 0;
        }
        DisablePort | BlockPort => {
            p.role = p.selected_role;
            p.learn = false;
            p.forward = false;
        }
        DisabledPort => {
            p.fd_while = p.max_age();
            p.synced = true;
            p.rr_while = 0;
            p.sync = false;
            p.re_root = false;
        }
        RootPort => {
            p.role = Role::Root;
            p.rr_while = p.fwd_delay();
        }
        RootAgreed => {
            p.proposed = false;
            p.sync = false;
            p.agree = true;
            p.new_info = true;
        }
        RootForward => {
            p.fd_while = 0;
            p.forward = true;
        }
        RootLearn => {
            p.fd_while = p.forward_delay();
            p.learn = true;
        }
        Rerooted | DesignatedRetired => p.re_root = false,
        DesignatedPort => p.role = Role::Designated,
        DesignatedPropose => {
            p.proposing = true;
            p.edge_delay_while = p.edge_delay(super::super::bridge::MIGRATE_TIME);
            p.new_info = true;
        }
        DesignatedSynced => {
            p.rr_while = 0;
            p.synced = true;
            p.sync = false;
        }
        DesignatedDiscard => {
            p.learn = false;
            p.forward = false;
            p.disputed = false;
            p.fd_while = p.forward_delay();
        }
        DesignatedLearn => {
            p.learn = true;
            p.fd_while = p.forward_delay();
        }
        DesignatedForward => {
            p.forward = true;
            p.fd_while = 0;
            p.agreed = p.send_rstp;
        }
        AlternatePort => {
            p.fd_while = p.forward_delay();
            p.synced = true;
            p.rr_while = 0;
            p.sync = false;
            p.re_root = false;
        }
        AlternateAgreed => {
            p.proposed = false;
            p.agree = true;
            p.new_info = true;
        }
        BackupPort => p.rb_while = 2 * p.hello_time(),
        RootProposed | AlternateProposed | Reroot => unreachable!("handled above"),
    }
}

/// 17.21.14 setSyncTree(): sync = TRUE for all ports.
fn set_sync_tree(b: &mut Bridge) {
    for p in &mut b.ports {
        p.sync = true;
    }
}

/// 17.21.15 setReRootTree(): reRoot = TRUE for all ports.
fn set_re_root_tree(b: &mut Bridge) {
    for p in &mut b.ports {
        p.re_root = true;
    }
}
