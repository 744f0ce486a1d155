//! `mpbench tap-loop A B`: the reference forwarder for tap ports, the least
//! a program can do to move frames between two taps. Two threads, one per
//! direction, each reading one frame with a blocking read(2) and writing it
//! with write(2): no batching, no poll, no virtio-net header, no table.
//! mpbench runs it pinned where it would run mpbridge.

use std::thread;

use tun_tap::{Iface, Mode};

#[derive(clap::Args)]
pub struct TapLoopArgs {
    /// The two taps (created when they do not exist).
    #[arg(num_args = 2, value_names = ["A", "B"])]
    taps: Vec<String>,
}

pub fn run(args: TapLoopArgs) -> Result<(), String> {
    let open = |name: &str| {
        Iface::without_packet_info(name, Mode::Tap).map_err(|e| format!("tap {name}: {e}"))
    };
    let a = std::sync::Arc::new(open(&args.taps[0])?);
    let b = std::sync::Arc::new(open(&args.taps[1])?);
    eprintln!("tap-loop: ready, {} <-> {}", args.taps[0], args.taps[1]);
    let forward = |from: std::sync::Arc<Iface>, to: std::sync::Arc<Iface>| {
        thread::spawn(move || -> String {
            let mut buffer = vec![0u8; 65536];
            loop {
                let len = match from.recv(&mut buffer) {
                    Ok(len) => len,
                    Err(e) => return format!("read {}: {e}", from.name()),
                };
                // A frame the far tap cannot take (it is down) is dropped,
                // as a switch would.
                let _ = to.send(&buffer[..len]);
            }
        })
    };
    let ab = forward(a.clone(), b.clone());
    let ba = forward(b, a);
    let error = ab.join().unwrap_or_else(|_| "a thread panicked".to_owned());
    let _ = ba.join();
    Err(error)
}
