//! A QEMU guest for the tests: a Debian kernel (extracted from its
//! package, not installed) and an initramfs written here (busybox, the
//! virtio-net modules and an `/init` of the test's own), run under TCG
//! with its memory shared, so that its virtio-net device can be served
//! over vhost-user. The guest's serial console comes back line by line.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Where a guest kernel package is extracted (`dpkg-deb -x`) unless
/// MPBRIDGE_GUEST_KERNEL names another folder: `.ci/run` puts one there.
pub fn kernel_dir() -> PathBuf {
    match std::env::var_os("MPBRIDGE_GUEST_KERNEL") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/guest-kernel"),
    }
}

/// The modules virtio-net needs, in the order they load.
const MODULES: [&str; 8] = [
    "drivers/virtio/virtio_ring.ko",
    "drivers/virtio/virtio.ko",
    "drivers/virtio/virtio_pci_modern_dev.ko",
    "drivers/virtio/virtio_pci_legacy_dev.ko",
    "drivers/virtio/virtio_pci.ko",
    "net/core/failover.ko",
    "drivers/net/net_failover.ko",
    "drivers/net/virtio_net.ko",
];

/// A kernel and its virtio-net modules, found in an extracted package.
pub struct Kernel {
    /// The kernel image.
    pub image: PathBuf,
    /// The modules, in load order.
    pub modules: Vec<PathBuf>,
}

impl Kernel {
    /// The kernel under `dir` (`boot/vmlinuz-*`, `lib/modules/*`), or why
    /// there is none.
    pub fn find(dir: &Path) -> Result<Kernel, String> {
        let boot = dir.join("boot");
        let image = std::fs::read_dir(&boot)
            .map_err(|e| format!("no guest kernel in {}: {e}", boot.display()))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
            })
            .ok_or_else(|| format!("no vmlinuz-* in {}", boot.display()))?;
        let version = image.file_name().unwrap().to_string_lossy()["vmlinuz-".len()..].to_owned();
        let base = dir.join("lib/modules").join(&version).join("kernel");
        let modules: Vec<PathBuf> = MODULES.iter().map(|m| base.join(m)).collect();
        if let Some(missing) = modules.iter().find(|m| !m.exists()) {
            return Err(format!("{} is missing", missing.display()));
        }
        Ok(Kernel { image, modules })
    }
}

/// Appends one entry of a newc cpio archive.
fn cpio_entry(out: &mut Vec<u8>, name: &str, mode: u32, data: &[u8]) {
    let header = format!(
        "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
        out.len() as u32 + 1, // inode: any number unique in the archive
        mode,
        0,
        0,
        1,
        0,
        data.len(),
        0,
        0,
        0,
        0,
        name.len() + 1,
        0
    );
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    while out.len() % 4 != 0 {
        out.push(0);
    }
    out.extend_from_slice(data);
    while out.len() % 4 != 0 {
        out.push(0);
    }
}

/// Writes an initramfs to `path`: `/init` (the script `init`), busybox as
/// `/bin/busybox`, and `kernel`'s modules under `/m/`.
pub fn initramfs(path: &Path, kernel: &Kernel, busybox: &Path, init: &str) -> Result<(), String> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    let mut out = Vec::new();
    const DIR: u32 = 0o040755;
    const EXEC: u32 = 0o100755;
    const FILE: u32 = 0o100644;
    for dir in ["bin", "m", "proc", "sys", "dev", "tmp"] {
        cpio_entry(&mut out, dir, DIR, &[]);
    }
    cpio_entry(&mut out, "init", EXEC, init.as_bytes());
    cpio_entry(&mut out, "bin/busybox", EXEC, &read(busybox)?);
    for (n, module) in kernel.modules.iter().enumerate() {
        cpio_entry(&mut out, &format!("m/{n}.ko"), FILE, &read(module)?);
    }
    cpio_entry(&mut out, "TRAILER!!!", 0, &[]);
    std::fs::File::create(path)
        .and_then(|mut f| f.write_all(&out))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The part of an `/init` that mounts what busybox needs and loads the
/// virtio-net modules (`/m/0.ko` on, in order).
pub fn init_prologue(modules: usize) -> String {
    let mut script = String::from(
        "#!/bin/busybox sh\n\
         B=/bin/busybox\n\
         $B mount -t proc proc /proc\n\
         $B mount -t sysfs sys /sys\n\
         $B mount -t devtmpfs dev /dev\n",
    );
    for n in 0..modules {
        script += &format!("$B insmod /m/{n}.ko\n");
    }
    script
}

/// A running guest, killed on drop.
pub struct Guest {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// What its console printed so far.
    pub console: Vec<String>,
}

impl Guest {
    /// Starts QEMU (TCG) with `memory_mib` of shared memory, `kernel`,
    /// `initrd` and a virtio-net device with MAC `mac` on the vhost-user
    /// socket `socket`.
    pub fn start(
        kernel: &Kernel,
        initrd: &Path,
        memory_mib: usize,
        socket: &Path,
        mac: &str,
    ) -> Result<Guest, String> {
        let mut child = Command::new("qemu-system-x86_64")
            .args(["-machine", "pc,accel=tcg,memory-backend=mem", "-cpu", "max"])
            .args(["-m", &format!("{memory_mib}M")])
            .args([
                "-object",
                &format!("memory-backend-memfd,id=mem,size={memory_mib}M,share=on"),
            ])
            .arg("-kernel")
            .arg(&kernel.image)
            .arg("-initrd")
            .arg(initrd)
            .args(["-append", "console=ttyS0 panic=-1 quiet"])
            .args([
                "-chardev",
                &format!("socket,id=c0,path={}", socket.display()),
            ])
            .args(["-netdev", "vhost-user,id=n0,chardev=c0"])
            // Without MSI-X: QEMU 7.2 under TCG (no irqfd) crashes in
            // msix_set_vector_notifiers when a vhost-user device starts.
            .args([
                "-device",
                &format!("virtio-net-pci,netdev=n0,mac={mac},vectors=0"),
            ])
            .args([
                "-nodefaults",
                "-display",
                "none",
                "-serial",
                "stdio",
                "-no-reboot",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start qemu-system-x86_64: {e}"))?;
        let (tx, lines) = mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Guest {
            child,
            lines,
            console: Vec::new(),
        })
    }

    /// Waits (at most `within`) for a console line starting with `prefix`;
    /// returns it.
    pub fn wait_for(&mut self, prefix: &str, within: Duration) -> Result<String, String> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let line = line.trim_end_matches('\r').to_owned();
                    self.console.push(line.clone());
                    if line.starts_with(prefix) {
                        return Ok(line);
                    }
                }
                Err(_) => {
                    let tail: Vec<&String> = self.console.iter().rev().take(15).collect();
                    let exited = match self.child.try_wait() {
                        Ok(Some(status)) => format!(" (QEMU exited: {status})"),
                        _ => String::new(),
                    };
                    return Err(format!(
                        "the guest printed no {prefix:?} within {within:?}{exited}; last lines: {tail:?}"
                    ));
                }
            }
        }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        crate::stop_child(&mut self.child);
    }
}
