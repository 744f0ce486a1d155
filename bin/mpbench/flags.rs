//! The flags that several subcommands take, each declared once here and
//! flattened (`#[command(flatten)]`) into every subcommand that takes it,
//! at the place it had among that subcommand's own flags, so that `--help`
//! lists them in the same order as before.
//!
//! The flag names, types and value names are the same everywhere. Where a
//! subcommand has a default, a help text or a range of its own, it keeps
//! it with `#[command(mut_arg(...))]` on its Args struct, and a comment
//! there says which.

use std::path::PathBuf;

use clap::builder::RangedI64ValueParser;
use locks::StrategyKind;

/// `--lock`: the strategies to measure (locks, memory, forward, rfc2889).
#[derive(clap::Args)]
pub struct Strategies {
    /// Strategies to measure, comma-separated or with the flag repeated;
    /// all six by default.
    #[arg(long = "lock", value_name = "STRATEGY", value_delimiter = ',')]
    pub locks: Vec<StrategyKind>,
}

/// `--seconds`: how long one measurement lasts (locks, memory, forward,
/// rtt).
#[derive(clap::Args)]
pub struct Interval {
    /// Seconds per measurement.
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
}

/// `--runs`: how many times each point is measured (locks, memory,
/// forward, rtt).
#[derive(clap::Args)]
pub struct Repeats {
    /// Runs per point, interleaved; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
}

/// `--mpbridge`: the bridge under test (forward, rfc2889, rtt).
#[derive(clap::Args)]
pub struct MpbridgeBinary {
    /// The mpbridge binary (default: the one beside mpbench).
    #[arg(long)]
    pub mpbridge: Option<PathBuf>,
}

/// `--out`: where the result files go (locks, forward, rfc2889, rtt).
#[derive(clap::Args)]
pub struct Output {
    /// Where the CSV, JSON and plot files go.
    #[arg(long, default_value = "mpbench-results")]
    pub out: PathBuf,
}

/// The `--runs` parser of the subcommands that take 1 to 99 runs (memory,
/// rtt): the bounds and messages of `value_parser!(u16).range(1..=99)`.
pub fn one_to_99_runs() -> RangedI64ValueParser<usize> {
    RangedI64ValueParser::new().range(1..=99)
}
