//! What the daemon asks of the system beside its ports: signals, the
//! service manager's readiness notice, capabilities, CPU pinning, and
//! standard error.

use nix::sys::signal::{SigSet, Signal};

/// Writes `text` to standard error; a closed or broken stderr (a service
/// manager's log gone, a pipe's reader gone) is not a reason to fail.
pub fn say(text: &str) {
    use std::io::Write as _;
    let _ = std::io::stderr().write_all(text.as_bytes());
}

/// The signals the daemon acts on.
const HANDLED: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread and every thread it
/// starts later, so that they arrive only through [`forward_signals`].
pub fn block_signals() -> Result<SigSet, String> {
    let mut set = SigSet::empty();
    for signal in HANDLED {
        set.add(signal);
    }
    set.thread_block()
        .map_err(|e| format!("cannot block signals: {e}"))?;
    Ok(set)
}

/// Starts the thread that waits for the blocked signals and hands each to
/// `deliver` (the bridge's owner); it ends after SIGINT or SIGTERM, or once
/// `deliver` says the owner is gone (false).
pub fn forward_signals(
    set: SigSet,
    deliver: impl Fn(libc::c_int) -> bool + Send + 'static,
) -> Result<(), String> {
    std::thread::Builder::new()
        .name("signals".to_owned())
        .spawn(move || loop {
            let Ok(signal) = set.wait() else { continue };
            if !deliver(signal as libc::c_int) || signal != Signal::SIGHUP {
                return;
            }
        })
        .map(|_| ())
        .map_err(|e| format!("cannot start the signal thread: {e}"))
}

/// For the client: a closed standard output (`mpbridge stats | head -1`)
/// ends the process quietly, as it ends other command-line tools, rather
/// than failing the next print. The daemon keeps Rust's default (SIGPIPE
/// ignored), so that a control client that goes away is a write error.
// nix's `signal` is unsafe (a handler of ours would run in signal
// context); this is the daemon's one unsafe call.
#[allow(unsafe_code)]
pub fn default_sigpipe() {
    use nix::sys::signal::{signal, SigHandler};
    // SAFETY: SIG_DFL installs no handler of ours, so nothing runs in
    // signal context; this runs before any thread of the client starts.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}

/// Tells a service manager we are ready, when one asked (sd_notify).
pub fn notify_ready() {
    if let Err(error) = sd_notify::notify(&[sd_notify::NotifyState::Ready]) {
        log::warn!("cannot notify the service manager: {error}");
    }
}

/// Drops capabilities once the ports are open: the effective set is
/// emptied (sends and receives on open descriptors are not checked again,
/// and closing a tap mpbridge made removes it without one), and only
/// CAP_NET_ADMIN and CAP_NET_RAW stay permitted, which the control thread
/// raises for as long as it opens a port added at run time. No-new-privileges
/// is set, so that a compromised daemon cannot gain any through an exec.
pub fn drop_privileges() -> Result<(), String> {
    use caps::{CapSet, Capability};
    let fail = |what: &str, error: caps::errors::CapsError| format!("cannot drop {what}: {error}");
    let kept: caps::CapsHashSet = [Capability::CAP_NET_ADMIN, Capability::CAP_NET_RAW]
        .into_iter()
        .filter(|cap| caps::has_cap(None, CapSet::Permitted, *cap).unwrap_or(false))
        .collect();
    // The bounding set first: dropping from it needs CAP_SETPCAP, which the
    // effective set loses below.
    if caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP).unwrap_or(false) {
        for cap in caps::all() {
            if !kept.contains(&cap) {
                caps::drop(None, CapSet::Bounding, cap).map_err(|e| fail("the bounding set", e))?;
            }
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(|e| fail("ambient capabilities", e))?;
    caps::clear(None, CapSet::Inheritable).map_err(|e| fail("inheritable capabilities", e))?;
    caps::clear(None, CapSet::Effective).map_err(|e| fail("effective capabilities", e))?;
    caps::set(None, CapSet::Permitted, &kept).map_err(|e| fail("permitted capabilities", e))?;
    nix::sys::prctl::set_no_new_privs()
        .map_err(|e| format!("cannot set no-new-privileges: {e}"))?;
    Ok(())
}

/// Pins the calling thread to `cpus`; a failure is logged, not fatal.
pub fn pin_to(cpus: &bridge::port::placement::CpuSet) {
    let mut set = nix::sched::CpuSet::new();
    for cpu in cpus {
        if set.set(*cpu).is_err() {
            log::warn!("cannot pin to CPU {cpu}: beyond this system's CPU set");
        }
    }
    if let Err(error) = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set) {
        log::warn!("cannot pin a worker to CPUs {cpus:?}: {error}");
    }
}
