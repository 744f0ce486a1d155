//! Frames rewritten for egress with VLAN filtering: each form (untagged,
//! tagged, retagged) of a frame made once per batch, whichever ports it
//! goes to; a virtio-net header's offsets move with the tag.

use crate::port::RxBatch;
use crate::vlan::Egress;

/// The batch's rewritten frames, one after the other: an output index
/// past the batch's frames names one.
#[derive(Debug, Default)]
pub(super) struct Rewrites {
    bytes: Vec<u8>,
    /// Per rewrite: its start and length in `bytes`, and the frame of the
    /// batch it was made of.
    spans: Vec<(usize, usize, usize)>,
    /// Per frame of the batch, the rewrite index of its untagged and its
    /// tagged form, once made (empty until a batch needs one).
    forms: Vec<[Option<usize>; 2]>,
}

impl Rewrites {
    /// Forgets the last batch's rewrites.
    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.spans.clear();
        self.forms.clear();
    }

    /// The output index of frame `index` of `batch` (buffers with
    /// `metadata` bytes before the frame) in `form`: the frame itself, or
    /// its rewrite, made once per form and batch.
    #[inline(always)]
    pub(super) fn frame_for(
        &mut self,
        batch: &RxBatch,
        index: usize,
        form: Egress,
        metadata: usize,
    ) -> usize {
        match form {
            Egress::AsIs => index,
            Egress::Untagged => self.rewrite(batch, index, form, 0, metadata),
            Egress::Tagged(_) => self.rewrite(batch, index, form, 1, metadata),
        }
    }

    /// [`frame_for`](Self::frame_for) of a form that changes the frame
    /// (`slot` 0 untagged, 1 tagged).
    fn rewrite(
        &mut self,
        batch: &RxBatch,
        index: usize,
        form: Egress,
        slot: usize,
        metadata: usize,
    ) -> usize {
        if self.forms.len() < batch.len() {
            self.forms.resize(batch.len(), [None; 2]);
        }
        if let Some(r) = self.forms[index][slot] {
            return batch.len() + r;
        }
        let start = self.bytes.len();
        let len = crate::wire::tag::rewrite(batch.frame(index), metadata, form, &mut self.bytes);
        let r = self.spans.len();
        self.spans.push((start, len, index));
        self.forms[index][slot] = Some(r);
        batch.len() + r
    }

    /// The buffer output index `out` names, and the frame of the batch it
    /// was made of.
    #[inline(always)]
    pub(super) fn frame<'a>(&'a self, batch: &'a RxBatch, out: usize) -> (&'a [u8], usize) {
        match out.checked_sub(batch.len()) {
            None => (batch.frame(out), out),
            Some(r) => {
                let (start, len, frame) = self.spans[r];
                (&self.bytes[start..start + len], frame)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::VNET_HDR_LEN;
    use crate::vlan::Tag;

    /// A batch of `frames`, each after a virtio-net header asking for a
    /// checksum from byte 34 (as an offloaded frame would).
    fn batch_of(frames: &[Vec<u8>]) -> RxBatch {
        let mut batch = RxBatch::new(4, 2048);
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
        let (buffer, _) = rewrites.frame(batch, out);
        let csum_start = u16::from_ne_bytes([buffer[6], buffer[7]]);
        (csum_start, buffer[VNET_HDR_LEN..].to_vec())
    }

    #[test]
    fn untagging_tagging_and_retagging_make_each_form_once() {
        let batch = batch_of(&[tagged(0x8100, 10), untagged()]);
        let mut rewrites = Rewrites::default();
        let h = VNET_HDR_LEN;
        assert_eq!(rewrites.frame_for(&batch, 0, Egress::AsIs, h), 0);
        let bare = rewrites.frame_for(&batch, 0, Egress::Untagged, h);
        assert_eq!(output(&rewrites, &batch, bare), (30, untagged()));
        // Asked again: the same rewrite.
        assert_eq!(rewrites.frame_for(&batch, 0, Egress::Untagged, h), bare);
        let tag = Tag {
            tpid: 0x8100,
            tci: 20,
        };
        let retagged = rewrites.frame_for(&batch, 0, Egress::Tagged(tag), h);
        assert_eq!(
            output(&rewrites, &batch, retagged),
            (34, tagged(0x8100, 20))
        );
        let added = rewrites.frame_for(&batch, 1, Egress::Tagged(tag), h);
        assert_eq!(output(&rewrites, &batch, added), (38, tagged(0x8100, 20)));
        assert_eq!(rewrites.spans.len(), 3);
        assert_eq!(rewrites.frame(&batch, added).1, 1);
        rewrites.clear();
        assert_eq!(rewrites.frame_for(&batch, 1, Egress::Untagged, h), 2);
    }
}
