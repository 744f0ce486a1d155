//! Egress rewriting with VLAN filtering: each frame goes only to member
//! ports of its VLAN, in the form (untagged, tagged, retagged) each port
//! sends, each form made once per frame and batch; a virtio-net header's
//! offsets move with the tag.

use locks::Strategy;

use super::{payload_len, Worker};
use crate::decision::{Decision, DropReason};
use crate::port::Queue;
use crate::vlan::{self, Egress};

impl<S: Strategy, P: Queue> Worker<S, P> {
    /// [`dispatch`](Self::dispatch)'s first half with VLAN filtering: a
    /// frame goes only to member ports of its VLAN, each getting the form
    /// (tagged or not) that port sends.
    pub(super) fn dispatch_in_vlans(&mut self, ingress: usize) {
        self.rewritten.clear();
        self.rewrites.clear();
        self.forms.clear();
        self.forms.resize(self.batch.len(), [None; 2]);
        // The ingress port's counts, added to its slot after the walk over
        // every slot's output.
        let mut rx = crate::counters::PortStats::default();
        let from = self.slots[ingress].policy.flags;
        for index in 0..self.decisions.len() {
            rx.rx_frames += 1;
            rx.rx_bytes += payload_len::<P>(self.batch.frame(index));
            let admitted = self.admitted[index];
            match (self.decisions[index], admitted) {
                // Hairpin: known unicast may go back out of its port, in
                // the form that port sends.
                (Decision::Drop(DropReason::SamePort), Some(admitted))
                    if self.flag_rules && from.hairpin =>
                {
                    if let Some(form) = vlan::egress(&self.slots[ingress].vlans, &admitted) {
                        let frame = self.frame_for(index, form);
                        self.slots[ingress].output.push(frame);
                    }
                }
                (Decision::Drop(reason), _) => rx.drops[reason.index()] += 1,
                (_, None) => unreachable!("a frame not admitted is dropped"),
                (Decision::Unicast(port), Some(admitted)) => {
                    let egress = port.index();
                    if egress >= self.slots.len() {
                        // A static entry naming a port this bridge lacks.
                        rx.tx_errors += 1;
                        continue;
                    }
                    if self.flag_rules && !from.delivers_to(&self.slots[egress].policy.flags, false)
                    {
                        rx.drops[DropReason::Isolated.index()] += 1;
                        continue;
                    }
                    match vlan::egress(&self.slots[egress].vlans, &admitted) {
                        Some(form) => {
                            let frame = self.frame_for(index, form);
                            self.slots[egress].output.push(frame);
                        }
                        None => rx.drops[DropReason::VlanEgress.index()] += 1,
                    }
                }
                (Decision::Flood, Some(admitted))
                    if !self.targets.is_empty() && self.target(index).is_some() =>
                {
                    let target = self.target(index).expect("a narrowed flood");
                    for egress in target.iter().map(crate::port_id::PortId::index) {
                        let Some(slot) = self.slots.get(egress) else {
                            continue;
                        };
                        let same = egress == ingress;
                        let allowed = match self.flag_rules {
                            false => !same,
                            true => from.delivers_to(&slot.policy.flags, same),
                        };
                        if !allowed || slot.queue.is_none() {
                            continue;
                        }
                        if let Some(form) = vlan::egress(&slot.vlans, &admitted) {
                            let frame = self.frame_for(index, form);
                            self.slots[egress].output.push(frame);
                        }
                    }
                }
                (Decision::Flood, Some(admitted)) => {
                    let frame = &self.batch.frame(index)[P::METADATA_LEN..];
                    let bpdu = self.bpdu_filters && super::policy::is_bpdu(frame);
                    let class = self
                        .flag_rules
                        .then(|| super::policy::FloodClass::of(frame));
                    for egress in 0..self.slots.len() {
                        let slot = &self.slots[egress];
                        let same = egress == ingress;
                        let allowed = match class {
                            None => !same,
                            Some(class) => from.floods_to(&slot.policy.flags, same, class),
                        };
                        if !allowed || slot.queue.is_none() || (bpdu && slot.policy.bpdu_filter) {
                            continue;
                        }
                        if let Some(form) = vlan::egress(&self.slots[egress].vlans, &admitted) {
                            let frame = self.frame_for(index, form);
                            self.slots[egress].output.push(frame);
                        }
                    }
                }
            }
        }
        self.slots[ingress].stats += rx;
    }

