//! The client side of the control socket: `mpbridge fdb ...`, `mpbridge
//! stats`. One request, one reply, then the reply printed as text or JSON.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use bridge::vlan::FdbVlan;

use crate::protocol::{self, default_socket, FdbEntry, ReplyLine, Request, RequestLine, VERSION};

/// How long the client waits for the daemon's reply.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// A failure, with the exit code it ends in.
pub struct Failure {
    /// 1: the daemon could not be reached or refused; 2: bad input.
    pub code: u8,
    /// One line.
    pub message: String,
}

impl Failure {
    fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

/// Sends `request` to the bridge at `socket` (named `name`) and returns the
/// reply's result, as the type that request is answered with.
pub fn call<T: serde::de::DeserializeOwned>(
    name: &str,
    socket: &Path,
    request: Request,
) -> Result<T, Failure> {
    let stream = connect(name, socket)?;
    stream
        .set_read_timeout(Some(REPLY_TIMEOUT))
        .map_err(|e| Failure::new(1, format!("{}: {e}", socket.display())))?;
    let (_, reply) = exchange(&stream, socket, request)?;
    match (reply.ok, reply.result, reply.error) {
        (true, Some(result), _) => serde_json::from_value(result)
            .map_err(|e| Failure::new(1, format!("{}: unreadable reply: {e}", socket.display()))),
        (_, _, Some(error)) => Err(Failure::new(1, error)),
        _ => Err(Failure::new(
            1,
            format!("{}: a reply without result or error", socket.display()),
        )),
    }
}

/// Sends one request line on `stream` and reads the reply line; returns
/// the reader too, which may hold what followed the reply.
fn exchange<'a>(
    stream: &'a UnixStream,
    socket: &Path,
    request: Request,
) -> Result<(BufReader<&'a UnixStream>, ReplyLine), Failure> {
    let shown = socket.display();
    let io_error = |e: std::io::Error| Failure::new(1, format!("{shown}: {e}"));
    let line = serde_json::to_string(&RequestLine {
        version: VERSION,
        request,
    })
    .expect("a request serialises");
    let mut writer = stream;
    // A bridge that refuses the client says why and closes at once, maybe
    // before the request is written: the reason is still there to read.
    let written = writer.write_all(format!("{line}\n").as_bytes());
    let mut reader = BufReader::new(stream);
    let mut reply = String::new();
    let read = reader.read_line(&mut reply);
    if reply.is_empty() {
        written.map_err(io_error)?;
        read.map_err(io_error)?;
        return Err(Failure::new(
            1,
            format!("{shown}: the bridge closed without a reply"),
        ));
    }
    let reply: ReplyLine = serde_json::from_str(&reply)
        .map_err(|e| Failure::new(1, format!("{shown}: unreadable reply: {e}")))?;
    Ok((reader, reply))
}

/// Starts a capture and copies its pcapng stream to `out` (a file, or
/// stdout) until the daemon ends it; then says on stderr what came.
pub fn capture(
    name: &str,
    socket: &Path,
    request: Request,
    out: Option<&Path>,
) -> Result<(), Failure> {
    let stream = connect(name, socket)?;
    // The reply line, then the stream, through one buffer.
    let (reader, reply) = exchange(&stream, socket, request)?;
    if !reply.ok {
        return Err(Failure::new(1, reply.error.unwrap_or_default()));
    }
    let summary = match out {
        Some(path) => {
            let file = std::fs::File::create(path)
                .map_err(|e| Failure::new(1, format!("cannot write {}: {e}", path.display())))?;
            crate::capture::receive(reader, file)
        }
        None => crate::capture::receive(reader, std::io::stdout().lock()),
    }
    .map_err(|e| Failure::new(1, e))?;
    eprintln!(
        "{} frames captured, {} lost to a slow reader",
        summary.frames, summary.lost
    );
    Ok(())
}

fn connect(name: &str, socket: &Path) -> Result<UnixStream, Failure> {
    let shown = socket.display();
    UnixStream::connect(socket).map_err(|e| match e.raw_os_error() {
        // Named by --name, or by the socket --ctl gave.
        Some(libc::ENOENT | libc::ECONNREFUSED) if socket == default_socket(name) => Failure::new(
            1,
            format!("no bridge named {name} is running ({shown}: {e})"),
        ),
        Some(libc::ENOENT | libc::ECONNREFUSED) => {
            Failure::new(1, format!("no bridge is listening on {shown} ({e})"))
        }
        Some(libc::EACCES | libc::EPERM) => Failure::new(
            1,
            format!("permission denied on {shown} (root or the bridge's control group may use it)"),
        ),
        _ => Failure::new(1, format!("cannot connect to {shown}: {e}")),
    })
}

