//! A read section of the MAC table that remembers its last answers, for a
//! batch whose frames all carry the same addresses (one station sending to
//! one other, as a VM's single flow does): the first frame's destination
//! and source are looked up, and the rest of the batch is answered without
//! hashing (VPP's l2-fwd and l2-learn nodes keep their last key and result
//! the same way). Within one read section the table answers a key the same
//! each time, and every answer is still checked against its key, so what
//! is remembered is what the table would say; nothing outlives the
//! section.
//!
//! A batch of many stations would only pay for the comparisons (about
//! 5% of a frame's instructions), so the worker asks for the memory only
//! when [`one_conversation`] says the batch looks like one; otherwise the
//! section is asked every time, as without it (`REMEMBER` false, which
//! compiles the comparisons away).

use std::cell::Cell;

use locks::ReadSection;

use crate::fdb::{FdbEntry, FdbKey, FdbLookup, FdbReader, Location, Seconds, SourceState, Vtep};
use crate::port::RxBatch;
use crate::port_id::PortId;

/// A destination's answer: where the key is and the VTEP behind it.
type Located = Option<(Location, Option<Vtep>)>;

/// No key remembered: a VLAN id is below 4096, so no frame has it.
const NONE: FdbKey = FdbKey {
    vlan: u16::MAX,
    mac: crate::wire::MacAddr([0; 6]),
};

/// Whether `batch` looks like one conversation: its first, middle and
/// last frames carry the same destination and source addresses. Three
/// looks, whatever the batch's size; a batch they misjudge is still
/// answered right, only at the memory's cost or without its gain.
#[inline]
pub(super) fn one_conversation(batch: &RxBatch) -> bool {
    let n = batch.len();
    if n < 2 {
        return false;
    }
    let addresses = |index| batch.eth(index).first_chunk::<12>();
    let first = addresses(0);
    first.is_some() && addresses(n / 2) == first && addresses(n - 1) == first
}

/// A read section of the table, with its last answers when `REMEMBER`.
pub(super) struct Memo<'s, 'r, R, const REMEMBER: bool> {
    section: &'s FdbReader<'r, R>,
    /// The last destination looked up, and where it was.
    destination: Cell<FdbKey>,
    located: Cell<Located>,
    /// The last source, with the VTEP it came from.
    source: FdbKey,
    source_vtep: Option<Vtep>,
}

impl<'s, 'r, R: ReadSection<FdbKey, FdbEntry>, const REMEMBER: bool> Memo<'s, 'r, R, REMEMBER> {
    /// Nothing remembered yet.
    #[inline(always)]
    pub(super) fn new(section: &'s FdbReader<'r, R>) -> Self {
        Memo {
            section,
            destination: Cell::new(NONE),
            located: Cell::new(None),
            source: NONE,
            source_vtep: None,
        }
    }

    /// [`FdbReader::source_state`] of a source heard on `port` at `now`,
    /// which are the same for every frame of a batch; `None` when it is
    /// the last source asked about (refreshed then, and queued for
    /// learning if it needed to be).
    #[inline(always)]
    pub(super) fn source_state(
        &mut self,
        key: &FdbKey,
        port: PortId,
        vtep: Option<Vtep>,
        now: Seconds,
    ) -> Option<SourceState> {
        if REMEMBER {
            if *key == self.source && vtep == self.source_vtep {
                return None;
            }
            (self.source, self.source_vtep) = (*key, vtep);
        }
        Some(self.section.source_state(key, port, vtep, now))
    }
}

impl<R: ReadSection<FdbKey, FdbEntry>, const REMEMBER: bool> FdbLookup
    for Memo<'_, '_, R, REMEMBER>
{
    #[inline]
    fn lookup(&self, key: &FdbKey) -> Option<PortId> {
        self.section.lookup(key)
    }

    #[inline]
    fn locate(&self, key: &FdbKey) -> Option<Location> {
        self.section.locate(key)
    }

    /// The one a destination's lookup asks: remembered.
    #[inline(always)]
    fn locate_vtep(&self, key: &FdbKey) -> Located {
        if !REMEMBER {
            return self.section.locate_vtep(key);
        }
        if *key == self.destination.get() {
            return self.located.get();
        }
        let located = self.section.locate_vtep(key);
        self.destination.set(*key);
        self.located.set(located);
        located
    }

    #[inline]
    fn is_static_on(&self, key: &FdbKey, port: PortId) -> bool {
        self.section.is_static_on(key, port)
    }
}
