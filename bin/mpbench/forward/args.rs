//! The flags of `mpbench forward` and their values: port kinds, I/O modes,
//! references, receive-work placements and offered loads.

use crate::flags;

#[derive(clap::Args)]
// --lock: epoch alone by default here, with a help text of its own.
#[command(mut_arg("locks", |arg| arg
    .default_value("epoch")
    .help("Strategies to measure, comma-separated or with the flag repeated")))]
// --seconds: this subcommand's own help text.
#[command(mut_arg("seconds", |arg| arg.help("Seconds per measurement (after a 0.3 s warm-up)")))]
// --runs: 5 runs by default here, not 3, and a help text of its own.
#[command(mut_arg("runs", |arg| arg
    .default_value("5")
    .help("Runs per point, the configurations interleaved; the median is reported")))]
pub struct ForwardArgs {
    /// Port kinds: raw (veth pairs through AF_PACKET), tap, vxlan (two
    /// VTEPs across a veth underlay), or several; or vhost alone (two
    /// vhost-user ports and a DPDK testpmd generator, beside DPDK's own
    /// vhost switch).
    #[arg(long, value_delimiter = ',', default_value = "raw")]
    pub(super) ports: Vec<PortKindArg>,
    #[command(flatten)]
    pub(super) strategies: flags::Strategies,
    /// mpbridge worker counts (a worker-scaling table when more than one).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub(super) workers: Vec<usize>,
    /// Frame sizes on the wire, FCS included (64 is 60 bytes in memory).
    #[arg(long, value_delimiter = ',', default_value = "64,1518")]
    pub(super) sizes: Vec<usize>,
    /// I/O modes of mpbridge: interrupt (sleep in poll(2)) and/or poll
    /// (busy-poll).
    #[arg(long, value_delimiter = ',', default_value = "interrupt")]
    pub(super) io: Vec<IoArg>,
    /// References to measure beside mpbridge: kernel (veth ports), relay,
    /// direct (veth ports), tpacket (a C TPACKET_V3 loop, veth ports), loop
    /// (a blocking read/write loop, tap ports), vde (tap ports, when
    /// vde_switch is installed).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kernel,relay,direct,tpacket,loop,vde"
    )]
    pub(super) references: Vec<ReferenceArg>,
    #[command(flatten)]
    pub(super) interval: flags::Interval,
    #[command(flatten)]
    pub(super) repeats: flags::Repeats,
    /// Offered rate in frames per second; 0 sends flat out.
    #[arg(long, default_value_t = 0)]
    pub(super) rate: u64,
    /// Where the ingress veth's receive work runs: apart (placement a, a
    /// CPU that is not the forwarder's) and/or shared (placement b, the
    /// forwarder's CPU, as RPS gives the kernel bridge). Raw ports only.
    #[arg(long, value_delimiter = ',', default_value = "apart,shared")]
    pub(super) placement: Vec<Placement>,
    /// An offered-load sweep: percentages of each configuration's own
    /// flat-out delivered rate (measured first in every run), and `max`
    /// (flat out), e.g. 10,25,50,100,150,max. Plots delivered against
    /// offered at the first frame size; receive livelock shows as a curve
    /// that falls after its peak.
    #[arg(long, value_delimiter = ',', value_parser = parse_load)]
    pub(super) sweep: Vec<Load>,
    /// Instead of frames, one bulk TCP connection from the generator's
    /// namespace to the sink's (198.18.0.1 to 198.18.0.2), default
    /// offloads: goodput in Mbit/s and CPU time per KiB.
    #[arg(long)]
    pub(super) tcp: bool,
    #[command(flatten)]
    pub(super) binary: flags::MpbridgeBinary,
    /// How mpbridge's raw ports take frames from the kernel: frame (each
    /// as it arrives, TPACKET_V2) or block (blocks handed over when full or
    /// after 1 ms, TPACKET_V3); passed as `--rx-ring` to every mpbridge.
    #[arg(long, default_value = "frame", value_parser = ["frame", "block"])]
    pub(super) rx_ring: String,
    /// The size of each of mpbridge's raw ports' receive rings per worker
    /// (64K to 256M), passed as `,ring=SIZE` on its raw ports; mpbridge's
    /// default (4M) when not given.
    #[arg(long, value_name = "SIZE")]
    pub(super) ring: Option<String>,
    /// Measure every strategy on one running mpbridge per configuration,
    /// switching its table with `mpbridge lock set` between measurements,
    /// so that the comparison is not disturbed by restarts and re-learning.
    #[arg(long)]
    pub(super) switch: bool,
    /// Frames in flight per vhost-user port and queue (testpmd's first
    /// burst, 1 to 512): fewer make the run bound by the round trip, as a
    /// request and its reply or a small TCP window are. vhost only.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u16).range(1..=512))]
    pub(super) in_flight: u16,
    /// The vhost generator's forwarding lcores per queue pair: 1 (both
    /// ports on one CPU) or 2 (a CPU per port, so that the generator is
    /// less often what sets the rate; P queue pairs then need 3P CPUs).
    /// vhost only.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub(super) generator_lcores: u8,
    #[command(flatten)]
    pub(super) output: flags::Output,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub(super) enum PortKindArg {
    Raw,
    Tap,
    /// Two VTEPs across a veth underlay (MTU 1600): mpbridge with a tap to
    /// each host and a VXLAN port, or the kernel's vxlan devices and
    /// bridges with a veth to each host.
    Vxlan,
    /// Two vhost-user ports, a DPDK testpmd generator behind them, and
    /// DPDK's vhost switch as the ceiling.
    Vhost,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub(super) enum IoArg {
    Interrupt,
    Poll,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub(super) enum ReferenceArg {
    Kernel,
    Relay,
    Direct,
    /// vde_switch (Debian's vde2) between two taps, when it is installed.
    Vde,
    /// Blocking read/write between the two taps, one thread per direction
    /// (`mpbench tap-loop`): the least a tap forwarder can do.
    Loop,
    /// The C loop between the two veths (`mpbench tpacket-loop`): a
    /// TPACKET_V3 receive ring copied into a transmit ring, no table: the
    /// least a raw-socket forwarder can do.
    Tpacket,
    /// No reference: mpbridge alone (for profiling it).
    None,
}

/// Where the ingress interface's receive work (softirq) runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub(super) enum Placement {
    /// Placement (a): on a CPU that is not the forwarder's.
    Apart,
    /// Placement (b): on the forwarder's CPU.
    Shared,
}

impl Placement {
    pub(super) fn label(self) -> &'static str {
        match self {
            Placement::Apart => "(a) rx apart",
            Placement::Shared => "(b) rx shared",
        }
    }
}

/// How much the generator offers.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) enum Load {
    /// As fast as it can.
    FlatOut,
    /// This many frames per second.
    Rate(f64),
    /// This fraction of the configuration's flat-out delivered rate.
    Share(f64),
}

fn parse_load(text: &str) -> Result<Load, String> {
    if text == "max" {
        return Ok(Load::FlatOut);
    }
    match text.trim_end_matches('%').parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 1000.0 => Ok(Load::Share(p / 100.0)),
        _ => Err(format!("{text}: a percentage between 0 and 1000, or max")),
    }
}
