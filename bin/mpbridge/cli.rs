//! The command line: clap's definitions of every subcommand and option,
//! their value parsers, and the checks that involve several options. The
//! man pages (`docs/man/`) and the shell completions come from these
//! definitions too.

use bridge::fdb::Seconds;
use bridge::vlan::FdbVlan;
use bridge::wire::StationMac;
use bridge::FdbConfig;
use clap::{Args, CommandFactory, Parser, Subcommand};
use locks::StrategyKind;

use crate::metrics;
use crate::ports::PortSpec;
use crate::protocol;

/// The strategy used when `--lock` is not given: the fastest forwarding
/// path in docs/benchmarks.md.
const DEFAULT_LOCK: StrategyKind = StrategyKind::Epoch;

#[derive(Parser)]
#[command(
    name = "mpbridge",
    version,
    about = "A software Ethernet learning bridge whose MAC table runs under a chosen lock strategy",
    after_help = "Logging: RUST_LOG (e.g. RUST_LOG=debug) or -v/-vv."
)]
pub struct Cli {
    /// More log output (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// The bridge's name; its control socket is /run/mpbridge/NAME.sock.
    #[arg(long, global = true, default_value = "mpbridge", value_parser = bridge_name)]
    pub name: String,
    /// The control socket's path, instead of the one --name gives.
    #[arg(long, global = true, value_name = "PATH")]
    pub ctl: Option<std::path::PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The control socket: `--ctl`, or the one `--name` gives.
    pub fn socket(&self) -> std::path::PathBuf {
        self.ctl
            .clone()
            .unwrap_or_else(|| protocol::default_socket(&self.name))
    }
}

/// `--lock`: a strategy's name.
fn parse_lock(text: &str) -> Result<StrategyKind, String> {
    text.parse()
        .map_err(|e: locks::UnknownStrategy| e.to_string())
}

/// `--port`: a port and its options.
fn parse_port(text: &str) -> Result<PortSpec, String> {
    PortSpec::parse(text)
}

/// A bridge name: what a file name in /run/mpbridge may safely be.
pub fn bridge_name(text: &str) -> Result<String, String> {
    let ok = !text.is_empty()
        && text.len() <= 64
        && !text.starts_with('.')
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "invalid bridge name '{text}' (1 to 64 letters, digits, '-', '_' or '.')"
        ))
    }
}

