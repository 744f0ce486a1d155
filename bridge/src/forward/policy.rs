//! The policy stage: what a port and the bridge let through besides the
//! MAC table's say, once the batch's frames are looked up: link-local
//! groups the group forward mask floods, multicast snooping's narrowing
//! (`snooping.rs`), the storm limit, and stations held by the move limit.
//! Pure: no I/O and no clock; the storm bucket and the movers are state
//! handed in, the time with them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{classify_in, Decision, DropReason, Verdict};
use crate::fdb::FdbKey;
use crate::wire::EthernetFrame;

/// Floods the frames to link-local groups (01:80:C2:00:00:0X) that
/// `mask` names (bit X; br_input.c's `group_fwd_mask`).
pub fn forward_groups<'a>(
    verdicts: &mut [Verdict],
    frames: impl Iterator<Item = &'a [u8]>,
    mask: u16,
) {
    if mask == 0 {
        return;
    }
    for (verdict, frame) in verdicts.iter_mut().zip(frames) {
        if verdict.decision != Decision::Drop(DropReason::Reserved) {
            continue;
        }
        let group = EthernetFrame::new_checked(frame)
            .ok()
            .and_then(|frame| frame.dst_addr().link_local_group());
        if group.is_some_and(|group| mask & (1 << group) != 0) {
            verdict.decision = Decision::Flood;
        }
    }
}

/// Drops the batch's floods beyond what the port's storm `bucket` holds
/// at `now`.
pub fn limit_storm(verdicts: &mut [Verdict], bucket: &mut StormBucket, now: Instant) {
    if !verdicts.iter().any(|v| v.decision == Decision::Flood) {
        return;
    }
    bucket.refill(now);
    for verdict in verdicts {
        if verdict.decision == Decision::Flood && !bucket.take() {
            verdict.decision = Decision::Drop(DropReason::Storm);
        }
    }
}

/// Drops the frames from stations `movers` holds at `now`.
pub fn hold_movers<'a>(
    verdicts: &mut [Verdict],
    frames: impl Iterator<Item = &'a [u8]>,
    movers: &Movers,
    now: Instant,
) {
    if !movers.any_held() {
        return;
    }
    for (verdict, frame) in verdicts.iter_mut().zip(frames) {
        if matches!(verdict.decision, Decision::Drop(_)) {
            continue;
        }
        let vlan = verdict.vlan.map(|a| a.vid);
        if let Ok((_, source)) = classify_in(frame, vlan) {
            if movers.is_held(&source, now) {
                verdict.decision = Decision::Drop(DropReason::MoveLimit);
            }
        }
    }
}

/// A token bucket of frames: `rate` a second, at most `burst` at once.
/// Counted in nanotokens so that refills need no division.
#[derive(Debug, Clone, Copy)]
pub struct StormBucket {
    rate: u64,
    burst: u64,
    tokens: u64,
    last: Option<Instant>,
}

/// One frame, in nanotokens.
const TOKEN: u64 = 1_000_000_000;

impl StormBucket {
    /// A full bucket for `pps` frames a second, with a burst of a tenth of
    /// that, at least 64.
    pub fn new(pps: u32) -> StormBucket {
        let burst = u64::from((pps / 10).max(64)) * TOKEN;
        StormBucket {
            rate: u64::from(pps),
            burst,
            tokens: burst,
            last: None,
        }
    }

    /// Adds what `now` earned since the last refill.
    pub fn refill(&mut self, now: Instant) {
        if let Some(last) = self.last {
            // At most a second counts: a full bucket is reached by then.
            let elapsed = now
                .saturating_duration_since(last)
                .min(Duration::from_secs(1));
            let earned = elapsed.as_nanos() as u64 * self.rate;
            self.tokens = (self.tokens + earned).min(self.burst);
        }
        self.last = Some(now);
    }

    /// Takes one frame's token; false when there is none.
    #[inline]
    pub fn take(&mut self) -> bool {
        match self.tokens.checked_sub(TOKEN) {
            Some(left) => {
                self.tokens = left;
                true
            }
            None => false,
        }
    }
}

/// The move limit: moves a second per station beyond which its frames are
/// dropped for `hold`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoveLimit {
    /// Moves in one second that a station may make.
    pub moves: u32,
    /// How long a station over the limit is held.
    pub hold: Duration,
}

