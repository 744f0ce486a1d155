//! Builds the C reference forwarder for raw ports (tpacket_loop.c).

fn main() {
    println!("cargo:rerun-if-changed=tpacket_loop.c");
    cc::Build::new()
        .file("tpacket_loop.c")
        .opt_level(2)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("tpacket_loop");
}