#[derive(Subcommand)]
pub enum Command {
    /// Bridge two or more ports until SIGTERM or SIGINT.
    Run(Box<RunArgs>),
    /// Show or change the MAC table of a running bridge.
    #[command(subcommand)]
    Fdb(FdbCommand),
    /// Add or remove a port of a running bridge.
    #[command(subcommand)]
    Port(PortCommand),
    /// Show multicast snooping's groups, router ports and queriers.
    #[command(subcommand)]
    Mdb(MdbCommand),
    /// Apply the configuration file's ports and static entries again.
    Reload,
    /// Change the MAC table's lock strategy while traffic flows.
    #[command(subcommand)]
    Lock(LockCommand),
    /// Write a port's frames as pcapng (tcpdump, tshark and Wireshark read
    /// it), with each frame's direction.
    Capture {
        /// The port, as given to --port (or its interface name).
        port: String,
        /// Received frames, sent frames, or both.
        #[arg(long, value_enum, default_value_t = protocol::CaptureDirection::Both)]
        direction: protocol::CaptureDirection,
        /// Stop after this many frames (otherwise: until interrupted).
        #[arg(long, value_name = "N")]
        count: Option<u64>,
        /// Write to FILE instead of stdout.
        #[arg(short = 'w', value_name = "FILE")]
        file: Option<std::path::PathBuf>,
        /// Only the frames of this worker's queue.
        #[arg(long, value_name = "Q")]
        queue: Option<usize>,
    },
    /// A running bridge's counters: ports, workers, the table, the lock.
    Stats {
        /// JSON instead of text.
        #[arg(short = 'j', long)]
        json: bool,
    },
    /// Print the completion script of a shell (bash: save it as
    /// /usr/share/bash-completion/completions/mpbridge; zsh: as _mpbridge
    /// in a directory of $fpath; fish: as
    /// ~/.config/fish/completions/mpbridge.fish).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Subcommand)]
pub enum MdbCommand {
    /// List each group's member ports with their timers, the router ports
    /// and the queriers (with --mcast-snooping).
    Show {
        /// JSON instead of text.
        #[arg(short = 'j', long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum LockCommand {
    /// Move the table to STRATEGY: workers finish their batch, the entries
    /// move over with their ages, and forwarding resumes.
    Set {
        /// mutex, rwlock, rmlock, sharded, rcu or epoch.
        strategy: String,
    },
}

#[derive(Subcommand)]
pub enum PortCommand {
    /// Add a port: tap:NAME, raw:IFNAME, vxlan:NAME,... or vhost:PATH with
    /// options as --port takes them. Every worker gets a queue of it.
    Add {
        /// tap:NAME, raw:IFNAME, vxlan:NAME,... or vhost:PATH[,client],
        /// with options.
        #[arg(value_name = "tap:NAME|raw:IFNAME|vxlan:NAME,...|vhost:PATH[,OPTIONS]")]
        port: String,
        /// The network the port is for (a CNI network's name); with
        /// --container and --ifname it names the port's owner, which port
        /// show and stats list.
        #[arg(long, value_name = "NAME", requires_all = ["container", "ifname"])]
        network: Option<String>,
        /// The container the port is for (CNI_CONTAINERID).
        #[arg(long, value_name = "ID", requires_all = ["network", "ifname"])]
        container: Option<String>,
        /// The container's interface name for it (CNI_IFNAME).
        #[arg(long, value_name = "IFNAME", requires_all = ["network", "container"])]
        ifname: Option<String>,
    },
    /// Remove a port (the last one too); its table entries go with it.
    Del {
        /// The port, as given to --port or port add (or its interface name).
        port: String,
    },
    /// Enable a port that its BPDU guard (guard=on) disabled.
    Enable {
        /// The port, as given to --port or port add (or its interface name).
        port: String,
    },
    /// List the ports: id, name, kind, link, spanning tree role and state
    /// (with --stp), guard, and every option as --port takes it.
    Show {
        /// JSON instead of text.
        #[arg(short = 'j', long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum FdbCommand {
    /// List the entries: MAC, port, VLAN, state (learned, static, local), age.
    Show {
        /// Only this port's entries.
        #[arg(long)]
        port: Option<String>,
        /// Only this VLAN's entries (0: untagged).
        #[arg(long)]
        vlan: Option<FdbVlan>,
        /// JSON instead of text.
        #[arg(short = 'j', long)]
        json: bool,
    },
    /// Add a static entry: fdb add MAC port PORT [vlan VID] [dst IP] (dst:
    /// on a VXLAN port, the VTEP the station is behind).
    Add {
        /// The station's address.
        mac: StationMac,
        /// port PORT [vlan VID] [dst IP]
        #[arg(num_args = 0.., value_name = "port PORT [vlan VID] [dst IP]")]
        words: Vec<String>,
    },
    /// Remove an entry: fdb del MAC [vlan VID].
    Del {
        /// The station's address.
        mac: StationMac,
        /// [vlan VID]
        #[arg(num_args = 0.., value_name = "vlan VID")]
        words: Vec<String>,
    },
    /// Remove learned entries: fdb flush [port PORT].
    Flush {
        /// [port PORT]
        #[arg(num_args = 0.., value_name = "port PORT")]
        words: Vec<String>,
    },
}

#[derive(Args)]
pub struct RunArgs {
    /// A port: tap:NAME (a tap that mpbridge owns: created if it does not
    /// exist, removed at exit if mpbridge created it; needs CAP_NET_ADMIN)
    /// or raw:IFNAME (an existing interface through AF_PACKET, promiscuous:
    /// a NIC, a veth, or a VM's tap on its host side; needs CAP_NET_RAW;
    /// ,ring=SIZE sets its receive ring per worker, 4M by default),
    /// or vxlan:NAME,vni=N,local=IP[,port=4789][,remote=IP]...[,learning=off]
    /// (a VXLAN segment over UDP to the listed VTEPs, RFC 7348; with
    /// ,evpn=on[,mirror_port=64789] its stations and VTEPs come from FRR's
    /// BGP EVPN through a kernel mirror of the port), or
    /// vhost:PATH[,client] (a vhost-user socket for a QEMU guest's
    /// virtio-net or a DPDK virtio-user port: mpbridge listens at PATH, or
    /// with ,client connects to a frontend listening there; one queue pair
    /// per worker; ,max_memory=SIZE caps the memory the frontend may share,
    /// 256G by default; a socket mpbridge serves takes ,socket_owner=USER
    /// ,socket_group=GROUP ,socket_mode=0660). Repeat for each port; a
    /// bridge given none starts empty and takes them with `port add` (a
    /// relay needs two). With --vlan-filtering, VLAN options may follow:
    /// ,access=VID (untagged in and out, in VLAN VID), ,trunk=LIST (tagged,
    /// LIST like 10,20,100-110), ,native=VID (with trunk: untagged frames
    /// belong to VID and leave untagged). Every port takes Linux's port
    /// flags and limits (,isolated=on ,hairpin=on ,learning=off ,flood=off
    /// ,mcast_flood=off ,bcast_flood=off ,locked=on ,max_learned=N
    /// ,mcast_router=0|1|2 ,mcast_fast_leave=on ,mcast_max_groups=N; README).
    #[arg(
        help_heading = "Ports",
        long = "port",
        value_name = "tap:NAME|raw:IFNAME|vxlan:NAME,...|vhost:PATH[,OPTIONS]",
        value_parser = parse_port
    )]
    pub ports: Vec<PortSpec>,
    /// A TOML file with the bridge's settings, ports and static entries
    /// (docs/control.md); options given on the command line win over it.
    /// SIGHUP or `mpbridge reload` applies its ports and static entries
    /// again.
    #[arg(help_heading = "Ports", long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// How raw ports' receive rings hand frames over. frame: each frame as
    /// it arrives (TPACKET_V2). block: in blocks, when one is full or after
    /// 1 ms (TPACKET_V3): fewer wake-ups under load, up to 1 ms more
    /// latency per frame on a quiet link.
    #[arg(help_heading = "Ports", long, value_enum, default_value_t = RxRingArg::Frame)]
    pub rx_ring: RxRingArg,
    /// bridge: a learning bridge. relay: exactly two ports, every frame to
    /// the other one, no MAC table (a reference for measurements, like
    /// OpenBSD's tpmr).
    #[arg(help_heading = "Forwarding", long, value_enum, default_value_t = ModeArg::Bridge)]
    pub mode: ModeArg,
    /// Seconds after which a silent station is forgotten.
    #[arg(help_heading = "Forwarding", long, value_name = "SECONDS", default_value_t = FdbConfig::DEFAULT_AGE_SECS)]
    pub age: Seconds,
    /// Most learned stations (0: no limit). Beyond it new stations are not
    /// learned; their frames are still forwarded (flooded).
    #[arg(help_heading = "Forwarding", long, value_name = "N", default_value_t = FdbConfig::DEFAULT_MAX_ENTRIES)]
    pub max_entries: usize,
    /// Station moves a second beyond which a station's frames are dropped
    /// for --move-hold seconds (a loop, or two stations with one address).
    /// Without it, frequent moves are only warned of.
    #[arg(help_heading = "Forwarding", long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub move_limit: Option<u32>,
    /// How long a station over the move limit is held.
    #[arg(help_heading = "Forwarding", long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub move_hold: u64,
    /// The link-local groups 01:80:C2:00:00:0X to forward, bit X set for
    /// each (LLDP is bit 14: 0x4000; 802.1X bit 3: 0x8), as the Linux
    /// bridge's group_fwd_mask; hex with 0x, or decimal. Bits 0 to 2 (STP,
    /// MAC pause, LACP) are refused, as Linux refuses them.
    #[arg(help_heading = "Forwarding", long, value_name = "MASK", default_value = "0", value_parser = parse_group_fwd_mask)]
    pub group_fwd_mask: u16,
    /// 802.1Q VLAN filtering, as the Linux bridge's vlan_filtering 1: ports
    /// are members of VLANs (their --port options; without any, VLAN 1
    /// untagged), frames enter and leave only member ports, and learning
    /// and flooding are per VLAN.
    #[arg(help_heading = "VLANs", long)]
    pub vlan_filtering: bool,
    /// Run spanning tree: RSTP (IEEE 802.1D-2004 clause 17), speaking
    /// 802.1D on ports where a neighbour does (the Linux bridge with
    /// stp_state 1). Without it, BPDUs are forwarded like other multicast.
    /// Ports take ,cost=N ,priority=N (0-240, steps of 16) ,edge=on
    /// ,restricted_role=on ,restricted_tcn=on (and, with or without it,
    /// ,guard=on ,bpdu_filter=on ,storm=PPS).
    #[arg(help_heading = "Spanning tree", long)]
    pub stp: bool,
    /// Bridge priority: 0 to 61440 in steps of 4096 (the lowest bridge id
    /// is the root).
    #[arg(
        help_heading = "Spanning tree",
        long,
        value_name = "N",
        default_value_t = 32768
    )]
    pub stp_priority: u16,
    /// Seconds between BPDUs: 1 or 2.
    #[arg(
        help_heading = "Spanning tree",
        long,
        value_name = "SECONDS",
        default_value_t = 2
    )]
    pub stp_hello: u8,
    /// Seconds a port spends discarding and learning where proposal and
    /// agreement cannot make it forward at once: 4 to 30.
    #[arg(
        help_heading = "Spanning tree",
        long,
        value_name = "SECONDS",
        default_value_t = 15
    )]
    pub stp_forward_delay: u8,
    /// Seconds a root's information lasts: 6 to 40, with 2 x (forward delay
    /// - 1) >= max age >= 2 x (hello + 1).
    #[arg(
        help_heading = "Spanning tree",
        long,
        value_name = "SECONDS",
        default_value_t = 20
    )]
    pub stp_max_age: u8,
    /// IGMP (v2, v3) and MLD (v1, v2) snooping per VLAN, as the Linux
    /// bridge's mcast_snooping 1: once a querier is present, IP multicast
    /// goes only to ports with members of its group and to router ports
    /// (where queries come in); groups nobody joined go to router ports
    /// only; link-local groups (224.0.0.x, ff02::1) always flood; without
    /// a querier everything floods. `mpbridge mdb show` lists the groups.
    #[arg(help_heading = "Multicast snooping", long)]
    pub mcast_snooping: bool,
    /// With --mcast-snooping: send general queries (IGMPv2 from 0.0.0.0,
    /// MLDv1 from the bridge's link-local address) while no other querier
    /// is heard, as the Linux bridge's mcast_querier 1.
    #[arg(help_heading = "Multicast snooping", long)]
    pub mcast_querier: bool,
    /// Seconds between the querier's general queries.
    #[arg(help_heading = "Multicast snooping", long, value_name = "SECONDS", default_value = "125", value_parser = parse_seconds)]
    pub mcast_query_interval: Seconds64,
    /// Seconds a host has to answer a general query (the queries' maximum
    /// response time), below the query interval.
    #[arg(help_heading = "Multicast snooping", long, value_name = "SECONDS", default_value = "10", value_parser = parse_seconds)]
    pub mcast_query_response_interval: Seconds64,
    /// Seconds a membership lasts without a report (Linux: 2 x query
    /// interval + response interval).
    #[arg(help_heading = "Multicast snooping", long, value_name = "SECONDS", default_value = "260", value_parser = parse_seconds)]
    pub mcast_membership_interval: Seconds64,
    /// Seconds another querier counts as present after its last query.
    #[arg(help_heading = "Multicast snooping", long, value_name = "SECONDS", default_value = "255", value_parser = parse_seconds)]
    pub mcast_querier_interval: Seconds64,
    /// Group-specific queries after a leave, and the factor of the time
    /// the leaving port keeps the group.
    #[arg(help_heading = "Multicast snooping", long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=255))]
    pub mcast_last_member_count: u32,
    /// Seconds between group-specific queries after a leave.
    #[arg(help_heading = "Multicast snooping", long, value_name = "SECONDS", default_value = "1", value_parser = parse_seconds)]
    pub mcast_last_member_interval: Seconds64,
    /// General queries sent at start, at the startup query interval.
    #[arg(help_heading = "Multicast snooping", long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=255))]
    pub mcast_startup_query_count: u32,
    /// Seconds between the startup queries (Linux: query interval / 4).
    #[arg(help_heading = "Multicast snooping", long, value_name = "SECONDS", default_value = "31.25", value_parser = parse_seconds)]
    pub mcast_startup_query_interval: Seconds64,
    /// Most groups; beyond it snooping turns itself off (everything
    /// floods), as the Linux bridge's mcast_hash_max.
    #[arg(help_heading = "Multicast snooping", long, value_name = "N", default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    pub mcast_hash_max: u32,
    /// The group that may use the control socket besides root: every
    /// request, including opening any interface as a raw port.
    #[arg(help_heading = "Control and metrics", long, value_name = "GROUP")]
    pub ctl_group: Option<String>,
    /// A group that may use the control socket read-only: fdb show, port
    /// show, stats.
    #[arg(help_heading = "Control and metrics", long, value_name = "GROUP")]
    pub ctl_ro_group: Option<String>,
    /// Where a control client other than root may put vhost-user sockets
    /// (`port add vhost:DIR/NAME`); made, mode 0755, with --ctl-group.
    #[arg(
        help_heading = "Control and metrics",
        long,
        value_name = "DIR",
        default_value = "/run/mpbridge/vhost"
    )]
    pub vhost_dir: std::path::PathBuf,
    /// Keep every capability after the ports are open (by default all are
    /// dropped, and no-new-privileges is set).
    #[arg(help_heading = "Control and metrics", long)]
    pub keep_caps: bool,
    /// Serve the counters for Prometheus at http://ADDR:PORT/metrics
    /// (PORT alone: 127.0.0.1:PORT; [ADDR6]:PORT for IPv6).
    #[arg(help_heading = "Control and metrics", long, value_name = "ADDR:PORT", value_parser = metrics::parse_listen)]
    pub metrics: Option<std::net::SocketAddr>,
    /// MAC table lock strategy [possible values: mutex, rwlock, rmlock,
    /// sharded, rcu, epoch].
    #[arg(help_heading = "Performance", long, value_name = "STRATEGY", default_value_t = DEFAULT_LOCK, value_parser = parse_lock)]
    pub lock: StrategyKind,
    /// Forwarding threads; each owns one queue of every port.
    #[arg(help_heading = "Performance", long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub workers: u16,
    /// The most frames a worker takes from one queue at a time: its read
    /// section of the MAC table, its sends and a ring's index published
    /// are per batch.
    #[arg(help_heading = "Performance", long, value_name = "FRAMES", default_value_t = bridge::DEFAULT_BATCH as u16, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub batch: u16,
    /// Workers busy-poll their queues instead of sleeping until frames
    /// arrive (lower latency, one core per worker always busy).
    #[arg(help_heading = "Performance", long)]
    pub poll: bool,
    /// CPUs the workers may run on (a list like 0-3,8), each worker pinned
    /// to one in turn. By default workers are pinned away from the CPUs
    /// that take raw ports' receive work, where those are known and others
    /// are free.
    #[arg(help_heading = "Performance", long, value_name = "LIST", value_parser = bridge::port::placement::parse_cpu_list)]
    pub cpus: Option<bridge::port::placement::CpuSet>,
    /// Count the MAC table's lock statistics (lock-based strategies), for
    /// `mpbridge stats`; each lock is then tried before it is taken.
    #[arg(help_heading = "Performance", long)]
    pub lockstat: bool,
    /// Fault injection for tests of the daemon's own fault handling.
    #[arg(long, value_enum, hide = true)]
    pub inject_fault: Option<InjectedFault>,
}

