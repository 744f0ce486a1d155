//! The worker with a port that has VTEPs (as a VXLAN port does): the VTEP
//! a frame came from is learned into its source's entry, and frames to a
//! known station leave with its VTEP, in every VLAN form.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::*;
use crate::fdb::{FdbConfig, FdbKey, Vtep};
use crate::port::{RxReport, SendReport};
use crate::wire::MacAddr;

/// What the test hands a port to receive, and what the port was sent, each
/// frame with its VTEP.
#[derive(Default)]
struct Wire {
    to_bridge: VecDeque<(Vec<u8>, Option<Vtep>)>,
    sent: Vec<(Vec<u8>, Option<Vtep>)>,
}

struct VtepQueue(Arc<Mutex<Wire>>);

impl Queue for VtepQueue {
    fn name(&self) -> &str {
        "v"
    }

    fn recv_batch(&mut self, batch: &mut RxBatch) -> Result<RxReport, PortError> {
        let mut wire = self.0.lock().unwrap();
        let mut report = RxReport::default();
        while let Some((frame, vtep)) = wire.to_bridge.pop_front() {
            batch.push(&frame).unwrap();
            if let Some(vtep) = vtep {
                batch.set_last_vtep(vtep);
            }
            report.received += 1;
        }
        Ok(report)
    }

    fn send_batch<'a>(&mut self, frames: impl Iterator<Item = Outgoing<'a>>) -> SendReport {
        self.send_batch_to(frames.map(|frame| (frame, None)))
    }

    fn send_batch_to<'a>(
        &mut self,
        frames: impl Iterator<Item = (Outgoing<'a>, Option<Vtep>)>,
    ) -> SendReport {
        let mut wire = self.0.lock().unwrap();
        let mut report = SendReport::default();
        for (frame, vtep) in frames {
            wire.sent.push((frame.to_vec(), vtep));
            report.sent += 1;
        }
        report
    }
}

fn mac(n: u8) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0, n])
}

fn frame(dst: MacAddr, src: MacAddr) -> Vec<u8> {
    let mut frame = vec![0u8; 60];
    frame[..6].copy_from_slice(&dst.0);
    frame[6..12].copy_from_slice(&src.0);
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    frame
}

fn vtep(n: u8) -> Option<Vtep> {
    Vtep::from_index(n.into())
}

/// Port 0 a plain one, port 1 one with VTEPs; VLAN filtering puts both in
/// access VLAN 10 when `vlans` is set.
fn rig(vlans: bool) -> (Worker<locks::Rcu, VtepQueue>, [Arc<Mutex<Wire>>; 2]) {
    let wires = [Arc::default(), Arc::default()];
    let ports = wires.iter().map(|w| VtepQueue(Arc::clone(w))).collect();
    let fdb = Arc::new(MacTable::new(FdbConfig::default()));
    let config = WorkerConfig {
        vlan_filtering: vlans,
        ..WorkerConfig::default()
    };
    let mut worker = Worker::new(fdb, ports, config);
    if vlans {
        for port in [PortId(0), PortId(1)] {
            worker.set_vlans(port, PortVlans::access(10));
        }
    }
    (worker, wires)
}

fn vteps_are_learned_and_sent_with(vlans: bool) {
    let (mut worker, wires) = rig(vlans);
    let vlan = if vlans { 10 } else { 0 };
    // A station behind VTEP 2 of port 1 speaks; one on port 0 answers.
    wires[1]
        .lock()
        .unwrap()
        .to_bridge
        .push_back((frame(MacAddr::BROADCAST, mac(9)), vtep(2)));
    worker.poll();
    let learned = worker.fdb().records();
    assert_eq!(learned.len(), 1, "{learned:?}");
    assert_eq!(learned[0].key, FdbKey::new(vlan, mac(9)));
    assert_eq!((learned[0].port, learned[0].vtep), (PortId(1), vtep(2)));
    let flooded = std::mem::take(&mut wires[0].lock().unwrap().sent);
    assert_eq!(flooded, [(frame(MacAddr::BROADCAST, mac(9)), None)]);
    let answer = frame(mac(9), mac(1));
    wires[0]
        .lock()
        .unwrap()
        .to_bridge
        .push_back((answer.clone(), None));
    worker.poll();
    assert_eq!(wires[1].lock().unwrap().sent, [(answer, vtep(2))]);
    // Heard from VTEP 3 now: it moved, and frames to it follow.
    wires[1]
        .lock()
        .unwrap()
        .to_bridge
        .push_back((frame(MacAddr::BROADCAST, mac(9)), vtep(3)));
    worker.poll();
    assert_eq!(worker.fdb().stats().moved, 1);
    assert_eq!(worker.fdb().records()[1].vtep, vtep(3));
}

#[test]
fn vteps_are_learned_and_sent_with_untagged_frames() {
    vteps_are_learned_and_sent_with(false);
}

#[test]
fn vteps_are_learned_and_sent_with_in_an_access_vlan() {
    vteps_are_learned_and_sent_with(true);
}

#[test]
fn a_station_heard_from_another_vtep_within_a_batch_moves() {
    let (mut worker, wires) = rig(false);
    let speak = |from| (frame(MacAddr::BROADCAST, mac(9)), vtep(from));
    wires[1].lock().unwrap().to_bridge.push_back(speak(2));
    worker.poll();
    assert_eq!(worker.fdb().records()[0].vtep, vtep(2));
    // One batch: from VTEP 2 (known there, refreshed), then from VTEP 3.
    wires[1]
        .lock()
        .unwrap()
        .to_bridge
        .extend([speak(2), speak(2), speak(3)]);
    worker.poll();
    assert_eq!(worker.fdb().stats().moved, 1);
    assert_eq!(worker.fdb().records()[0].vtep, vtep(3));
}
