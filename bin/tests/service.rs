//! The systemd unit shipped in bin/systemd: it passes `systemd-analyze
//! verify` (where systemd is installed) and grants what the README says.

use std::process::Command;

const UNIT: &str = include_str!("../systemd/mpbridge.service");

fn setting(key: &str) -> Vec<&'static str> {
    UNIT.lines()
        .filter_map(|line| line.strip_prefix(&format!("{key}=")))
        .collect()
}

#[test]
fn the_unit_grants_only_the_documented_capabilities() {
    assert_eq!(setting("Type"), ["notify"]);
    assert_eq!(setting("Restart"), ["on-failure"]);
    assert_eq!(
        setting("AmbientCapabilities"),
        ["CAP_NET_ADMIN CAP_NET_RAW"]
    );
    assert_eq!(
        setting("CapabilityBoundingSet"),
        ["CAP_NET_ADMIN CAP_NET_RAW"]
    );
    assert_eq!(setting("NoNewPrivileges"), ["yes"]);
    assert_eq!(setting("DynamicUser"), ["yes"]);
    // VXLAN ports over IPv6 underlays need AF_INET6.
    let families = setting("RestrictAddressFamilies");
    assert_eq!(families.len(), 1, "{families:?}");
    for family in ["AF_PACKET", "AF_INET", "AF_INET6", "AF_UNIX", "AF_NETLINK"] {
        assert!(
            families[0].split(' ').any(|f| f == family),
            "{family} missing: {families:?}"
        );
    }
    let limit: Vec<u64> = setting("LimitNOFILE")
        .iter()
        .map(|n| n.parse().expect("a number"))
        .collect();
    assert!(
        matches!(limit[..], [n] if n >= 1024),
        "LimitNOFILE: {limit:?}"
    );
    let readme = include_str!("../../README.md");
    assert!(
        readme.contains("CAP_NET_RAW") && readme.contains("bin/systemd/mpbridge.service"),
        "the README does not document the unit's capabilities"
    );
}

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!(
            "skipped the_unit_passes_systemd_analyze_verify: systemd-analyze is not installed \
             (Debian's systemd package)"
        );
        return;
    }
    // verify checks that ExecStart's program exists: point it at the build.
    let dir = std::env::temp_dir().join(format!("mpbunit{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mpbridge.service");
    let unit = UNIT.replace("/usr/local/bin/mpbridge", env!("CARGO_BIN_EXE_mpbridge"));
    std::fs::write(&path, unit).unwrap();
    let output = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    // Unknown keys and bad values are warnings with a zero exit.
    assert!(stderr.trim().is_empty(), "systemd-analyze verify: {stderr}");
}