/// One station's recent moves.
#[derive(Debug, Clone, Copy)]
struct Moving {
    window: Instant,
    moves: u32,
    held_until: Option<Instant>,
}

/// The stations that moved lately, and those held (one worker's view).
#[derive(Debug, Default)]
pub struct Movers {
    stations: HashMap<FdbKey, Moving>,
    held: usize,
    /// When [`Movers::expire`] last looked.
    expired: Option<Instant>,
}

/// How often held stations are looked at for release.
const EXPIRE_INTERVAL: Duration = Duration::from_millis(100);

/// Stations followed at once: the map is bounded, as the stations of a
/// loop are many.
const MAX_MOVERS: usize = 4096;

impl Movers {
    /// Whether any station is held (the fast path's one check).
    #[inline]
    pub fn any_held(&self) -> bool {
        self.held > 0
    }

    /// Whether `key` is held at `now`.
    pub fn is_held(&self, key: &FdbKey, now: Instant) -> bool {
        self.stations
            .get(key)
            .and_then(|m| m.held_until)
            .is_some_and(|until| now < until)
    }

    /// Counts a move of `key`; true when it just went over the limit.
    pub fn moved(&mut self, key: FdbKey, limit: &MoveLimit, now: Instant) -> bool {
        if self.stations.len() >= MAX_MOVERS && !self.stations.contains_key(&key) {
            self.expired = None;
            self.expire(now);
            if self.stations.len() >= MAX_MOVERS {
                return false;
            }
        }
        let entry = self.stations.entry(key).or_insert(Moving {
            window: now,
            moves: 0,
            held_until: None,
        });
        if now >= entry.window + Duration::from_secs(1) {
            entry.window = now;
            entry.moves = 0;
        }
        entry.moves += 1;
        if entry.moves > limit.moves && entry.held_until.is_none() {
            entry.held_until = Some(now + limit.hold);
            self.held += 1;
            return true;
        }
        false
    }

