//! 17.24 Port Protocol Migration state machine: a port speaks RSTP
//! (sendRSTP) until it hears a Configuration or TCN BPDU after
//! MigrateTime, then speaks 802.1D on that port until it hears an RST
//! BPDU again (or mcheck, or the link goes down).

use super::super::bridge::{Bridge, MIGRATE_TIME};

/// The states of 17.24.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PpmState {
    CheckingRstp,
    SelectingStp,
    Sensing,
}

/// BEGIN enters CHECKING_RSTP.
pub(crate) fn begin(b: &mut Bridge, i: usize) {
    enter(b, i, PpmState::CheckingRstp);
}

/// Takes the machine's enabled transitions.
pub(crate) fn step(b: &mut Bridge, i: usize) -> bool {
    super::drive(b, i, next, enter)
}

fn next(b: &Bridge, i: usize) -> Option<PpmState> {
    let p = &b.ports[i];
    match p.ppm {
        PpmState::CheckingRstp => {
            if p.mdelay_while != MIGRATE_TIME && !p.port_enabled {
                Some(PpmState::CheckingRstp)
            } else if p.mdelay_while == 0 {
                Some(PpmState::Sensing)
            } else {
                None
            }
        }
        PpmState::SelectingStp => {
            (p.mdelay_while == 0 || !p.port_enabled || p.mcheck).then_some(PpmState::Sensing)
        }
        PpmState::Sensing => {
            if !p.port_enabled || p.mcheck || (b.rstp_version() && !p.send_rstp && p.rcvd_rstp) {
                Some(PpmState::CheckingRstp)
            } else if p.send_rstp && p.rcvd_stp {
                Some(PpmState::SelectingStp)
            } else {
                None
            }
        }
    }
}

fn enter(b: &mut Bridge, i: usize, state: PpmState) {
    let rstp_version = b.rstp_version();
    let p = &mut b.ports[i];
    p.ppm = state;
    match state {
        PpmState::CheckingRstp => {
            p.mcheck = false;
            p.send_rstp = rstp_version;
            p.mdelay_while = MIGRATE_TIME;
        }
        PpmState::SelectingStp => {
            p.send_rstp = false;
            p.mdelay_while = MIGRATE_TIME;
        }
        PpmState::Sensing => {
            p.rcvd_rstp = false;
            p.rcvd_stp = false;
        }
    }
}
