//! Spanning tree against whatever a neighbour sends: arbitrary frames
//! (well-formed BPDUs with arbitrary fields among them), link changes and
//! ticks into one bridge of three ports. Checked after every step: no
//! panic, at most one root port, a root bridge has none, a port's state
//! fits its role, every frame it sends is a BPDU from the port's own
//! address that decodes as one again (valid length, LLC, protocol id).

#![no_main]

use arbitrary::Arbitrary;
use bridge::stp::{Action, PortConfig, PortState, Role, Stp, StpConfig};
use bridge::wire::MacAddr;
use bridge::PortId;
use libfuzzer_sys::fuzz_target;

const PORTS: u16 = 3;

#[derive(Debug, Arbitrary)]
enum Step {
    /// Raw bytes after the BPDU's Ethernet and LLC header.
    Bpdu {
        port: u8,
        body: Vec<u8>,
    },
    /// A configuration or RST BPDU with arbitrary fields.
    Fields {
        port: u8,
        rst: bool,
        flags: u8,
        root: u64,
        cost: u32,
        bridge: u64,
        port_id: u16,
        times: [u16; 4],
    },
    /// A TCN.
    Tcn {
        port: u8,
    },
    /// Any frame at all.
    Frame {
        port: u8,
        bytes: Vec<u8>,
    },
    Link {
        port: u8,
        up: bool,
    },
    Tick,
}

fn port_mac(port: u16) -> MacAddr {
    MacAddr([0x02, 0, 0, 0, 0x10, port as u8])
}

/// An 802.3 frame to the Bridge Group Address with the LLC header and
/// `body`, padded to 60 bytes.
fn frame(src: MacAddr, body: &[u8]) -> Vec<u8> {
    let mut f = MacAddr::BRIDGE_GROUP.0.to_vec();
    f.extend_from_slice(&src.0);
    let len = (3 + body.len()).min(1500) as u16;
    f.extend_from_slice(&len.to_be_bytes());
    f.extend_from_slice(&[0x42, 0x42, 0x03]);
    f.extend_from_slice(body);
    f.resize(f.len().max(60), 0);
    f
}

fn check(stp: &mut Stp) {
    let status = stp.bridge_status();
    let mut roots = 0;
    for id in 0..PORTS {
        let port = stp.port_status(PortId(id)).expect("every port is known");
        if port.role == Role::Root {
            roots += 1;
        }
        match port.role {
            Role::Alternate | Role::Backup | Role::Disabled => {
                assert_eq!(port.state, PortState::Discarding, "{port:?}")
            }
            Role::Root | Role::Designated => {}
        }
    }
    assert!(roots <= 1, "{roots} root ports");
    assert_eq!(
        roots == 0,
        status.root_port.is_none(),
        "root port {:?} with {roots} root roles",
        status.root_port
    );
    if status.root_id == status.bridge_id {
        assert_eq!(status.root_port, None);
        assert_eq!(status.root_cost, 0);
    }
    for action in stp.take_actions() {
        if let Action::Send { port, frame } = action {
            assert!(port.0 < PORTS);
            assert!(frame.len() >= 60, "{frame:?}");
            assert_eq!(frame[..6], MacAddr::BRIDGE_GROUP.0);
            assert_eq!(frame[6..12], port_mac(port.0).0);
            assert_eq!(frame[14..17], [0x42, 0x42, 0x03]);
            assert_eq!(frame[17..19], [0, 0], "protocol identifier");
        }
    }
}

fuzz_target!(|steps: Vec<Step>| {
    let mut stp = Stp::new(StpConfig::default(), port_mac(0));
    for id in 0..PORTS {
        stp.add_port(PortId(id), PortConfig::default(), port_mac(id));
        stp.set_link(PortId(id), true);
    }
    check(&mut stp);
    let src = MacAddr([0x02, 0, 0, 0, 0x20, 1]);
    for step in steps.into_iter().take(256) {
        let on = |port: u8| PortId(u16::from(port) % PORTS);
        match step {
            Step::Bpdu { port, body } => stp.receive(on(port), &frame(src, &body)),
            Step::Fields {
                port,
                rst,
                flags,
                root,
                cost,
                bridge,
                port_id,
                times,
            } => {
                let mut body = vec![0, 0, if rst { 2 } else { 0 }, if rst { 2 } else { 0 }];
                body.push(flags);
                body.extend_from_slice(&root.to_be_bytes());
                body.extend_from_slice(&cost.to_be_bytes());
                body.extend_from_slice(&bridge.to_be_bytes());
                body.extend_from_slice(&port_id.to_be_bytes());
                for time in times {
                    body.extend_from_slice(&time.to_be_bytes());
                }
                if rst {
                    body.push(0);
                }
                stp.receive(on(port), &frame(src, &body));
            }
            Step::Tcn { port } => stp.receive(on(port), &frame(src, &[0, 0, 0, 0x80])),
            Step::Frame { port, bytes } => stp.receive(on(port), &bytes),
            Step::Link { port, up } => stp.set_link(on(port), up),
            Step::Tick => stp.tick(),
        }
        check(&mut stp);
    }
});
