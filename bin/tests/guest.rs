//! One QEMU guest (TCG: KVM is not needed) with a Debian kernel and an
//! initramfs written by the test, its virtio-net device on a vhost-user
//! port: 8 MiB over TCP from a tap host to the guest arrive
//! byte-identical. Needs root, QEMU (Debian's qemu-system-x86), a static
//! busybox (busybox-static) and a guest kernel package extracted where
//! `lab::guest::kernel_dir` says (`.ci/run` does it); skips with the
//! reason otherwise (fails under MPBRIDGE_REQUIRE_PRIV=1).

mod netns;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lab::guest::{init_prologue, initramfs, kernel_dir, Guest, Kernel};
use netns::{ctl_json, port_stats, PortKind, TempDir, Topology};

/// The guest's boot and its transfer are slow under TCG: bounded here.
const BOOT: Duration = Duration::from_secs(300);
const TRANSFER: Duration = Duration::from_secs(300);
const BYTES: usize = 8 << 20;

fn md5(data: &[u8]) -> String {
    let mut child = Command::new("md5sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("md5sum");
    child.stdin.take().unwrap().write_all(data).unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child.wait().unwrap();
    out.split_whitespace().next().unwrap().to_owned()
}

fn a_guest_receives_8_mib_over_tcp_byte_identical() {
    let test = "a_guest_receives_8_mib_over_tcp_byte_identical";
    if !lab::installed(test, "qemu-system-x86_64", "qemu-system-x86")
        || !lab::installed(test, "busybox", "busybox-static")
    {
        return;
    }
    let kernel = match Kernel::find(&kernel_dir()) {
        Ok(kernel) => kernel,
        Err(reason) => {
            lab::unavailable(test, &reason);
            return;
        }
    };
    let dir = TempDir::new("guest");
    let socket = dir.path("vm.sock");
    let ctl = dir.path("ctl.sock");
    let vhost = format!("--port=vhost:{}", socket.display());
    let ctl_arg = format!("--ctl={}", ctl.display());
    let topology = Topology::new(PortKind::Tap, 1, &[&vhost, &ctl_arg]);
    let init = init_prologue(kernel.modules.len())
        + "$B ip link set lo up\n\
           $B ip addr add 198.18.0.2/24 dev eth0\n\
           $B ip link set eth0 up\n\
           echo GUEST-READY\n\
           $B nc -l -p 5001 | $B md5sum | $B sed 's/^/GUEST-MD5 /'\n\
           echo GUEST-DONE\n\
           $B poweroff -f\n";
    let initrd = dir.path("initrd");
    initramfs(
        &initrd,
        &kernel,
        std::path::Path::new("/bin/busybox"),
        &init,
    )
    .unwrap();
    let mut guest = Guest::start(&kernel, &initrd, 256, &socket, "02:42:00:00:00:77").unwrap();
    guest.wait_for("GUEST-READY", BOOT).unwrap();
    let data = netns::pattern(BYTES, 7);
    let sent = data.clone();
    topology.hosts[0].run(move || {
        let to: SocketAddr = "198.18.0.2:5001".parse().unwrap();
        // The guest's nc listens a moment after it said it is ready.
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut stream = loop {
            match TcpStream::connect_timeout(&to, Duration::from_secs(2)) {
                Ok(stream) => break stream,
                Err(e) if Instant::now() > deadline => panic!("cannot reach the guest: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        };
        stream.set_write_timeout(Some(TRANSFER)).unwrap();
        stream.write_all(&sent).unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
    });
    let line = guest.wait_for("GUEST-MD5", TRANSFER).unwrap();
    let theirs = line
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        theirs,
        md5(&data),
        "the guest's bytes differ from the host's"
    );
    let stats = ctl_json(&ctl, &["stats", "--json"]);
    let port = port_stats(&stats, &format!("vhost:{}", socket.display()));
    assert!(port["rx_frames"].as_u64().unwrap() > 100, "{port}");
    assert_eq!(port["vhost"]["bad_chains"], 0, "{port}");
    drop(guest);
    drop(topology);
}

lab::test_main! {
    privileged: [a_guest_receives_8_mib_over_tcp_byte_identical],
    plain: [],
}