    /// Releases stations whose hold is over and forgets those whose
    /// window is over too; returns those released. Looks at most every
    /// [`EXPIRE_INTERVAL`]: the map holds up to [`MAX_MOVERS`] stations
    /// while a loop lasts, and a batch should not walk them all.
    pub fn expire(&mut self, now: Instant) -> Vec<FdbKey> {
        if self.expired.is_some_and(|at| now < at + EXPIRE_INTERVAL) {
            return Vec::new();
        }
        self.expired = Some(now);
        let mut released = Vec::new();
        self.stations.retain(|key, moving| {
            if let Some(until) = moving.held_until {
                if now < until {
                    return true;
                }
                // Released once: a station moving on counts afresh.
                moving.held_until = None;
                moving.window = now;
                moving.moves = 0;
                released.push(*key);
            }
            now < moving.window + Duration::from_secs(1)
        });
        self.held -= released.len();
        released
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::MacAddr;

    #[test]
    fn a_bucket_passes_its_burst_then_its_rate() {
        let start = Instant::now();
        let mut bucket = StormBucket::new(1000);
        bucket.refill(start);
        // A burst of a tenth of the rate, but at least 64.
        assert_eq!((0..200).filter(|_| bucket.take()).count(), 100);
        bucket.refill(start + Duration::from_millis(50));
        assert_eq!((0..200).filter(|_| bucket.take()).count(), 50);
        // Never more than the burst, however long it rested.
        bucket.refill(start + Duration::from_secs(60));
        assert_eq!((0..200).filter(|_| bucket.take()).count(), 100);
        let mut small = StormBucket::new(10);
        assert_eq!((0..100).filter(|_| small.take()).count(), 64);
    }

    #[test]
    fn a_station_over_the_move_limit_is_held_then_released() {
        let limit = MoveLimit {
            moves: 3,
            hold: Duration::from_secs(5),
        };
        let key = FdbKey::new(0, MacAddr([2, 0, 0, 0, 0, 1]));
        let mut movers = Movers::default();
        let start = Instant::now();
        for n in 0..3 {
            assert!(!movers.moved(key, &limit, start + Duration::from_millis(n)));
        }
        assert!(!movers.any_held());
        assert!(movers.moved(key, &limit, start + Duration::from_millis(10)));
        assert!(movers.any_held());
        assert!(movers.is_held(&key, start + Duration::from_secs(4)));
        // Held once, however often it moves on.
        assert!(!movers.moved(key, &limit, start + Duration::from_millis(20)));
        assert!(movers.expire(start + Duration::from_secs(2)).is_empty());
        assert_eq!(movers.expire(start + Duration::from_secs(6)), vec![key]);
        assert!(!movers.any_held());
        assert!(!movers.is_held(&key, start + Duration::from_secs(6)));
        // Released once, however soon it is looked at again.
        assert!(movers
            .expire(start + Duration::from_millis(6200))
            .is_empty());
        // Moving on as fast, it is held again.
        let again = start + Duration::from_millis(6300);
        for n in 0..3 {
            assert!(!movers.moved(key, &limit, again + Duration::from_millis(n)));
        }
        assert!(movers.moved(key, &limit, again + Duration::from_millis(5)));
        assert!(movers.any_held());
        assert_eq!(movers.expire(again + Duration::from_secs(6)), vec![key]);
        assert!(!movers.any_held());
        // Moves spread over seconds never reach the limit.
        let later = start + Duration::from_secs(20);
        for n in 0..20 {
            assert!(!movers.moved(key, &limit, later + Duration::from_millis(400 * n)));
        }
    }

    fn verdicts(decisions: &[Decision]) -> Vec<Verdict> {
        decisions.iter().map(|&d| Verdict::decided(d)).collect()
    }

    fn decisions(verdicts: &[Verdict]) -> Vec<Decision> {
        verdicts.iter().map(|v| v.decision).collect()
    }

    #[test]
    fn the_group_forward_mask_floods_the_groups_it_names() {
        use crate::wire::FrameSpec;
        let group = |last: u8| {
            FrameSpec::new(
                MacAddr([0x01, 0x80, 0xc2, 0, 0, last]),
                MacAddr([2, 0, 0, 0, 0, 1]),
            )
            .build()
        };
        let frames = [group(0x0e), group(0x02), group(0x0e)];
        let reserved = Decision::Drop(DropReason::Reserved);
        let mut batch = verdicts(&[reserved, reserved, Decision::Drop(DropReason::Runt)]);
        forward_groups(&mut batch, frames.iter().map(Vec::as_slice), 1 << 14);
        assert_eq!(
            decisions(&batch),
            [Decision::Flood, reserved, Decision::Drop(DropReason::Runt)]
        );
        let mut batch = verdicts(&[reserved]);
        forward_groups(&mut batch, frames.iter().map(Vec::as_slice), 0);
        assert_eq!(decisions(&batch), [reserved]);
    }

    #[test]
    fn the_storm_limit_drops_floods_beyond_the_bucket() {
        let mut bucket = StormBucket::new(10);
        let unicast = Decision::Unicast(crate::port_id::PortId(1));
        let mut batch = verdicts(&[Decision::Flood; 70]);
        batch.push(Verdict::decided(unicast));
        limit_storm(&mut batch, &mut bucket, Instant::now());
        let storm = Decision::Drop(DropReason::Storm);
        // A burst of 64 floods; unicast is never counted.
        assert_eq!(
            batch
                .iter()
                .filter(|v| v.decision == Decision::Flood)
                .count(),
            64
        );
        assert_eq!(batch.iter().filter(|v| v.decision == storm).count(), 6);
        assert_eq!(batch[70].decision, unicast);
    }

    #[test]
    fn a_held_station_s_frames_are_dropped() {
        use crate::wire::FrameSpec;
        let held = MacAddr([2, 0, 0, 0, 0, 1]);
        let other = MacAddr([2, 0, 0, 0, 0, 2]);
        let limit = MoveLimit {
            moves: 0,
            hold: Duration::from_secs(5),
        };
        let now = Instant::now();
        let mut movers = Movers::default();
        assert!(movers.moved(FdbKey::new(0, held), &limit, now));
        let frames = [
            FrameSpec::new(other, held).build(),
            FrameSpec::new(held, other).build(),
        ];
        let mut batch = verdicts(&[Decision::Flood, Decision::Flood]);
        hold_movers(&mut batch, frames.iter().map(Vec::as_slice), &movers, now);
        assert_eq!(
            decisions(&batch),
            [Decision::Drop(DropReason::MoveLimit), Decision::Flood]
        );
    }
}
