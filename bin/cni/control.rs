//! The bridge's control socket, as the plugin uses it: whether the bridge
//! answers, its ports with their owners, adding a container's port (and
//! the static entry macspoofchk needs) and removing it. The requests are
//! the daemon's own protocol types (docs/control.md).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use bridge::vlan::FdbVlan;
use serde::de::DeserializeOwned;

use crate::ports::PortSpec;
use crate::protocol::{self, PortInfo, PortOwner, ReplyLine, Request, RequestLine};
use crate::spec::{code, Error, NetConf};

/// How long a request may take: a port add waits for every worker.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// What a request to the bridge can end in, besides its result.
#[derive(Debug)]
pub enum Failure {
    /// Nothing listens on the socket: the bridge does not run.
    Unreachable(String),
    /// The bridge answered no, saying why.
    Refused(String),
}

impl Failure {
    /// As a CNI error: code 50 when the bridge does not run.
    pub fn into_error(self) -> Error {
        match self {
            Failure::Unreachable(msg) => Error::new(code::NOT_AVAILABLE, msg),
            Failure::Refused(msg) => Error::internal(msg),
        }
    }
}

/// A bridge, by its control socket.
#[derive(Debug, Clone)]
pub struct Bridge {
    socket: PathBuf,
}

impl Bridge {
    /// The configuration's bridge: `ctl`, or the socket of `bridge`.
    pub fn of(conf: &NetConf) -> Bridge {
        let socket = match (&conf.ctl, &conf.bridge) {
            (Some(ctl), _) => PathBuf::from(ctl),
            (None, Some(name)) => protocol::default_socket(name),
            (None, None) => protocol::default_socket(crate::spec::DEFAULT_BRIDGE),
        };
        Bridge { socket }
    }

    /// Whether it answers (a `stats` request).
    pub fn answers(&self) -> Result<(), Failure> {
        self.call::<serde_json::Value>(Request::Stats).map(drop)
    }

    /// Its ports.
    pub fn ports(&self) -> Result<Vec<PortInfo>, Failure> {
        self.call(Request::PortShow)
    }

    /// Adds port `spec` for `owner`.
    pub fn add_port(&self, spec: &str, owner: PortOwner) -> Result<(), Failure> {
        let port = PortSpec::parse(spec).map_err(Failure::Refused)?;
        self.call::<serde_json::Value>(Request::PortAdd {
            port,
            owner: Some(owner),
        })
        .map(drop)
    }

    /// A static entry for `mac` on `port`, in `vlan` (0 untagged).
    pub fn add_static(&self, mac: &str, port: &str, vlan: u16) -> Result<(), Failure> {
        let mac = mac
            .parse()
            .map_err(|e| Failure::Refused(format!("{mac}: {e}")))?;
        let vlan = FdbVlan::new(vlan).unwrap_or(FdbVlan::UNTAGGED);
        self.call::<serde_json::Value>(Request::FdbAdd {
            mac,
            port: port.to_owned(),
            vlan,
            dst: None,
        })
        .map(drop)
    }

    /// Removes `port`.
    pub fn del_port(&self, port: &str) -> Result<(), Failure> {
        self.call::<serde_json::Value>(Request::PortDel {
            port: port.to_owned(),
        })
        .map(drop)
    }

    /// One request, one reply.
    fn call<T: DeserializeOwned>(&self, request: Request) -> Result<T, Failure> {
        let socket = self.socket.display();
        let stream = UnixStream::connect(&self.socket).map_err(|e| {
            Failure::Unreachable(format!("the bridge at {socket} does not answer: {e}"))
        })?;
        let io = |e: std::io::Error| Failure::Refused(format!("the bridge at {socket}: {e}"));
        stream.set_read_timeout(Some(ANSWER_WITHIN)).map_err(io)?;
        stream.set_write_timeout(Some(ANSWER_WITHIN)).map_err(io)?;
        let mut line = serde_json::to_vec(&RequestLine {
            version: protocol::VERSION,
            request,
        })
        .map_err(|e| Failure::Refused(e.to_string()))?;
        line.push(b'\n');
        (&stream).write_all(&line).map_err(io)?;
        let mut answer = String::new();
        BufReader::new(&stream).read_line(&mut answer).map_err(io)?;
        let reply: ReplyLine = serde_json::from_str(&answer)
            .map_err(|e| Failure::Refused(format!("the bridge at {socket} answered {e}")))?;
        if !reply.ok {
            return Err(Failure::Refused(format!(
                "the bridge at {socket}: {}",
                reply.error.unwrap_or_default()
            )));
        }
        serde_json::from_value(reply.result.unwrap_or_default())
            .map_err(|e| Failure::Refused(format!("the bridge at {socket} answered {e}")))
    }
}
