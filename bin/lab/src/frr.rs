//! FRR's zebra and bgpd in a network namespace, as an operator runs them
//! without systemd: `-N NAME` gives each namespace its own path space
//! (sockets under /var/run/frr/NAME), the configuration is one file.
//! Both are stopped and their files removed on drop.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::process::stop_child;

/// Where Debian's frr package puts the daemons.
pub const FRR_DIR: &str = "/usr/lib/frr";

/// zebra and bgpd running in one namespace.
pub struct Frr {
    daemons: Vec<Child>,
    run_dir: PathBuf,
}

impl Frr {
    /// Starts zebra, then bgpd, in namespace `ns` with `config` (an
    /// frr.conf). The daemons run as Debian's `frr` user.
    pub fn start(ns: &str, config: &str) -> Result<Frr, String> {
        let run_dir = PathBuf::from(format!("/var/run/frr/{ns}"));
        fs::create_dir_all(&run_dir).map_err(|e| format!("{}: {e}", run_dir.display()))?;
        let user = nix::unistd::User::from_name("frr")
            .ok()
            .flatten()
            .ok_or("no frr user (Debian's frr package makes it)")?;
        let group = nix::unistd::Group::from_name("frr")
            .ok()
            .flatten()
            .map_or(user.gid, |g| g.gid);
        nix::unistd::chown(&run_dir, Some(user.uid), Some(group))
            .map_err(|e| format!("chown {}: {e}", run_dir.display()))?;
        let mut frr = Frr {
            daemons: Vec::new(),
            run_dir,
        };
        let conf = frr.run_dir.join("frr.conf");
        fs::write(&conf, config).map_err(|e| format!("{}: {e}", conf.display()))?;
        fs::set_permissions(&conf, fs::Permissions::from_mode(0o644))
            .map_err(|e| format!("{}: {e}", conf.display()))?;
        for daemon in ["zebra", "bgpd"] {
            let log = fs::File::create(frr.run_dir.join(format!("{daemon}.log")))
                .map_err(|e| format!("{daemon}'s log: {e}"))?;
            let child = Command::new("ip")
                .args(["netns", "exec", ns])
                .arg(format!("{FRR_DIR}/{daemon}"))
                .args(["-N", ns, "-f"])
                .arg(&conf)
                .arg("-i")
                .arg(frr.run_dir.join(format!("{daemon}.pid")))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .map_err(|e| format!("cannot start {daemon}: {e}"))?;
            frr.daemons.push(child);
            // bgpd asks zebra for its interfaces: zebra's socket first.
            if daemon == "zebra" {
                let socket = frr.run_dir.join("zserv.api");
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while !socket.exists() {
                    if std::time::Instant::now() > deadline {
                        return Err(format!("zebra made no {}", socket.display()));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
        }
        Ok(frr)
    }

    /// What the daemons wrote to standard error, for a failing test.
    pub fn logs(&self) -> String {
        ["zebra", "bgpd"]
            .iter()
            .map(|d| {
                let text =
                    fs::read_to_string(self.run_dir.join(format!("{d}.log"))).unwrap_or_default();
                format!("--- {d}\n{text}")
            })
            .collect()
    }

    /// Stops the daemons (SIGTERM, then SIGKILL), bgpd first.
    pub fn stop(&mut self) {
        for child in self.daemons.iter_mut().rev() {
            stop_child(child);
        }
        self.daemons.clear();
    }
}

impl Drop for Frr {
    fn drop(&mut self) {
        self.stop();
        let _ = fs::remove_dir_all(&self.run_dir);
    }
}

/// An iBGP EVPN speaker's frr.conf: router `id`, AS 65001, each of
/// `neighbours` activated for l2vpn evpn, every VNI advertised.
pub fn evpn_config(id: &str, neighbours: &[&str]) -> String {
    let mut config = format!(
        "frr defaults datacenter\nlog stdout\nrouter bgp 65001\n bgp router-id {id}\n \
         no bgp default ipv4-unicast\n"
    );
    for n in neighbours {
        config += &format!(" neighbor {n} remote-as internal\n");
    }
    config += " address-family l2vpn evpn\n";
    for n in neighbours {
        config += &format!("  neighbor {n} activate\n");
    }
    config + "  advertise-all-vni\n exit-address-family\n"
}

/// `bridge -j fdb show dev DEV` in namespace `ns`: the entries, none when
/// the device is missing.
pub fn bridge_fdb(ns: &str, dev: &str) -> Vec<Value> {
    let Ok(output) = Command::new("ip")
        .args([
            "netns", "exec", ns, "bridge", "-j", "fdb", "show", "dev", dev,
        ])
        .output()
    else {
        return Vec::new();
    };
    match serde_json::from_slice(&output.stdout) {
        Ok(Value::Array(entries)) => entries,
        _ => Vec::new(),
    }
}

/// A Linux VTEP in namespace `ns`, as EVPN setups make one: bridge
/// `bridge` with `port` (an existing interface) and the vxlan device
/// `linux_vxlan` makes on it; all up.
pub fn linux_vtep(
    ns: &str,
    bridge: &str,
    vxlan: &str,
    vni: u32,
    local: &str,
    port: &str,
) -> Result<(), String> {
    ip(ns, &["link", "add", bridge, "type", "bridge"])?;
    ip(ns, &["link", "set", port, "master", bridge])?;
    ip(ns, &["link", "set", bridge, "up"])?;
    ip(ns, &["link", "set", port, "up"])?;
    linux_vxlan(ns, bridge, vxlan, vni, local)
}

/// The vxlan device `vxlan` of `vni` at `local` on port 4789 in namespace
/// `ns`, `nolearning`, on bridge `bridge` with learning off on its port,
/// up: what zebra reads a VNI from.
pub fn linux_vxlan(
    ns: &str,
    bridge: &str,
    vxlan: &str,
    vni: u32,
    local: &str,
) -> Result<(), String> {
    let vni = vni.to_string();
    ip(
        ns,
        &[
            "link",
            "add",
            vxlan,
            "type",
            "vxlan",
            "id",
            &vni,
            "local",
            local,
            "dstport",
            "4789",
            "nolearning",
        ],
    )?;
    ip(ns, &["link", "set", vxlan, "master", bridge])?;
    ip(ns, &["link", "set", vxlan, "up"])?;
    let status = Command::new("ip")
        .args([
            "netns", "exec", ns, "bridge", "link", "set", "dev", vxlan, "learning", "off",
        ])
        .status()
        .map_err(|e| format!("bridge: {e}"))?;
    match status.success() {
        true => Ok(()),
        false => Err(format!("bridge link set dev {vxlan} learning off failed")),
    }
}

/// `ip -n NS args`, its error output on failure.
fn ip(ns: &str, args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(["-n", ns])
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    match output.status.success() {
        true => Ok(()),
        false => Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        )),
    }
}
