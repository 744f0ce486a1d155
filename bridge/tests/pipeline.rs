//! The port policies through the forwarding pipeline's stages directly,
//! without a worker or a port (`bridge::forward`): the ingress and lookup
//! stages in a read section of the table, the policy stage's group forward
//! mask, and the fan-out over plain views of the ports. Written once and
//! run for every lock strategy.

mod common;

use bridge::fdb::FdbKey;
use bridge::forward::{
    self, Decision, DropReason, EgressPort, Egresses, Gate, IngressPort, PortFlags,
};
use bridge::vlan::{PortVlans, VlanSet};
use bridge::wire::MacAddr;
use bridge::{FdbConfig, MacTable, PortId};
use common::{frame, station, tagged};
use locks::Strategy;

const A: u32 = 1;
const B: u32 = 2;
const C: u32 = 3;

/// A bridge as the stages see it: a table and each port's view.
struct Bridge<S: Strategy> {
    table: MacTable<S>,
    vlans: Vec<PortVlans>,
    flags: Vec<PortFlags>,
    gates: Vec<Gate>,
    filtering: bool,
    stp: bool,
    group_fwd_mask: u16,
}

impl<S: Strategy> Bridge<S> {
    fn new(ports: usize) -> Self {
        Bridge {
            table: MacTable::new(FdbConfig::default()),
            vlans: vec![PortVlans::default(); ports],
            flags: vec![PortFlags::default(); ports],
            gates: vec![Gate::OPEN; ports],
            filtering: false,
            stp: false,
            group_fwd_mask: 0,
        }
    }

    /// Where `frame` from `ingress` goes: its decision and the egress
    /// ports, and its source learned as the worker would learn it.
    fn send(&self, ingress: usize, frame: &[u8]) -> (Decision, Vec<usize>) {
        let port = IngressPort {
            port: PortId(ingress as u16),
            vlans: self.filtering.then_some(&self.vlans[ingress]),
            intercept: IngressPort::intercept_for(false, false, self.stp),
            flags: self.flags[ingress],
            gate: self.gates[ingress],
            disabled: false,
        };
        let mut verdict = match port.looks_up() {
            true => {
                let (verdict, source) = self
                    .table
                    .read(|section| forward::ingress_and_lookup(&port, frame, section));
                if let Some(key) = source.filter(|_| self.flags[ingress].learning) {
                    self.table.learn(key, port.port, 0);
                }
                verdict
            }
            false => forward::without_lookup(&port, frame),
        };
        if port.gate.forwarding {
            let verdicts = std::slice::from_mut(&mut verdict);
            forward::forward_groups(verdicts, std::iter::once(frame), self.group_fwd_mask);
        }
        let views: Vec<Option<EgressPort<'_>>> = (0..self.vlans.len())
            .map(|i| {
                Some(EgressPort {
                    vlans: &self.vlans[i],
                    flags: self.flags[i],
                    bpdu_filter: false,
                })
            })
            .collect();
        let egresses = Egresses {
            ports: &views[..],
            flag_rules: self.flags.iter().any(|f| *f != PortFlags::default()),
            bpdu_filters: false,
        };
        let mut verdicts = [verdict];
        let mut sent = Vec::new();
        forward::fan_out(
            &mut verdicts,
            |_| frame,
            ingress,
            self.flags[ingress],
            &egresses,
            |_, port, _| {
                // Spanning tree's egress rule: only a forwarding port sends.
                if self.gates[port].forwarding {
                    sent.push(port)
                }
            },
        );
        (verdicts[0].decision, sent)
    }

    /// Where `frame` goes, the ports alone.
    fn ports(&self, ingress: usize, frame: &[u8]) -> Vec<usize> {
        self.send(ingress, frame).1
    }
}

fn broadcast(from: u32) -> Vec<u8> {
    frame(MacAddr::BROADCAST, station(from), 60)
}

fn unicast(to: u32, from: u32) -> Vec<u8> {
    frame(station(to), station(from), 60)
}

fn isolated_ports_reach_only_others<S: Strategy>() {
    for filtering in [false, true] {
        let mut bridge = Bridge::<S>::new(3);
        bridge.filtering = filtering;
        bridge.flags[0].isolated = true;
        bridge.flags[1].isolated = true;
        assert_eq!(bridge.ports(0, &broadcast(A)), [2]);
        assert_eq!(bridge.ports(1, &broadcast(B)), [2]);
        assert_eq!(bridge.ports(2, &broadcast(C)), [0, 1]);
        assert_eq!(
            bridge.send(0, &unicast(B, A)),
            (Decision::Drop(DropReason::Isolated), vec![])
        );
        assert_eq!(bridge.ports(0, &unicast(C, A)), [2]);
    }
}

