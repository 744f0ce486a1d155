//! The runtime's CNI_* variables, checked per command as the spec needs
//! them, and the configuration's checks beyond its shape.

use std::fmt;
use std::path::PathBuf;

use crate::spec::{code, Error, NetConf};

/// CNI_COMMAND.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Attach a container.
    Add,
    /// Detach it.
    Del,
    /// Check an attachment.
    Check,
    /// Whether the plugin can attach containers now.
    Status,
    /// Remove what no valid attachment needs.
    Gc,
    /// The versions spoken.
    Version,
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Status => "STATUS",
            Command::Gc => "GC",
            Command::Version => "VERSION",
        })
    }
}

/// CNI_COMMAND, read and known.
pub fn command() -> Result<Command, Error> {
    let text = std::env::var("CNI_COMMAND").map_err(|_| {
        Error::new(
            code::INVALID_ENVIRONMENT,
            "required environment variable CNI_COMMAND missing",
        )
    })?;
    Ok(match text.as_str() {
        "ADD" => Command::Add,
        "DEL" => Command::Del,
        "CHECK" => Command::Check,
        "STATUS" => Command::Status,
        "GC" => Command::Gc,
        "VERSION" => Command::Version,
        other => {
            return Err(Error::new(
                code::INVALID_ENVIRONMENT,
                format!("unknown CNI_COMMAND {other:?}"),
            ))
        }
    })
}

/// The variables of one call.
#[derive(Debug, Clone)]
pub struct Env {
    /// CNI_CONTAINERID (empty for STATUS and GC).
    pub container_id: String,
    /// CNI_NETNS; empty where DEL was not given one.
    pub netns: String,
    /// CNI_IFNAME.
    pub ifname: String,
    /// CNI_PATH's directories, where IPAM plugins are looked for.
    pub path: Vec<PathBuf>,
    /// CNI_ARGS, passed on to IPAM.
    pub args: String,
}

impl Env {
    /// The variables `command` needs, each present and not empty.
    pub fn read(command: Command) -> Result<Env, Error> {
        let needed: &[&str] = match command {
            Command::Add | Command::Check => {
                &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"]
            }
            Command::Del => &["CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"],
            Command::Gc => &["CNI_PATH"],
            Command::Status | Command::Version => &[],
        };
        let var = |name: &str| std::env::var(name).unwrap_or_default();
        let missing: Vec<&str> = needed
            .iter()
            .copied()
            .filter(|name| var(name).is_empty())
            .collect();
        if !missing.is_empty() {
            return Err(Error::new(
                code::INVALID_ENVIRONMENT,
                format!(
                    "required environment variables missing: {}",
                    missing.join(", ")
                ),
            ));
        }
        Ok(Env {
            container_id: var("CNI_CONTAINERID"),
            netns: var("CNI_NETNS"),
            ifname: var("CNI_IFNAME"),
            path: std::env::split_paths(&var("CNI_PATH"))
                .filter(|dir| !dir.as_os_str().is_empty())
                .collect(),
            args: var("CNI_ARGS"),
        })
    }
}

/// The configuration, checked beyond its shape: one of `bridge` and
/// `ctl`, a VLAN and an MTU in range (0 is none for both), an IPAM
/// section without a type read as none.
pub fn checked(mut conf: NetConf) -> Result<NetConf, Error> {
    let bad = |msg: String| Err(Error::new(code::INVALID_NETWORK_CONFIG, msg));
    if conf.bridge.is_some() && conf.ctl.is_some() {
        return bad("\"bridge\" and \"ctl\" exclude each other".into());
    }
    if conf.bridge.is_none() && conf.ctl.is_none() {
        conf.bridge = Some(crate::spec::DEFAULT_BRIDGE.to_owned());
    }
    // 0 is no VLAN, as the reference plugin reads it.
    conf.vlan = conf.vlan.filter(|&vlan| vlan != 0);
    if let Some(vlan) = conf.vlan {
        if !(1..=4094).contains(&vlan) {
            return bad(format!("\"vlan\" {vlan}: a VLAN is 1 to 4094"));
        }
    }
    // 0 is no MTU, as the reference reads it.
    conf.mtu = conf.mtu.filter(|&mtu| mtu != 0);
    if let Some(mtu) = conf.mtu {
        if !(68..=65535).contains(&mtu) {
            return bad(format!("\"mtu\" {mtu}: 68 to 65535"));
        }
    }
    // An IPAM section without a type is none (a layer-2 network), as the
    // reference reads it.
    if conf.ipam.as_ref().is_some_and(|ipam| {
        ipam.get("type")
            .and_then(|t| t.as_str())
            .is_none_or(str::is_empty)
    }) {
        conf.ipam = None;
    }
    Ok(conf)
}
