//! The strategies as a runtime value, for command lines and reports.

use std::fmt;
use std::str::FromStr;

/// One of the six strategies, as named on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StrategyKind {
    /// [`crate::Mutex`]
    Mutex,
    /// [`crate::Rwlock`]
    Rwlock,
    /// [`crate::Rmlock`]
    Rmlock,
    /// [`crate::Sharded`]
    Sharded,
    /// [`crate::Rcu`]
    Rcu,
    /// [`crate::Epoch`]
    Epoch,
}

impl StrategyKind {
    /// Every strategy, in the order they are reported.
    pub const ALL: [StrategyKind; 6] = [
        StrategyKind::Mutex,
        StrategyKind::Rwlock,
        StrategyKind::Rmlock,
        StrategyKind::Sharded,
        StrategyKind::Rcu,
        StrategyKind::Epoch,
    ];

    /// The command-line name.
    pub const fn name(self) -> &'static str {
        match self {
            StrategyKind::Mutex => "mutex",
            StrategyKind::Rwlock => "rwlock",
            StrategyKind::Rmlock => "rmlock",
            StrategyKind::Sharded => "sharded",
            StrategyKind::Rcu => "rcu",
            StrategyKind::Epoch => "epoch",
        }
    }

    /// Whether readers take a lock, so that holding a read section per batch
    /// and per frame are different things to measure.
    pub const fn is_lock_based(self) -> bool {
        matches!(
            self,
            StrategyKind::Mutex | StrategyKind::Rwlock | StrategyKind::Rmlock
        )
    }
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A strategy name that is not one of the six.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownStrategy(pub String);

impl fmt::Display for UnknownStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown lock strategy '{}' (valid: ", self.0)?;
        for (i, kind) in StrategyKind::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(kind.name())?;
        }
        f.write_str(")")
    }
}

impl std::error::Error for UnknownStrategy {}

impl FromStr for StrategyKind {
    type Err = UnknownStrategy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StrategyKind::ALL
            .into_iter()
            .find(|kind| kind.name() == s)
            .ok_or_else(|| UnknownStrategy(s.to_owned()))
    }
}

/// Runs `$body` with the type alias `$S` bound to the strategy `$kind`
/// names: the one runtime `match` that turns a command-line value into a
/// monomorphised code path.
///
/// ```
/// fn name<S: locks::Strategy>() -> &'static str { S::KIND.name() }
/// let kind: locks::StrategyKind = "epoch".parse().unwrap();
/// assert_eq!(locks::with_strategy!(kind, S => name::<S>()), "epoch");
/// ```
#[macro_export]
macro_rules! with_strategy {
    ($kind:expr, $S:ident => $body:expr) => {
        match $kind {
            $crate::StrategyKind::Mutex => {
                type $S = $crate::Mutex;
                $body
            }
            $crate::StrategyKind::Rwlock => {
                type $S = $crate::Rwlock;
                $body
            }
            $crate::StrategyKind::Rmlock => {
                type $S = $crate::Rmlock;
                $body
            }
            $crate::StrategyKind::Sharded => {
                type $S = $crate::Sharded;
                $body
            }
            $crate::StrategyKind::Rcu => {
                type $S = $crate::Rcu;
                $body
            }
            $crate::StrategyKind::Epoch => {
                type $S = $crate::Epoch;
                $body
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in StrategyKind::ALL {
            assert_eq!(kind.name().parse::<StrategyKind>(), Ok(kind));
            assert_eq!(kind.to_string(), kind.name());
        }
    }

    #[test]
    fn unknown_name_lists_the_valid_ones() {
        let err = "spinlock".parse::<StrategyKind>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown lock strategy 'spinlock' (valid: mutex, rwlock, rmlock, sharded, rcu, epoch)"
        );
    }
}
