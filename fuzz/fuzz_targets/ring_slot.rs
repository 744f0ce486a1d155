//! The TPACKET_V2 slot parser over arbitrary bytes: it never reads outside
//! the slot, and what it returns is what the header says, read here
//! independently: the frame and its virtio-net header at `tp_mac`, both
//! inside the slot and past its header, the VLAN tag only when the status
//! says there is one, the length, and the truncated and copied flags.
//!
//! The parser does not look at the ownership bit (TP_STATUS_USER): the
//! ring reads the status word atomically before it hands a slot over, so
//! any status is parsed alike here.

#![no_main]

use std::ops::Range;

use bridge::port::raw::block::RingFrame;
use bridge::port::raw::slot::{parse, Slot, SlotError};
use bridge::wire::tag::{push_into, EmitError, Tag, TAG_LEN};
use libfuzzer_sys::fuzz_target;

mod common;
use common::{range_in, u16_at, u32_at};

/// From linux/if_packet.h.
const TP_STATUS_COPY: u32 = 1 << 1;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
/// struct tpacket2_hdr.
const SLOT_HDR_LEN: usize = 32;
const VNET_HDR_LEN: usize = 10;
/// The buffer a frame is copied into: a slot's size, which a frame from a
/// kernel's slot always fits, tag put back or not.
const BUFFER_LEN: usize = 2048;

/// What the parser must return for `bytes`, from the header's fields as
/// linux/if_packet.h lays them out, every offset checked before use.
#[derive(Debug, PartialEq, Eq)]
enum Expected {
    Error(SlotError),
    Slot {
        vnet: Range<usize>,
        frame: Range<usize>,
        vlan: Option<Tag>,
        truncated: bool,
        copied: bool,
        len: usize,
    },
}

fn reference(bytes: &[u8]) -> Expected {
    let len = bytes.len();
    if len < SLOT_HDR_LEN {
        return Expected::Error(SlotError::Short(len));
    }
    let status = u32_at(bytes, 0);
    let wire_len = u32_at(bytes, 4) as usize;
    let snaplen = u32_at(bytes, 8) as usize;
    let mac = usize::from(u16_at(bytes, 12));
    // The virtio-net header sits right before the frame, after the slot
    // header; the frame ends inside the slot (a u32 snaplen cannot wrap a
    // 64-bit usize, but the check must not rely on that).
    if mac < SLOT_HDR_LEN + VNET_HDR_LEN || (mac as u64) + (snaplen as u64) > len as u64 {
        return Expected::Error(SlotError::DataOutside { mac, snaplen, len });
    }
    let vlan = if status & TP_STATUS_VLAN_VALID != 0 {
        let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 {
            u16_at(bytes, 26)
        } else {
            // Kernels before TPID reporting only strip 802.1Q tags.
            0x8100
        };
        Some(Tag {
            tpid,
            tci: u16_at(bytes, 24),
        })
    } else {
        None
    };
    Expected::Slot {
        vnet: mac - VNET_HDR_LEN..mac,
        frame: mac..mac + snaplen,
        vlan,
        truncated: snaplen < wire_len,
        copied: status & TP_STATUS_COPY != 0,
        len: wire_len,
    }
}

fn seen(bytes: &[u8], result: Result<Slot<'_>, SlotError>) -> Expected {
    match result {
        Err(error) => Expected::Error(error),
        Ok(Slot { frame, copied, len }) => {
            let RingFrame {
                vnet,
                frame: data,
                vlan,
                truncated,
                in_ring,
            } = frame;
            assert!(in_ring, "a slot's frame lies in the ring");
            let vnet = range_in(bytes, vnet);
            let data = range_in(bytes, data);
            assert_eq!(vnet.len(), VNET_HDR_LEN);
            assert_eq!(vnet.end, data.start, "the vnet header abuts the frame");
            assert!(
                vnet.start >= SLOT_HDR_LEN,
                "frame data inside the slot header"
            );
            Expected::Slot {
                vnet,
                frame: data,
                vlan,
                truncated,
                copied,
                len,
            }
        }
    }
}

fuzz_target!(|bytes: &[u8]| {
    let result = parse(bytes);
    // Parsing reads only: the same bytes give the same answer.
    assert_eq!(parse(bytes), result);
    let got = seen(bytes, result);
    let want = reference(bytes);
    assert_eq!(got, want, "the parser and the header disagree");

    // Then what the raw port does with a frame that is whole: put its tag
    // back. It fails only for a runt or a frame too big for the buffer,
    // and never writes past the length it returns.
    let Ok(slot) = result else {
        return;
    };
    if slot.frame.truncated {
        return;
    }
    let mut buffer = vec![0u8; BUFFER_LEN];
    let tag = usize::from(slot.frame.vlan.is_some()) * TAG_LEN;
    match push_into(
        slot.frame.vnet,
        slot.frame.frame,
        slot.frame.vlan,
        &mut buffer,
    ) {
        Ok(n) => {
            assert_eq!(n, VNET_HDR_LEN + slot.frame.frame.len() + tag);
            assert!(buffer[n..].iter().all(|&b| b == 0), "written past {n}");
        }
        Err(EmitError::Runt) => {
            assert!(slot.frame.frame.len() < 12);
            assert!(buffer.iter().all(|&b| b == 0), "written on an error");
        }
        Err(EmitError::Oversize { len, capacity }) => {
            assert_eq!(capacity, BUFFER_LEN);
            assert_eq!(len, VNET_HDR_LEN + slot.frame.frame.len() + tag);
            assert!(len > capacity);
            assert!(buffer.iter().all(|&b| b == 0), "written on an error");
        }
    }
});