// The variants' names are the values `--inject-fault` takes
// (`worker-panic`, `worker-stall`, `owner-slow`): each names the thread it
// breaks.
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, PartialEq, clap::ValueEnum)]
pub enum InjectedFault {
    /// Worker 0 panics as soon as it starts.
    WorkerPanic,
    /// Worker 0 panics when it is stopped (a lock switch, the bridge's
    /// stop).
    WorkerPanicOnStop,
    /// Worker 0 blocks in a sleep (for an hour) once started, before its
    /// first round: a stuck worker.
    WorkerStall,
    /// The owner sleeps 3 s before each request that changes the bridge:
    /// a slow request (a port add waiting on its workers), on demand.
    OwnerSlow,
}

#[derive(Clone, Copy, PartialEq, clap::ValueEnum)]
pub enum ModeArg {
    Bridge,
    Relay,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RxRingArg {
    Frame,
    Block,
}

/// A time in seconds, with decimals ("0.5"), as the multicast timers take
/// it.
pub type Seconds64 = std::time::Duration;

/// Parses a time in seconds above 0 and at most a day, with decimals.
pub fn parse_seconds(text: &str) -> Result<Seconds64, String> {
    match text.parse::<f64>() {
        Ok(secs) if (0.01..=86_400.0).contains(&secs) => {
            Ok(std::time::Duration::from_secs_f64(secs))
        }
        _ => Err(format!(
            "invalid time '{text}' (seconds from 0.01 to 86400, such as 0.5 or 125)"
        )),
    }
}

/// The multicast snooping settings of `args`, checked.
pub fn snoop_config(args: &RunArgs) -> Result<bridge::mcast::SnoopConfig, String> {
    if args.mcast_querier && !args.mcast_snooping {
        return Err("--mcast-querier needs --mcast-snooping".to_owned());
    }
    let config = bridge::mcast::SnoopConfig {
        querier: args.mcast_querier,
        query_interval: args.mcast_query_interval,
        query_response_interval: args.mcast_query_response_interval,
        membership_interval: args.mcast_membership_interval,
        querier_interval: args.mcast_querier_interval,
        last_member_count: args.mcast_last_member_count,
        last_member_interval: args.mcast_last_member_interval,
        startup_query_count: args.mcast_startup_query_count,
        startup_query_interval: args.mcast_startup_query_interval,
        hash_max: args.mcast_hash_max as usize,
    };
    config.check()?;
    Ok(config)
}

/// `--group-fwd-mask`: a 16-bit mask without bits 0 to 2.
pub fn parse_group_fwd_mask(text: &str) -> Result<u16, String> {
    let value = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u16::from_str_radix(hex, 16),
        None => text.parse::<u16>(),
    }
    .map_err(|_| format!("invalid group forward mask '{text}' (0 to 0xffff)"))?;
    if value & 0x7 != 0 {
        return Err(format!(
            "group forward mask '{text}' has bits 0 to 2 set (01:80:C2:00:00:00 to 02: STP, \
             MAC pause, LACP), which are never forwarded"
        ));
    }
    Ok(value)
}

