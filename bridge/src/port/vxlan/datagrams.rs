//! What one received message holds, apart from the socket: one datagram,
//! or with UDP GRO a train of datagrams of one segment size (the last may
//! be shorter), each checked as RFC 7348 and the Linux vxlan device check
//! a VXLAN header. A batch may take a train in part and go on with it in
//! the next batch, from the offset where it stopped.

use crate::wire::vxlan::{self, Vni, VxlanError};

/// Why a datagram is dropped; each reason has its port counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Shorter than a VXLAN header and an Ethernet header.
    Short,
    /// The I flag is clear.
    Flags,
    /// A reserved bit is set.
    Reserved,
    /// A VNI that no port has on this socket.
    UnknownVni,
    /// The message was longer than its receive slot and came cut: none of
    /// it is taken.
    Truncated,
}

impl Dropped {
    /// The name of its counter.
    pub const fn name(self) -> &'static str {
        match self {
            Dropped::Short => "short",
            Dropped::Flags => "flags",
            Dropped::Reserved => "reserved",
            Dropped::UnknownVni => "unknown_vni",
            Dropped::Truncated => "truncated",
        }
    }
}

impl From<VxlanError> for Dropped {
    fn from(error: VxlanError) -> Dropped {
        match error {
            VxlanError::Short => Dropped::Short,
            VxlanError::NoVni => Dropped::Flags,
            VxlanError::Reserved => Dropped::Reserved,
        }
    }
}

/// One datagram checked: its VNI and inner frame, or why it is dropped.
/// `known` says whether a port on the socket has the VNI.
pub fn check(datagram: &[u8], known: impl FnOnce(Vni) -> bool) -> Result<(Vni, &[u8]), Dropped> {
    let (vni, frame) = vxlan::parse(datagram)?;
    if !known(vni) {
        return Err(Dropped::UnknownVni);
    }
    Ok((vni, frame))
}

/// The datagrams of one received message, in order, each checked as it
/// is taken (`next_with`).
#[derive(Debug, Clone)]
pub struct Datagrams<'a> {
    payload: &'a [u8],
    /// The length of each datagram but the last.
    size: usize,
    truncated: bool,
    /// Where the next datagram starts.
    offset: usize,
    done: bool,
}

impl<'a> Datagrams<'a> {
    /// The datagrams of a message with `payload`, cut every `segment`
    /// bytes when UDP GRO joined several (`None`: one datagram, however
    /// short, even empty). A `truncated` message is one drop.
    pub fn new(payload: &'a [u8], segment: Option<usize>, truncated: bool) -> Datagrams<'a> {
        Self::resume(payload, segment, truncated, 0)
    }

    /// The same message's datagrams from byte `offset` of its payload on:
    /// where an earlier pass stopped ([`offset`](Self::offset)) before it
    /// was done.
    pub fn resume(
        payload: &'a [u8],
        segment: Option<usize>,
        truncated: bool,
        offset: usize,
    ) -> Datagrams<'a> {
        // A segment size of 0 is never reported; taken as 1, it still ends.
        let size = segment.unwrap_or(payload.len()).max(1);
        // Untouched, a message is at least one item (an empty datagram is
        // a short one; a cut message one drop) unless it is an empty
        // train; begun, it is done once no bytes are left.
        let done = if offset == 0 {
            payload.is_empty() && segment.is_some() && !truncated
        } else {
            offset >= payload.len()
        };
        Datagrams {
            payload,
            size,
            truncated,
            offset: offset.min(payload.len()),
            done,
        }
    }

