//! `mpbench tpacket-loop A B`: the reference forwarder for raw ports, the
//! C loop of `tpacket_loop.c` (a TPACKET_V3 receive ring, a TPACKET_V2
//! transmit ring, one copy, no table), one thread per direction. mpbench
//! runs it pinned where it would run mpbridge.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, CString};
use std::io;
use std::thread;

extern "C" {
    /// Forwards every frame `from` receives to `to`; returns only on an
    /// error, a negative errno (tpacket_loop.c).
    fn mpbench_tpacket_forward(from: *const c_char, to: *const c_char) -> c_int;
}

#[derive(clap::Args)]
pub struct TpacketLoopArgs {
    /// The two interfaces (veth ends in this namespace).
    #[arg(num_args = 2, value_names = ["A", "B"])]
    interfaces: Vec<String>,
}

/// Runs the loop from `from` to `to` until it fails.
fn forward(from: CString, to: CString) -> String {
    // SAFETY: both are NUL-terminated strings that outlive the call; the C
    // function reads them and touches no other memory of ours.
    let error = unsafe { mpbench_tpacket_forward(from.as_ptr(), to.as_ptr()) };
    format!(
        "{} to {}: {}",
        from.to_string_lossy(),
        to.to_string_lossy(),
        io::Error::from_raw_os_error(-error)
    )
}

pub fn run(args: TpacketLoopArgs) -> Result<(), String> {
    let name = |n: &String| CString::new(n.as_str()).map_err(|e| e.to_string());
    let (a, b) = (name(&args.interfaces[0])?, name(&args.interfaces[1])?);
    eprintln!(
        "tpacket-loop: ready, {} <-> {}",
        args.interfaces[0], args.interfaces[1]
    );
    let ab = {
        let (a, b) = (a.clone(), b.clone());
        thread::spawn(move || forward(a, b))
    };
    let ba = thread::spawn(move || forward(b, a));
    let error = ab.join().unwrap_or_else(|_| "a thread panicked".to_owned());
    drop(ba);
    Err(error)
}