/// The spanning tree settings of `args`.
pub fn stp_config(args: &RunArgs) -> bridge::stp::StpConfig {
    bridge::stp::StpConfig {
        priority: args.stp_priority,
        hello_time: args.stp_hello,
        forward_delay: args.stp_forward_delay,
        max_age: args.stp_max_age,
        ..bridge::stp::StpConfig::default()
    }
}

/// The checks that involve several options of `run` (each option's own
/// are its value parser's), after the configuration file filled in what
/// the command line left to it.
pub fn check(args: &RunArgs) -> Result<(), String> {
    let specs = &args.ports;
    // A bridge may start with no ports and take them with `port add` (a
    // container platform's, as containers come); a relay has its two.
    let relay = args.mode == ModeArg::Relay;
    if relay && specs.len() != 2 {
        return Err(format!(
            "--mode relay needs exactly two ports (got {})",
            specs.len()
        ));
    }
    if let Some(spec) = specs.iter().find(|s| s.vlans.is_some()) {
        if !args.vlan_filtering || relay {
            return Err(format!(
                "port {} has VLAN options: they need --vlan-filtering (and a bridge, not a relay)",
                spec.describe()
            ));
        }
    }
    if args.vlan_filtering && relay {
        return Err("--vlan-filtering needs --mode bridge".to_owned());
    }
    if args.stp && relay {
        return Err("--stp needs --mode bridge".to_owned());
    }
    stp_config(args).validate()?;
    if args.mcast_snooping && relay {
        return Err("--mcast-snooping needs --mode bridge".to_owned());
    }
    snoop_config(args)?;
    Ok(())
}