/// Parses iproute2-style trailing words: `port PORT`, `vlan VID`, each at
/// most once, only those in `allowed`.
pub fn keywords(
    words: &[String],
    allowed: &[&str],
) -> Result<(Option<String>, Option<FdbVlan>), Failure> {
    let mut port = None;
    let mut vlan = None;
    let mut words = words.iter();
    while let Some(word) = words.next() {
        let value = |words: &mut std::slice::Iter<'_, String>| {
            words
                .next()
                .cloned()
                .ok_or_else(|| Failure::new(2, format!("'{word}' needs a value")))
        };
        match word.as_str() {
            "port" if allowed.contains(&"port") && port.is_none() => {
                port = Some(value(&mut words)?)
            }
            "vlan" if allowed.contains(&"vlan") && vlan.is_none() => {
                let text = value(&mut words)?;
                vlan = Some(
                    text.parse::<FdbVlan>()
                        .map_err(|e| Failure::new(2, e.to_string()))?,
                );
            }
            other => {
                return Err(Failure::new(
                    2,
                    format!("unexpected '{other}' (expected {})", allowed.join(" or ")),
                ))
            }
        }
    }
    Ok((port, vlan))
}

/// Prints `fdb show`'s entries, a line each.
pub fn print_fdb(entries: &[FdbEntry]) {
    for entry in entries {
        let dst = entry
            .dst
            .as_ref()
            .map_or(String::new(), |dst| format!(" dst {dst}"));
        println!(
            "{} port {} vlan {} {} age {}s{dst}",
            entry.mac, entry.port, entry.vlan, entry.state, entry.age_s
        );
    }
}

/// Prints multicast snooping's state as `bridge -s mdb show` does: a line
/// per group and port, then the router ports and the queriers.
pub fn print_mdb(mdb: &protocol::Mdb) {
    if !mdb.enabled {
        println!("snooping off (more groups than --mcast-hash-max): multicast floods");
    }
    for group in &mdb.groups {
        let vid = match group.vid {
            0 => String::new(),
            vid => format!(" vid {vid}"),
        };
        println!(
            "port {} grp {} {}{vid} timer {:.2}",
            group.port, group.grp, group.state, group.timer
        );
    }
    for router in &mdb.routers {
        let timer = router
            .timer
            .map_or(String::new(), |timer| format!(" timer {timer:.2}"));
        println!(
            "router port {} {} {}{timer}",
            router.port, router.family, router.kind
        );
    }
    for (family, querier) in [("ipv4", &mdb.querier.ipv4), ("ipv6", &mdb.querier.ipv6)] {
        let who = match (querier.own, &querier.address, &querier.port) {
            (true, _, _) => "this bridge".to_owned(),
            (false, Some(address), Some(port)) => format!("{address} on {port}"),
            (false, Some(address), None) => address.clone(),
            _ => "none".to_owned(),
        };
        println!(
            "{family} querier {who}, {}",
            if querier.present { "present" } else { "absent" }
        );
    }
    // Only the ports with a limit: the rest is as Linux prints it.
    for port in mdb.ports.iter().filter(|p| p.mcast_max_groups != 0) {
        println!(
            "port {} mcast_n_groups {} mcast_max_groups {} refused {}",
            port.port, port.mcast_n_groups, port.mcast_max_groups, port.mcast_max_groups_refused
        );
    }
}

/// Prints `stats` as text.
pub fn print_stats(stats: &protocol::Stats) {
    println!(
        "bridge {} lock {} workers {} up {}s",
        stats.name,
        stats.lock,
        stats.workers.len(),
        stats.uptime_s
    );
    for port in &stats.ports {
        println!(
            "  {}{}: link {} {}, {}",
            port.name,
            port.vlans
                .as_ref()
                .map_or(String::new(), |vlans| format!(" ({vlans})")),
            port.link,
            port.state,
            protocol::CounterLine(&port.counters)
        );
        if let (Some(n), Some(max), Some(refused)) = (
            port.mcast_n_groups,
            port.mcast_max_groups,
            port.mcast_max_groups_refused,
        ) {
            println!(
                "    mcast_n_groups {n}, mcast_max_groups {max}, refused at the limit {refused}"
            );
        }
    }
    for worker in &stats.workers {
        let stuck = match worker.stuck {
            true => format!(", STUCK (no heartbeat for {:.1} s)", worker.heartbeat_age_s),
            false => String::new(),
        };
        println!(
            "  worker {}: {} frames in {} batches, {:.1}% busy, stalls {}{stuck}",
            worker.id, worker.frames, worker.batches, worker.busy_percent, worker.stalls
        );
    }
    let fdb = &stats.fdb;
    println!(
        "  fdb: {} entries ({} learned, {} static, {} local; limit {}, ageing {}s), \
         learned {}, moved {}, refused {}, aged {}, own sources {}",
        fdb.entries,
        fdb.learned,
        fdb.r#static,
        fdb.local,
        fdb.max_entries,
        fdb.age_s,
        fdb.totals.learned,
        fdb.totals.moved,
        fdb.totals.refused,
        fdb.totals.aged,
        fdb.totals.own_sources
    );
    let lock = &stats.lockstat;
    if lock.enabled {
        println!(
            "  lock: {} acquisitions, {} contended, {} ns waiting",
            lock.acquisitions, lock.contended, lock.wait_ns
        );
    } else {
        println!("  lock: statistics off (run with --lockstat)");
    }
    let q = &stats.owner_queue;
    println!(
        "  owner queue: waiting {} urgent, {} control, {} mcast; shed {} mcast over budget, \
         {} mcast queue full, {} urgent queue full, {} control queue full",
        q.urgent_queued,
        q.control_queued,
        q.mcast_queued,
        q.mcast_over_budget,
        q.mcast_queue_full,
        q.urgent_queue_full,
        q.control_queue_full
    );
}
