//! Bounded waits for what the kernel or another thread applies a moment
//! after the step that asked for it: a test reads again until the value
//! is the one it expects (or has stopped moving), never past a deadline,
//! and asserts on the last value read.

use std::thread;
use std::time::{Duration, Instant};

/// Reads `read` every `every` until `done` holds for what it read or
/// `within` has passed: the last value read.
pub fn poll<T>(
    within: Duration,
    every: Duration,
    mut read: impl FnMut() -> T,
    done: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        let value = read();
        if done(&value) || Instant::now() >= deadline {
            return value;
        }
        thread::sleep(every);
    }
}

/// What `read` gives once two reads `every` apart agree, or the last read
/// after `within`.
pub fn steady<T: PartialEq>(within: Duration, every: Duration, mut read: impl FnMut() -> T) -> T {
    let deadline = Instant::now() + within;
    let mut last = read();
    loop {
        thread::sleep(every);
        let now = read();
        if now == last || Instant::now() >= deadline {
            return now;
        }
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_stops_at_the_expected_value_or_the_deadline() {
        let mut n = 0;
        let got = poll(
            Duration::from_secs(5),
            Duration::ZERO,
            || {
                n += 1;
                n
            },
            |&n| n == 3,
        );
        assert_eq!(got, 3);
        let got = poll(
            Duration::from_millis(20),
            Duration::from_millis(5),
            || 0,
            |&n| n == 1,
        );
        assert_eq!(got, 0, "the last read, once the deadline passed");
    }

    #[test]
    fn steady_returns_once_two_reads_agree() {
        let mut reads = [5, 4, 4, 9].into_iter();
        let got = steady(Duration::from_secs(5), Duration::ZERO, || {
            reads.next().unwrap()
        });
        assert_eq!(got, 4);
    }
}