fn hairpin_turns_a_frame_back<S: Strategy>() {
    for filtering in [false, true] {
        let mut bridge = Bridge::<S>::new(2);
        bridge.filtering = filtering;
        bridge.flags[0].hairpin = true;
        assert_eq!(bridge.ports(0, &broadcast(A)), [0, 1]);
        bridge.ports(0, &broadcast(B));
        assert_eq!(
            bridge.send(0, &unicast(B, A)),
            (Decision::Unicast(PortId(0)), vec![0])
        );
        assert_eq!(bridge.ports(1, &broadcast(C)), [0]);
    }
}

fn a_locked_port_passes_only_its_static_stations<S: Strategy>() {
    let mut bridge = Bridge::<S>::new(2);
    bridge.flags[0].locked = true;
    assert_eq!(
        bridge.send(0, &broadcast(A)),
        (Decision::Drop(DropReason::Locked), vec![])
    );
    assert!(bridge.table.is_empty());
    bridge
        .table
        .add_static(FdbKey::new(0, station(A)), PortId(0));
    assert_eq!(bridge.ports(0, &broadcast(A)), [1]);
}

fn port_states_gate_learning_and_forwarding<S: Strategy>() {
    let mut bridge = Bridge::<S>::new(3);
    bridge.stp = true;
    bridge.gates = vec![Gate::CLOSED, Gate::LEARNING, Gate::OPEN];
    let bpdu = frame(MacAddr::BRIDGE_GROUP, station(A), 60);
    assert_eq!(
        bridge.send(0, &bpdu),
        (Decision::Drop(DropReason::Stp), vec![])
    );
    assert_eq!(
        bridge.send(0, &broadcast(A)),
        (Decision::Drop(DropReason::PortState), vec![])
    );
    assert_eq!(
        bridge.send(1, &broadcast(B)),
        (Decision::Drop(DropReason::PortState), vec![])
    );
    assert_eq!(bridge.table.lookup(&FdbKey::new(0, station(A))), None);
    assert_eq!(
        bridge.table.lookup(&FdbKey::new(0, station(B))),
        Some(PortId(1))
    );
    // Only forwarding ports send.
    assert_eq!(bridge.ports(2, &broadcast(C)), Vec::<usize>::new());
    bridge.gates[0] = Gate::OPEN;
    assert_eq!(bridge.ports(2, &broadcast(C)), [0]);
}

fn the_group_forward_mask_floods_its_groups_from_forwarding_ports<S: Strategy>() {
    let mut bridge = Bridge::<S>::new(3);
    bridge.group_fwd_mask = 1 << 14;
    let lldp = frame(MacAddr([0x01, 0x80, 0xc2, 0, 0, 0x0e]), station(A), 60);
    let eapol = frame(MacAddr([0x01, 0x80, 0xc2, 0, 0, 0x03]), station(A), 60);
    assert_eq!(bridge.ports(0, &lldp), [1, 2]);
    assert_eq!(
        bridge.send(0, &eapol),
        (Decision::Drop(DropReason::Reserved), vec![])
    );
    bridge.gates[0] = Gate::LEARNING;
    assert_eq!(
        bridge.send(0, &lldp),
        (Decision::Drop(DropReason::Reserved), vec![])
    );
}

fn vlans_admit_and_egress_as_the_ports_say<S: Strategy>() {
    let mut bridge = Bridge::<S>::new(3);
    bridge.filtering = true;
    bridge.vlans = vec![
        PortVlans::access(10),
        PortVlans::trunk(VlanSet::parse("10,20").unwrap(), None),
        PortVlans::access(20),
    ];
    assert_eq!(bridge.ports(0, &broadcast(A)), [1]);
    assert_eq!(
        bridge.send(1, &broadcast(B)),
        (Decision::Drop(DropReason::VlanUntagged), vec![])
    );
    assert_eq!(
        bridge.send(1, &tagged(MacAddr::BROADCAST, station(B), 30, 60)),
        (Decision::Drop(DropReason::VlanIngress), vec![])
    );
    assert_eq!(
        bridge.ports(1, &tagged(MacAddr::BROADCAST, station(B), 20, 60)),
        [2]
    );
    // A static entry of A's in VLAN 20 on the access port of VLAN 10.
    bridge
        .table
        .add_static(FdbKey::new(20, station(A)), PortId(0));
    assert_eq!(
        bridge.send(2, &unicast(A, C)),
        (Decision::Drop(DropReason::VlanEgress), vec![])
    );
}

for_each_strategy!(
    isolated_ports_reach_only_others,
    hairpin_turns_a_frame_back,
    a_locked_port_passes_only_its_static_stations,
    port_states_gate_learning_and_forwarding,
    the_group_forward_mask_floods_its_groups_from_forwarding_ports,
    vlans_admit_and_egress_as_the_ports_say,
);
