//! mpbridge-cni: the CNI plugin that attaches containers to an mpbridge
//! bridge (installed in a CNI bin directory as `mpbridge`). A runtime runs
//! it with CNI_* variables and a network configuration on stdin; it
//! prints a result or the spec's error object. README.md shows the
//! configuration, docs/design.md why a veth and a raw port.

mod add;
mod check;
mod control;
mod del;
mod env;
mod gc;
mod ipam;
mod link;
mod spec;

// The daemon's control protocol, shared with it source and all.
#[allow(dead_code)]
#[path = "../mpbridge/port_options.rs"]
mod port_options;
#[allow(dead_code)]
#[path = "../mpbridge/ports.rs"]
mod ports;
#[allow(dead_code)]
#[path = "../mpbridge/protocol.rs"]
mod protocol;

use std::io::{Read, Write};
use std::process::ExitCode;

use serde_json::Value;

use env::{Command, Env};
use spec::{code, Error, NetConf};

fn main() -> ExitCode {
    let mut version = spec::CURRENT.to_owned();
    let outcome = run(&mut version);
    let mut stdout = std::io::stdout().lock();
    let (text, exit) = match outcome {
        Ok(Some(value)) => (value.to_string(), ExitCode::SUCCESS),
        Ok(None) => (String::new(), ExitCode::SUCCESS),
        Err(error) => (error.to_json(&version).to_string(), ExitCode::FAILURE),
    };
    if !text.is_empty() {
        // Nowhere to say more if stdout is gone.
        let _ = writeln!(stdout, "{text}");
    }
    exit
}

/// Runs the command the environment names; `version` becomes the
/// configuration's, for the error object.
fn run(version: &mut String) -> Result<Option<Value>, Error> {
    let command = env::command()?;
    let mut stdin = Vec::new();
    std::io::stdin()
        .read_to_end(&mut stdin)
        .map_err(|e| Error::new(code::IO_FAILURE, format!("reading stdin: {e}")))?;
    if command == Command::Version {
        // Any configuration, or none: the answer echoes its version.
        let asked = serde_json::from_slice::<Value>(&stdin)
            .ok()
            .and_then(|v| v.get("cniVersion")?.as_str().map(str::to_owned))
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| spec::CURRENT.to_owned());
        return Ok(Some(spec::version_info(&asked)));
    }
    let env = Env::read(command)?;
    let raw: Value = serde_json::from_slice(&stdin).map_err(|e| {
        Error::new(
            code::DECODING_FAILURE,
            format!("the network configuration is not JSON: {e}"),
        )
    })?;
    let asked = raw
        .get("cniVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            Error::new(
                code::INVALID_NETWORK_CONFIG,
                "the network configuration has no cniVersion",
            )
        })?;
    if !spec::SUPPORTED.contains(&asked) {
        return Err(Error::new(
            code::INCOMPATIBLE_VERSION,
            format!(
                "incompatible CNI versions: config is {asked:?}, plugin supports {:?}",
                spec::SUPPORTED
            ),
        ));
    }
    asked.clone_into(version);
    let needs = match command {
        Command::Check => "0.4.0",
        Command::Status | Command::Gc => "1.1.0",
        _ => "0.0.0",
    };
    if !spec::at_least(version, needs) {
        return Err(Error::new(
            code::INCOMPATIBLE_VERSION,
            format!("{command} needs cniVersion {needs} or newer, the configuration has {version}"),
        ));
    }
    let conf: NetConf = serde_json::from_value(raw.clone()).map_err(|e| {
        Error::new(
            code::INVALID_NETWORK_CONFIG,
            format!("the network configuration: {e}"),
        )
    })?;
    let conf = env::checked(conf)?;
    match command {
        Command::Add => add::add(&conf, &raw, &env).map(Some),
        Command::Del => del::del(&conf, &raw, &env).map(|()| None),
        Command::Check => check::check(&conf, &raw, &env).map(|()| None),
        Command::Status => gc::status(&conf, &raw, &env).map(|()| None),
        Command::Gc => gc::gc(&conf, &raw, &env).map(|()| None),
        Command::Version => unreachable!("answered above"),
    }
}
