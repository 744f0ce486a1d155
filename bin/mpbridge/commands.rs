//! The client's commands: each sends one typed request to a running
//! bridge and prints the typed reply, as text or (`-j`) as JSON, from the
//! same value.

use std::path::Path;

use locks::StrategyKind;

use crate::cli::{Command, FdbCommand, LockCommand, MdbCommand, PortCommand};
use crate::client::{self, Failure};
use crate::ports::PortSpec;
use crate::protocol::{self, Request};

/// Runs one client command against the bridge at `socket`.
pub fn operate(name: &str, socket: &Path, command: Command) -> Result<(), Failure> {
    match command {
        Command::Run(_) | Command::Completions { .. } => unreachable!("handled by main"),
        Command::Stats { json } => {
            let stats: protocol::Stats = client::call(name, socket, Request::Stats)?;
            if json {
                print_json(&stats);
            } else {
                client::print_stats(&stats);
            }
            Ok(())
        }
        Command::Capture {
            port,
            direction,
            count,
            file,
            queue,
        } => {
            let request = Request::Capture {
                port,
                direction,
                count,
                queue,
            };
            client::capture(name, socket, request, file.as_deref())
        }
        Command::Port(PortCommand::Add {
            port,
            network,
            container,
            ifname,
        }) => {
            let port = PortSpec::parse(&port).map_err(|message| Failure { code: 2, message })?;
            let owner = match (network, container, ifname) {
                (Some(network), Some(container), Some(ifname)) => Some(
                    protocol::PortOwner::new(network, container, ifname)
                        .map_err(|message| Failure { code: 2, message })?,
                ),
                _ => None,
            };
            let request = Request::PortAdd { port, owner };
            let added: protocol::PortAdded = client::call(name, socket, request)?;
            println!("added {}", added.port);
            Ok(())
        }
        Command::Port(PortCommand::Del { port }) => {
            let removed: protocol::PortRemoved =
                client::call(name, socket, Request::PortDel { port })?;
            println!("removed {}", removed.removed);
            Ok(())
        }
        Command::Port(PortCommand::Enable { port }) => {
            let enabled: protocol::PortEnabled =
                client::call(name, socket, Request::PortEnable { port })?;
            match enabled.was_disabled {
                true => println!("enabled {}", enabled.enabled),
                false => println!("{} was not disabled", enabled.enabled),
            }
            Ok(())
        }
        Command::Port(PortCommand::Show { json }) => {
            let ports: Vec<protocol::PortInfo> = client::call(name, socket, Request::PortShow)?;
            if json {
                print_json(&ports);
            } else {
                for port in &ports {
                    let mut stp = String::new();
                    if let Some(s) = &port.stp {
                        if let (Some(role), Some(state)) = (&s.role, &s.state) {
                            stp += &format!(" stp {role} {state}");
                        }
                        if let Some(tripped) = s.guard_tripped {
                            stp += if tripped { " guard tripped" } else { " guard" };
                        }
                    }
                    let groups = port
                        .mcast_n_groups
                        .map_or(String::new(), |n| format!(" mcast_n_groups {n}"));
                    let owner = port.owner.as_ref().map_or(String::new(), |o| {
                        format!(
                            " owner network {} container {} ifname {}",
                            o.network, o.container, o.ifname
                        )
                    });
                    println!(
                        "{}: {} link {}{stp}{groups}{owner} options {}",
                        port.id, port.name, port.link, port.options
                    );
                }
            }
            Ok(())
        }
        Command::Lock(LockCommand::Set { strategy }) => {
            let lock = strategy.parse::<StrategyKind>().map_err(|e| Failure {
                code: 2,
                message: e.to_string(),
            })?;
            let switched: protocol::LockSwitched =
                client::call(name, socket, Request::LockSet { lock })?;
            println!(
                "lock {}: {} entries moved, forwarding paused {} us",
                switched.lock, switched.entries, switched.pause_us
            );
            Ok(())
        }
        Command::Reload => {
            let reloaded: protocol::Reloaded = client::call(name, socket, Request::Reload)?;
            println!(
                "reloaded: ports added [{}], removed [{}]; static entries added {}, removed {}",
                reloaded.ports_added.join(" "),
                reloaded.ports_removed.join(" "),
                reloaded.static_added,
                reloaded.static_removed
            );
            if !reloaded.ports_changed.is_empty() {
                println!("ports changed: {}", reloaded.ports_changed.join(" "));
            }
            if !reloaded.needs_restart.is_empty() {
                println!(
                    "changed, needs a restart to apply: {}",
                    reloaded.needs_restart.join(" ")
                );
            }
            Ok(())
        }
        Command::Mdb(MdbCommand::Show { json }) => {
            let mdb: protocol::Mdb = client::call(name, socket, Request::MdbShow)?;
            if json {
                print_json(&mdb);
            } else {
                client::print_mdb(&mdb);
            }
            Ok(())
        }
        Command::Fdb(FdbCommand::Show { port, vlan, json }) => {
            let entries: Vec<protocol::FdbEntry> =
                client::call(name, socket, Request::FdbShow { port, vlan })?;
            if json {
                print_json(&entries);
            } else {
                client::print_fdb(&entries);
            }
            Ok(())
        }
        Command::Fdb(FdbCommand::Add { mac, mut words }) => {
            // `dst IP` (a VXLAN port's VTEP), anywhere among the words.
            let dst = match words.iter().position(|w| w == "dst") {
                Some(at) if at + 1 < words.len() => {
                    let ip = words.remove(at + 1);
                    words.remove(at);
                    Some(ip)
                }
                Some(_) => {
                    return Err(Failure {
                        code: 2,
                        message: "'dst' needs a value".to_owned(),
                    })
                }
                None => None,
            };
            let (port, vlan) = client::keywords(&words, &["port", "vlan"])?;
            let port = port.ok_or_else(|| Failure {
                code: 2,
                message: "fdb add needs 'port PORT'".to_owned(),
            })?;
            let vlan = vlan.unwrap_or_default();
            let request = Request::FdbAdd {
                mac,
                port,
                vlan,
                dst,
            };
            client::call::<protocol::FdbAdded>(name, socket, request).map(|_| ())
        }
        Command::Fdb(FdbCommand::Del { mac, words }) => {
            let (_, vlan) = client::keywords(&words, &["vlan"])?;
            let vlan = vlan.unwrap_or_default();
            client::call::<protocol::FdbRemoved>(name, socket, Request::FdbDel { mac, vlan })
                .map(|_| ())
        }
        Command::Fdb(FdbCommand::Flush { words }) => {
            let (port, _) = client::keywords(&words, &["port"])?;
            let flushed: protocol::Flushed =
                client::call(name, socket, Request::FdbFlush { port })?;
            println!("flushed {} entries", flushed.flushed);
            Ok(())
        }
    }
}

/// Prints a reply's value as one line of JSON.
fn print_json<T: serde::Serialize>(value: &T) {
    // Serialising our own types cannot fail.
    println!(
        "{}",
        serde_json::to_string(value).expect("a reply serialises")
    );
}
