//! Frames that leave with another VLAN tag than they came with: each form
//! (untagged, tagged, retagged) of a frame worked out once per batch,
//! whichever ports it goes to, as the received frame cut where its outer
//! tag goes (`wire::tag::Cut`), so that the egress port writes it changed,
//! once; a virtio-net header's offsets move with the tag. And the
//! iterator each port is sent its frames through, as is or changed.

use crate::port::{Outgoing, RxBatch};
use crate::vlan::Egress;
use crate::wire::tag::{self, Cut};

/// The most metadata a port has: a virtio-net header.
const MAX_META: usize = crate::wire::vnet::VNET_HDR_LEN;

/// One frame of the batch in a changed form.
#[derive(Debug, Clone, Copy)]
struct Rewrite {
    /// The frame of the batch it is made of.
    frame: usize,
    /// Its metadata, with the offsets moved.
    meta: [u8; MAX_META],
    /// Its tag, if it has one where the cut is.
    tag: [u8; 4],
    tagged: bool,
    /// Where the received frame is cut: its bytes before `head` and from
    /// `tail` on are kept.
    head: usize,
    tail: usize,
}

/// The batch's frames in changed forms: an output index past the batch's
/// frames names one.
#[derive(Debug, Default)]
pub(super) struct Rewrites {
    rewrites: Vec<Rewrite>,
    /// Per frame of the batch, the rewrite index of its untagged and its
    /// tagged form, once made (empty until a batch needs one).
    forms: Vec<[Option<usize>; 2]>,
}

impl Rewrites {
    /// Forgets the last batch's rewrites.
    pub(super) fn clear(&mut self) {
        self.rewrites.clear();
        self.forms.clear();
    }

    /// The output index of frame `index` of `batch` in `form`: the frame
    /// itself, or its rewrite, made once per form and batch.
    #[inline(always)]
    pub(super) fn frame_for(&mut self, batch: &RxBatch, index: usize, form: Egress) -> usize {
        match form {
            Egress::AsIs => index,
            Egress::Untagged => self.rewrite(batch, index, form, 0),
            Egress::Tagged(_) => self.rewrite(batch, index, form, 1),
        }
    }

    /// [`frame_for`](Self::frame_for) of a form that changes the frame
    /// (`slot` 0 untagged, 1 tagged).
    fn rewrite(&mut self, batch: &RxBatch, index: usize, form: Egress, slot: usize) -> usize {
        if self.forms.len() < batch.len() {
            self.forms.resize(batch.len(), [None; 2]);
        }
        if let Some(r) = self.forms[index][slot] {
            return batch.len() + r;
        }
        let received = batch.frame(index);
        let cut = Cut::new(received.eth, form);
        let mut meta = [0u8; MAX_META];
        let meta_len = received.meta.len().min(MAX_META);
        debug_assert_eq!(
            meta_len,
            received.meta.len(),
            "metadata longer than a header"
        );
        meta[..meta_len].copy_from_slice(&received.meta[..meta_len]);
        tag::shift_offsets(&mut meta[..meta_len], cut.shift);
        let r = self.rewrites.len();
        self.rewrites.push(Rewrite {
            frame: index,
            meta,
            tag: cut.tag.unwrap_or_default(),
            tagged: cut.tag.is_some(),
            head: cut.head.len(),
            tail: received.eth.len() - cut.tail.len(),
        });
        self.forms[index][slot] = Some(r);
        batch.len() + r
    }

    /// The frame output index `out` names, and the frame of the batch it
    /// was made of.
    #[inline(always)]
    pub(super) fn frame<'a>(&'a self, batch: &'a RxBatch, out: usize) -> (Outgoing<'a>, usize) {
        match out.checked_sub(batch.len()) {
            None => (batch.frame(out).into(), out),
            Some(r) => {
                let rewrite = &self.rewrites[r];
                let received = batch.frame(rewrite.frame);
                let tag: &[u8] = if rewrite.tagged { &rewrite.tag } else { &[] };
                let outgoing = Outgoing {
                    meta: &rewrite.meta[..received.meta.len().min(MAX_META)],
                    pieces: [
                        &received.eth[..rewrite.head],
                        tag,
                        &received.eth[rewrite.tail..],
                    ],
                    rest: received.rest,
                };
                (outgoing, rewrite.frame)
            }
        }
    }
}

