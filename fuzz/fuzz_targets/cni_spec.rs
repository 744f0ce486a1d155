//! What the CNI plugin reads from others: a network configuration on
//! stdin (the runtime's), a result from IPAM or a prevResult (another
//! plugin's). The plugin's own reading code is compiled in from
//! `bin/cni/` (see docs/fuzzing.md):
//!
//! - Any bytes as a configuration: reading it and checking it
//!   (`env::checked`) never panics; what it accepts has a VLAN of 1 to
//!   4094 (or none), an MTU of 68 to 65535 (or none), and one of `bridge`
//!   and `ctl`.
//! - Any bytes as a result (`Outcome::from_any`): never panics; what it
//!   accepts, written in each version's layout and read back, gives the
//!   same addresses, gateways, interface indexes, route destinations and
//!   gateways, and DNS; in a 1.x layout exactly the same result.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../bin/cni/spec.rs"]
mod spec;

#[allow(dead_code)]
#[path = "../../bin/cni/env.rs"]
mod env;

use spec::{NetConf, Outcome, SUPPORTED};

fn check_conf(data: &[u8]) {
    let Ok(conf) = serde_json::from_slice::<NetConf>(data) else {
        return;
    };
    let Ok(conf) = env::checked(conf) else {
        return;
    };
    assert!(conf.vlan.is_none_or(|v| (1..=4094).contains(&v)));
    assert!(conf.mtu.is_none_or(|m| (68..=65535).contains(&m)));
    assert!(conf.bridge.is_some() != conf.ctl.is_some());
}

fn check_result(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(outcome) = Outcome::from_any(value) else {
        return;
    };
    for version in SUPPORTED {
        let written = outcome.in_version(version);
        assert_eq!(written["cniVersion"], version);
        let back = Outcome::from_any(written).expect("a written result reads back");
        if version.starts_with("1.") {
            assert_eq!(back, outcome, "{version}");
            continue;
        }
        assert_eq!(back.ips, outcome.ips, "{version}");
        assert_eq!(back.dns, outcome.dns, "{version}");
        let routes =
            |o: &Outcome| -> Vec<_> { o.routes.iter().map(|r| (r.dst.clone(), r.gw)).collect() };
        assert_eq!(routes(&back), routes(&outcome), "{version}");
        let names = |o: &Outcome| -> Vec<_> {
            o.interfaces
                .iter()
                .map(|i| (i.name.clone(), i.mac.clone(), i.sandbox.clone()))
                .collect()
        };
        assert_eq!(names(&back), names(&outcome), "{version}");
    }
}

fuzz_target!(|data: &[u8]| {
    check_conf(data);
    check_result(data);
});