    /// The output index of frame `index` in `form`: the frame itself, or
    /// its rewrite (made once per form and batch).
    pub(super) fn frame_for(&mut self, index: usize, form: Egress) -> usize {
        let slot = match form {
            Egress::AsIs => return index,
            Egress::Untagged => 0,
            Egress::Tagged(_) => 1,
        };
        if let Some(r) = self.forms[index][slot] {
            return self.batch.len() + r;
        }
        let start = self.rewritten.len();
        let len = crate::wire::tag::rewrite(
            self.batch.frame(index),
            P::METADATA_LEN,
            form,
            &mut self.rewritten,
        );
        let r = self.rewrites.len();
        self.rewrites.push((start, len, index));
        self.forms[index][slot] = Some(r);
        self.batch.len() + r
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::fdb::{FdbConfig, MacTable};
    use crate::port::VNET_HDR_LEN;
    use crate::vlan::Tag;
    use crate::WorkerConfig;

    /// A port whose frames come after a virtio-net header, as a tap's do;
    /// only its metadata matters here.
    struct HeaderQueue;

    impl Queue for HeaderQueue {
        const METADATA_LEN: usize = VNET_HDR_LEN;

        fn name(&self) -> &str {
            "h"
        }

        fn recv_batch(
            &mut self,
            _: &mut crate::port::RxBatch,
        ) -> Result<crate::port::RxReport, crate::port::PortError> {
            Ok(crate::port::RxReport::default())
        }

        fn send_batch<'a>(&mut self, _: impl Iterator<Item = &'a [u8]>) -> crate::port::SendReport {
            crate::port::SendReport::default()
        }
    }

    /// A worker whose batch holds `frames`, each after a virtio-net header
    /// asking for a checksum from byte 34 (as an offloaded frame would).
    fn worker_with(frames: &[Vec<u8>]) -> Worker<locks::Epoch, HeaderQueue> {
        let ports = vec![HeaderQueue, HeaderQueue];
        let fdb = Arc::new(MacTable::new(FdbConfig::default()));
        let mut worker = Worker::new(fdb, ports, WorkerConfig::default());
        for frame in frames {
            let mut buffer = vec![0u8; VNET_HDR_LEN];
            // NEEDS_CSUM, csum_start 34.
            buffer[0] = 1;
            buffer[6..8].copy_from_slice(&34u16.to_ne_bytes());
            buffer.extend_from_slice(frame);
            worker.batch.push(&buffer).unwrap();
        }
        worker.forms.resize(frames.len(), [None; 2]);
        worker
    }

    fn untagged() -> Vec<u8> {
        let mut frame = vec![0u8; 60];
        frame[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        frame[12..14].copy_from_slice(&[0x08, 0x00]);
        frame[14] = 0x45;
        frame
    }

    fn tagged(tpid: u16, tci: u16) -> Vec<u8> {
        let plain = untagged();
        let mut frame = plain[..12].to_vec();
        frame.extend_from_slice(&tpid.to_be_bytes());
        frame.extend_from_slice(&tci.to_be_bytes());
        frame.extend_from_slice(&plain[12..]);
        frame
    }

    /// The rewritten buffer an output index names: its header's csum_start
    /// and its frame.
    fn output(worker: &Worker<locks::Epoch, HeaderQueue>, index: usize) -> (u16, Vec<u8>) {
        let r = index - worker.batch.len();
        let (start, len, _) = worker.rewrites[r];
        let buffer = &worker.rewritten[start..start + len];
        let csum_start = u16::from_ne_bytes([buffer[6], buffer[7]]);
        (csum_start, buffer[VNET_HDR_LEN..].to_vec())
    }

    #[test]
    fn untagging_tagging_and_retagging_make_each_form_once() {
        let mut worker = worker_with(&[tagged(0x8100, 10), untagged()]);
        assert_eq!(worker.frame_for(0, Egress::AsIs), 0);
        let bare = worker.frame_for(0, Egress::Untagged);
        assert_eq!(output(&worker, bare), (30, untagged()));
        // Asked again: the same rewrite.
        assert_eq!(worker.frame_for(0, Egress::Untagged), bare);
        let tag = Tag {
            tpid: 0x8100,
            tci: 20,
        };
        let retagged = worker.frame_for(0, Egress::Tagged(tag));
        assert_eq!(output(&worker, retagged), (34, tagged(0x8100, 20)));
        let added = worker.frame_for(1, Egress::Tagged(tag));
        assert_eq!(output(&worker, added), (38, tagged(0x8100, 20)));
        assert_eq!(worker.rewrites.len(), 3);
    }
}