/// The frames one port is sent, by output index: an iterator of its own,
/// not a `map` closure, so that building each frame inlines into the
/// port's send loop (the closure's `next` was a call that built each
/// frame in memory, for the loop to read back).
#[derive(Clone)]
pub(super) struct Outputs<'a> {
    pub(super) batch: &'a RxBatch,
    pub(super) rewrites: &'a Rewrites,
    pub(super) outs: std::slice::Iter<'a, usize>,
}

impl<'a> Iterator for Outputs<'a> {
    type Item = Outgoing<'a>;

    #[inline(always)]
    fn next(&mut self) -> Option<Outgoing<'a>> {
        let &out = self.outs.next()?;
        Some(self.rewrites.frame(self.batch, out).0)
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.outs.size_hint()
    }
}

impl ExactSizeIterator for Outputs<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::VNET_HDR_LEN;
    use crate::vlan::Tag;

    /// A batch of `frames`, each after a virtio-net header asking for a
    /// checksum from byte 34 (as an offloaded frame would).
    fn batch_of(frames: &[Vec<u8>]) -> RxBatch {
        let mut batch = RxBatch::new(4, 2048).with_metadata(VNET_HDR_LEN);
        for frame in frames {
            let mut buffer = vec![0u8; VNET_HDR_LEN];
            // NEEDS_CSUM, csum_start 34.
            buffer[0] = 1;
            buffer[6..8].copy_from_slice(&34u16.to_ne_bytes());
            buffer.extend_from_slice(frame);
            batch.push(&buffer).unwrap();
        }
        batch
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
    fn output(rewrites: &Rewrites, batch: &RxBatch, out: usize) -> (u16, Vec<u8>) {
        assert!(out >= batch.len(), "a rewrite");
        let buffer = rewrites.frame(batch, out).0.to_vec();
        let csum_start = u16::from_ne_bytes([buffer[6], buffer[7]]);
        (csum_start, buffer[VNET_HDR_LEN..].to_vec())
    }

    #[test]
    fn untagging_tagging_and_retagging_make_each_form_once() {
        let batch = batch_of(&[tagged(0x8100, 10), untagged()]);
        let mut rewrites = Rewrites::default();
        assert_eq!(rewrites.frame_for(&batch, 0, Egress::AsIs), 0);
        let bare = rewrites.frame_for(&batch, 0, Egress::Untagged);
        assert_eq!(output(&rewrites, &batch, bare), (30, untagged()));
        // Asked again: the same rewrite.
        assert_eq!(rewrites.frame_for(&batch, 0, Egress::Untagged), bare);
        let tag = Tag {
            tpid: 0x8100,
            tci: 20,
        };
        let retagged = rewrites.frame_for(&batch, 0, Egress::Tagged(tag));
        assert_eq!(
            output(&rewrites, &batch, retagged),
            (34, tagged(0x8100, 20))
        );
        let added = rewrites.frame_for(&batch, 1, Egress::Tagged(tag));
        assert_eq!(output(&rewrites, &batch, added), (38, tagged(0x8100, 20)));
        assert_eq!(rewrites.rewrites.len(), 3);
        assert_eq!(rewrites.frame(&batch, added).1, 1);
        // Nothing of the frame is copied: its pieces are the batch's.
        let (pieces, _) = rewrites.frame(&batch, added);
        let received = batch.frame(1).eth;
        assert_eq!(pieces.pieces[0].as_ptr(), received.as_ptr());
        assert_eq!(pieces.pieces[2].as_ptr(), received[12..].as_ptr());
        rewrites.clear();
        assert_eq!(rewrites.frame_for(&batch, 1, Egress::Untagged), 2);
    }

    #[test]
    fn a_port_is_sent_its_outputs_in_order_as_is_or_changed() {
        let batch = batch_of(&[tagged(0x8100, 10), untagged()]);
        let mut rewrites = Rewrites::default();
        let bare = rewrites.frame_for(&batch, 0, Egress::Untagged);
        let outs = [1, bare, 0];
        let frames = Outputs {
            batch: &batch,
            rewrites: &rewrites,
            outs: outs.iter(),
        };
        assert_eq!(frames.len(), 3);
        let sent: Vec<Vec<u8>> = frames.map(|frame| frame.to_vec()).collect();
        let expected: Vec<Vec<u8>> = outs
            .iter()
            .map(|&out| rewrites.frame(&batch, out).0.to_vec())
            .collect();
        assert_eq!(sent, expected);
        assert_eq!(sent[0], batch.frame(1).to_vec(), "as it came");
        assert_eq!(
            &sent[1][VNET_HDR_LEN..],
            &untagged()[..],
            "its tag taken off"
        );
    }
}
