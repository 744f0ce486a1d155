//! The TPACKET_V3 block parser over arbitrary bytes: it terminates, never
//! reads outside the block, ends at its first error, agrees with a plain
//! reference walk of the chain written here, and picks up from a cursor
//! exactly where it stopped.
//!
//! The reference walks the chain forward only: the kernel puts each frame
//! header after the previous frame's data (`tp_next_offset` is the aligned
//! length of header, padding and frame), so a link that points back into
//! the frame just read is corrupt, and the walk stops there with an error
//! (of whatever kind) after yielding that frame, which is sound itself.

#![no_main]

use std::ops::Range;

use bridge::port::raw::block::{Block, BlockError, Frames, RingFrame};
use bridge::wire::vnet::VNET_HDR_LEN;
use libfuzzer_sys::fuzz_target;

mod common;
use common::{range_in, u16_at, u32_at};

/// From linux/if_packet.h.
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
const BLOCK_DESC_LEN: usize = 48;
const FRAME_HDR_LEN: usize = 48;

/// One item of the iteration, with slices turned into ranges of the block.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    Frame {
        vnet: Range<usize>,
        frame: Range<usize>,
        vlan: Option<(u16, u16)>,
        truncated: bool,
    },
    Error(BlockError),
    /// Any error: the reference's view of a link back into the last frame.
    AnyError,
}

/// Whether the parser's `items` are what the reference `expected`.
fn agrees(items: &[Item], expected: &[Item]) -> bool {
    items.len() == expected.len()
        && items.iter().zip(expected).all(|(got, want)| match want {
            Item::AnyError => matches!(got, Item::Error(_)),
            want => got == want,
        })
}

fn item(bytes: &[u8], result: Result<RingFrame<'_>, BlockError>) -> Item {
    match result {
        Ok(frame) => {
            let vnet = range_in(bytes, frame.vnet);
            let data = range_in(bytes, frame.frame);
            assert_eq!(vnet.len(), VNET_HDR_LEN);
            assert_eq!(vnet.end, data.start, "the vnet header abuts the frame");
            assert!(
                vnet.start >= BLOCK_DESC_LEN + FRAME_HDR_LEN,
                "frame data inside the block descriptor or the first header"
            );
            Item::Frame {
                vnet,
                frame: data,
                vlan: frame.vlan.map(|tag| (tag.tpid, tag.tci)),
                truncated: frame.truncated,
            }
        }
        Err(error) => Item::Error(error),
    }
}

/// The chain walked as the kernel's documentation describes it, one header
/// after another, every offset checked before use.
fn reference(bytes: &[u8]) -> Vec<Item> {
    let len = bytes.len();
    let mut items = Vec::new();
    let mut offset = u32_at(bytes, 16) as usize;
    let mut left = u32_at(bytes, 12);
    while left > 0 {
        left -= 1;
        if offset < BLOCK_DESC_LEN || offset + FRAME_HDR_LEN > len {
            items.push(Item::Error(BlockError::HeaderOutside { offset, len }));
            break;
        }
        let mac = offset + usize::from(u16_at(bytes, offset + 24));
        let snaplen = u32_at(bytes, offset + 12) as usize;
        if mac < offset + FRAME_HDR_LEN + VNET_HDR_LEN || mac + snaplen > len {
            items.push(Item::Error(BlockError::DataOutside { offset }));
            break;
        }
        let status = u32_at(bytes, offset + 20);
        let vlan = (status & TP_STATUS_VLAN_VALID != 0).then(|| {
            let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 {
                u16_at(bytes, offset + 36)
            } else {
                0x8100
            };
            (tpid, u32_at(bytes, offset + 32) as u16)
        });
        items.push(Item::Frame {
            vnet: mac - VNET_HDR_LEN..mac,
            frame: mac..mac + snaplen,
            vlan,
            truncated: snaplen < u32_at(bytes, offset + 16) as usize,
        });
        let next = u32_at(bytes, offset) as usize;
        if left > 0 && next == 0 {
            items.push(Item::Error(BlockError::BrokenChain { offset, left }));
            break;
        }
        if left > 0 && offset + next < mac + snaplen {
            items.push(Item::AnyError);
            break;
        }
        // Each next header lies past the last frame's data: the walk ends
        // within len / 58 steps whatever the block says.
        offset += next;
    }
    items
}

/// Runs `frames` to its end, checking on the way that it stops after an
/// error and that `is_done` foretells the end.
fn drain(bytes: &[u8], mut frames: Frames<'_>, limit: usize) -> Vec<Item> {
    let mut items = Vec::new();
    loop {
        let done = frames.is_done();
        let Some(result) = frames.next() else {
            assert!(done, "is_done was false before the end");
            break;
        };
        assert!(!done, "is_done was true before an item");
        let next = item(bytes, result);
        let is_error = matches!(next, Item::Error(_));
        items.push(next);
        assert!(
            items.len() <= limit,
            "more than {limit} items from {} bytes",
            bytes.len()
        );
        if is_error {
            assert!(frames.is_done(), "not done after an error");
            assert!(frames.next().is_none(), "an item after an error");
            break;
        }
    }
    // The end stays the end.
    assert!(frames.next().is_none());
    assert!(frames.is_done());
    items
}

fuzz_target!(|bytes: &[u8]| {
    let len = bytes.len();
    let block = match Block::new_checked(bytes) {
        Ok(block) => block,
        Err(error) => {
            assert!(len < BLOCK_DESC_LEN);
            assert_eq!(error, BlockError::Short(len));
            return;
        }
    };
    assert_eq!(block.status(), u32_at(bytes, 8));
    assert_eq!(block.frame_count(), u32_at(bytes, 12));

    // Frames follow one another, each at least a header long: at most
    // one per 48 bytes, plus the error after the last.
    let bound = len / FRAME_HDR_LEN + 2;
    let items = drain(bytes, block.frames(), bound);
    let expected = reference(bytes);
    assert!(
        agrees(&items, &expected),
        "the parser yielded\n{items:?}\nthe reference walk\n{expected:?}"
    );
    let errors = items
        .iter()
        .filter(|item| matches!(item, Item::Error(_)))
        .count();
    assert!(errors <= 1);
    if errors == 1 {
        assert!(matches!(items.last(), Some(Item::Error(_))));
    }
    let frames_seen = items.len() - errors;
    assert!(frames_seen as u64 <= u64::from(block.frame_count()));

    // Stopping after any number of items and resuming from the cursor
    // gives the rest, as continuing would.
    let mut frames = block.frames();
    for k in 0..=items.len() {
        let cursor = frames.cursor();
        assert_eq!(frames.clone().cursor(), cursor);
        let resumed = Frames::resume(block, cursor);
        assert_eq!(resumed.cursor(), cursor);
        assert_eq!(drain(bytes, resumed, bound), items[k..], "resumed at {k}");
        let next = frames.next().map(|result| item(bytes, result));
        assert_eq!(next.as_ref(), items.get(k));
    }
    assert!(frames.is_done());
});
