//! 17.22 Port Timers state machine: once a second (tick), every running
//! timer of the port counts down by one, and so does txCount, which is
//! how the Transmit Hold Count limit recovers (one BPDU a second after a
//! burst).

use super::super::port::Port;

/// 17.22 TICK: dec(helloWhen); dec(tcWhile); dec(fdWhile);
/// dec(rcvdInfoWhile); dec(rrWhile); dec(rbWhile); dec(mdelayWhile);
/// dec(edgeDelayWhile); dec(txCount).
pub(crate) fn tick(p: &mut Port) {
    for timer in [
        &mut p.hello_when,
        &mut p.tc_while,
        &mut p.fd_while,
        &mut p.rcvd_info_while,
        &mut p.rr_while,
        &mut p.rb_while,
        &mut p.mdelay_while,
        &mut p.edge_delay_while,
        &mut p.tx_count,
    ] {
        *timer = timer.saturating_sub(1);
    }
}
