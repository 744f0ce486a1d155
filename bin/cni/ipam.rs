//! Delegation to the IPAM plugin the configuration names: found in
//! CNI_PATH, asked for the versions it speaks, and called with the newest
//! version both speak (Debian's host-local, for one, stops at 1.0.0 and
//! refuses a 1.1.0 configuration), its result read back in any layout.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command as Process, Stdio};

use serde_json::{json, Value};

use crate::env::{Command, Env};
use crate::spec::{self, code, Error, NetConf, Outcome};

/// An IPAM plugin, ready to call.
#[derive(Debug)]
pub struct Ipam {
    kind: String,
    program: PathBuf,
    /// The version it is called with.
    version: String,
    /// Whether it speaks 1.1.0, and so STATUS and GC.
    speaks_1_1: bool,
}

impl Ipam {
    /// The configuration's IPAM plugin; `None` where it names none.
    pub fn find(conf: &NetConf, env: &Env) -> Result<Option<Ipam>, Error> {
        let Some(kind) = conf
            .ipam
            .as_ref()
            .and_then(|ipam| ipam.get("type")?.as_str())
        else {
            return Ok(None);
        };
        if kind.contains('/') {
            return Err(Error::new(
                code::INVALID_NETWORK_CONFIG,
                format!("ipam type {kind:?} is not a plugin name"),
            ));
        }
        let program = env
            .path
            .iter()
            .map(|dir| dir.join(kind))
            .find(|path| path.is_file())
            .ok_or_else(|| {
                Error::internal(format!(
                    "failed to find plugin {kind:?} in path {:?}",
                    env.path
                ))
            })?;
        let mut ipam = Ipam {
            kind: kind.to_owned(),
            program,
            version: conf.cni_version.clone(),
            speaks_1_1: false,
        };
        let theirs = ipam.versions(env, &conf.cni_version)?;
        if let Some(newest) = spec::SUPPORTED
            .iter()
            .rev()
            .find(|version| theirs.iter().any(|v| v == *version))
        {
            (*newest).clone_into(&mut ipam.version);
        }
        ipam.speaks_1_1 = theirs.iter().any(|v| v == "1.1.0");
        Ok(Some(ipam))
    }

    /// Whether it takes STATUS and GC.
    pub fn speaks_1_1(&self) -> bool {
        self.speaks_1_1
    }

    /// ADD: its addresses, routes and DNS.
    pub fn add(&self, raw: &Value, env: &Env) -> Result<Outcome, Error> {
        let value = self
            .call(Command::Add, raw, env)?
            .ok_or_else(|| Error::internal(format!("ipam {}: ADD printed nothing", self.kind)))?;
        Outcome::from_any(value).map_err(|e| Error::internal(format!("ipam {}: {e}", self.kind)))
    }

    /// Any command without a result: DEL, CHECK, STATUS, GC.
    pub fn call_quiet(&self, command: Command, raw: &Value, env: &Env) -> Result<(), Error> {
        self.call(command, raw, env).map(drop)
    }

    /// The versions it lists, from VERSION; the configuration's alone
    /// where it does not answer (plugins older than VERSION).
    fn versions(&self, env: &Env, asked: &str) -> Result<Vec<String>, Error> {
        let answer = self.exec(Command::Version, &json!({ "cniVersion": asked }), env);
        Ok(match answer {
            Ok(Some(info)) => info
                .get("supportedVersions")
                .and_then(Value::as_array)
                .map(|versions| {
                    versions
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_else(|| vec![asked.to_owned()]),
            _ => vec![asked.to_owned()],
        })
    }

    /// Calls it with `raw`, its cniVersion (and prevResult's layout) made
    /// the one it speaks.
    fn call(&self, command: Command, raw: &Value, env: &Env) -> Result<Option<Value>, Error> {
        let mut conf = raw.clone();
        conf["cniVersion"] = self.version.clone().into();
        if let Some(prev) = conf.get("prevResult").cloned() {
            match Outcome::from_any(prev) {
                Ok(prev) => conf["prevResult"] = prev.in_version(&self.version),
                // DEL must release the lease whatever the runtime kept:
                // the prevResult goes on as it came.
                Err(_) if command == Command::Del => {}
                Err(e) => {
                    return Err(Error::new(
                        code::INVALID_NETWORK_CONFIG,
                        format!("prevResult: {e}"),
                    ))
                }
            }
        }
        self.exec(command, &conf, env)
    }

    /// Runs it: CNI_COMMAND set to `command`, the other CNI_* variables
    /// passed on, `stdin` on its stdin. Its error object becomes ours.
    fn exec(&self, command: Command, stdin: &Value, env: &Env) -> Result<Option<Value>, Error> {
        let mut child = Process::new(&self.program)
            .env("CNI_COMMAND", command.to_string())
            .env("CNI_CONTAINERID", &env.container_id)
            .env("CNI_NETNS", &env.netns)
            .env("CNI_IFNAME", &env.ifname)
            .env("CNI_ARGS", &env.args)
            .env(
                "CNI_PATH",
                std::env::join_paths(&env.path).unwrap_or_default(),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| {
                Error::internal(format!(
                    "ipam {}: {}: {e}",
                    self.kind,
                    self.program.display()
                ))
            })?;
        if let Some(mut input) = child.stdin.take() {
            // A plugin that exits without reading says why on stdout.
            let _ = input.write_all(stdin.to_string().as_bytes());
        }
        let output = child
            .wait_with_output()
            .map_err(|e| Error::internal(format!("ipam {}: {e}", self.kind)))?;
        let printed: Option<Value> = serde_json::from_slice(&output.stdout).ok();
        if output.status.success() {
            return Ok(printed);
        }
        let mut error = Error::internal(format!(
            "ipam {}: {command} failed ({})",
            self.kind, output.status
        ));
        if let Some(object) = printed {
            if let Some(code) = object.get("code").and_then(Value::as_u64) {
                error.code = u32::try_from(code).unwrap_or(spec::code::INTERNAL);
            }
            if let Some(msg) = object.get("msg").and_then(Value::as_str) {
                error.msg = format!("ipam {}: {msg}", self.kind);
            }
            if let Some(details) = object.get("details").and_then(Value::as_str) {
                details.clone_into(&mut error.details);
            }
        }
        Err(error)
    }
}