    /// How many bytes of the payload the datagrams taken so far span:
    /// where to resume.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Whether every datagram has been taken.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The next datagram, checked: its VNI and inner frame (a slice of the
    /// payload), or why it is dropped. `known` says whether a port on the
    /// socket has a VNI.
    pub fn next_with(
        &mut self,
        known: impl FnOnce(Vni) -> bool,
    ) -> Option<Result<(Vni, &'a [u8]), Dropped>> {
        if self.done {
            return None;
        }
        if self.truncated {
            self.done = true;
            self.offset = self.payload.len();
            return Some(Err(Dropped::Truncated));
        }
        let rest = &self.payload[self.offset..];
        let datagram = &rest[..rest.len().min(self.size)];
        self.offset += datagram.len();
        self.done = self.offset >= self.payload.len();
        Some(check(datagram, known))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datagram(vni: Vni, inner: usize) -> Vec<u8> {
        let mut d = vxlan::header(vni).to_vec();
        d.extend((0..inner).map(|i| i as u8));
        d
    }

    fn all(mut datagrams: Datagrams<'_>) -> Vec<Result<(Vni, usize), Dropped>> {
        let mut out = Vec::new();
        while let Some(item) = datagrams.next_with(|vni| vni == 42 || vni == 7) {
            out.push(item.map(|(vni, frame)| (vni, frame.len())));
        }
        assert!(datagrams.is_done());
        out
    }

    #[test]
    fn a_train_is_cut_at_its_segment_size_and_each_header_checked() {
        let mut train = Vec::new();
        train.extend(datagram(42, 60));
        let mut flags = datagram(42, 60);
        flags[0] = 0;
        train.extend(&flags);
        let mut reserved = datagram(42, 60);
        reserved[7] = 1;
        train.extend(&reserved);
        train.extend(datagram(9, 60));
        train.extend(datagram(7, 60));
        train.extend(&datagram(42, 60)[..20]);
        assert_eq!(
            all(Datagrams::new(&train, Some(68), false)),
            [
                Ok((42, 60)),
                Err(Dropped::Flags),
                Err(Dropped::Reserved),
                Err(Dropped::UnknownVni),
                Ok((7, 60)),
                Err(Dropped::Short),
            ]
        );
        // A datagram of 8 + 14 bytes is not short; of 8 + 13 it is.
        let exact = datagram(7, 14);
        assert_eq!(all(Datagrams::new(&exact, None, false)), [Ok((7, 14))]);
        assert_eq!(
            all(Datagrams::new(&exact[..21], None, false)),
            [Err(Dropped::Short)]
        );
    }

    #[test]
    fn a_train_taken_in_part_goes_on_where_it_stopped() {
        let train: Vec<u8> = (0..5).flat_map(|_| datagram(42, 100)).collect();
        let mut first = Datagrams::new(&train, Some(108), false);
        let (_, frame) = first.next_with(|_| true).unwrap().unwrap();
        assert_eq!(frame.as_ptr(), train[8..].as_ptr());
        first.next_with(|_| true).unwrap().unwrap();
        assert_eq!(first.offset(), 216);
        assert!(!first.is_done());
        let rest = Datagrams::resume(&train, Some(108), false, first.offset());
        assert_eq!(all(rest), [Ok((42, 100)); 3]);
        // Past the end: nothing left.
        assert_eq!(all(Datagrams::resume(&train, Some(108), false, 9999)), []);
    }

    #[test]
    fn empty_truncated_and_single_messages() {
        // An empty datagram is one short datagram; an empty train is none.
        assert_eq!(all(Datagrams::new(&[], None, false)), [Err(Dropped::Short)]);
        assert_eq!(all(Datagrams::new(&[], Some(100), false)), []);
        // A cut message is one drop, however many datagrams it held.
        let train: Vec<u8> = (0..3).flat_map(|_| datagram(42, 60)).collect();
        let mut cut = Datagrams::new(&train, Some(68), true);
        assert_eq!(cut.next_with(|_| true), Some(Err(Dropped::Truncated)));
        assert_eq!(cut.offset(), train.len());
        assert_eq!(cut.next_with(|_| true), None);
        // Taken, it stays taken: resumed where it ended, nothing is left.
        assert_eq!(
            all(Datagrams::resume(&train, Some(68), true, train.len())),
            []
        );
        // Without a segment size, the message is one datagram.
        assert_eq!(all(Datagrams::new(&train, None, false)), [Ok((42, 196))]);
        // A segment size of 0 is taken as 1.
        assert_eq!(all(Datagrams::new(&train[..3], Some(0), false)).len(), 3);
    }
}