/// Writes `shell`'s completion script for every subcommand and option.
pub fn completions(shell: clap_complete::Shell, out: &mut dyn std::io::Write) {
    clap_complete::generate(shell, &mut Cli::command(), "mpbridge", out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The man pages: `mpbridge.1`, and one per subcommand, nested ones
    /// too (`mpbridge-run.1`, `mpbridge-fdb-show.1`, ...), by file name.
    fn man_pages() -> Vec<(String, Vec<u8>)> {
        fn render(name: &str, command: &clap::Command, pages: &mut Vec<(String, Vec<u8>)>) {
            let mut page = Vec::new();
            clap_mangen::Man::new(command.clone())
                .render(&mut page)
                .expect("a man page renders");
            pages.push((format!("{name}.1"), page));
            for sub in command.get_subcommands() {
                if !sub.is_hide_set() && sub.get_name() != "help" {
                    render(&format!("{name}-{}", sub.get_name()), sub, pages);
                }
            }
        }
        let mut command = Cli::command();
        command.build();
        let mut pages = Vec::new();
        render("mpbridge", &command, &mut pages);
        pages
    }

    /// docs/man/ holds what the clap definitions give; with
    /// MPBRIDGE_WRITE_MAN=1 this test writes it.
    #[test]
    fn man_pages_are_those_of_the_command_line() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/man");
        let pages = man_pages();
        if std::env::var_os("MPBRIDGE_WRITE_MAN").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            for entry in std::fs::read_dir(&dir).unwrap() {
                std::fs::remove_file(entry.unwrap().path()).unwrap();
            }
            for (name, page) in &pages {
                std::fs::write(dir.join(name), page).unwrap();
            }
        }
        let regenerate = "regenerate them with \
                          MPBRIDGE_WRITE_MAN=1 cargo test -p mpbridge --bin mpbridge man_pages";
        for (name, page) in &pages {
            let committed = std::fs::read(dir.join(name)).unwrap_or_default();
            assert!(
                committed == *page,
                "docs/man/{name} is not what the command line gives: {regenerate}"
            );
        }
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let mut expected: Vec<String> = pages.into_iter().map(|(name, _)| name).collect();
        expected.sort();
        assert_eq!(names, expected, "docs/man/ has other pages: {regenerate}");
    }

    /// Every option of `run` is in each shell's completions.
    #[test]
    fn completions_offer_every_run_option() {
        let command = Cli::command();
        let run = command.find_subcommand("run").expect("run");
        let options: Vec<String> = run
            .get_arguments()
            .filter(|arg| !arg.is_hide_set())
            .filter_map(|arg| arg.get_long())
            .map(|long| format!("--{long}"))
            .collect();
        assert!(options.len() > 30, "{options:?}");
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut script = Vec::new();
            completions(shell, &mut script);
            let script = String::from_utf8(script).unwrap();
            for option in &options {
                // fish names options without their dashes.
                let bare = option.trim_start_matches('-');
                let found = match shell {
                    clap_complete::Shell::Fish => script.contains(&format!("-l {bare}")),
                    _ => script.contains(option.as_str()),
                };
                assert!(found, "{shell}: {option} missing");
            }
        }
    }
}
