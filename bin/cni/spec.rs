//! The CNI wire types the plugin reads and writes (spec 1.1.0, with the
//! result layout of 0.3.x and 0.4.0 for runtimes that ask for those), the
//! spec's error object and its codes, and the versions the plugin speaks.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// The versions the plugin answers for, oldest first (VERSION lists them).
pub const SUPPORTED: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// The newest of them, for errors about a configuration without one.
pub const CURRENT: &str = "1.1.0";

/// The spec's error codes that the plugin gives.
pub mod code {
    /// The configuration's cniVersion is not one the plugin speaks, or
    /// the command needs a newer one.
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    /// A CNI_* variable is missing or wrong, or the command is unknown.
    pub const INVALID_ENVIRONMENT: u32 = 4;
    /// Reading or writing failed.
    pub const IO_FAILURE: u32 = 5;
    /// Standard input is not JSON.
    pub const DECODING_FAILURE: u32 = 6;
    /// The configuration has the wrong shape.
    pub const INVALID_NETWORK_CONFIG: u32 = 7;
    /// The bridge does not answer: it cannot take containers now.
    pub const NOT_AVAILABLE: u32 = 50;
    /// Anything else (the spec leaves 100 and up to plugins).
    pub const INTERNAL: u32 = 100;
}

/// A CNI error: printed on stdout, as the spec's error object, with a
/// non-zero exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// One of [`code`]'s.
    pub code: u32,
    /// What went wrong, in a line.
    pub msg: String,
    /// More, where there is more.
    pub details: String,
}

impl Error {
    /// An error of `code`.
    pub fn new(code: u32, msg: impl Into<String>) -> Error {
        Error {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    /// An error of [`code::INTERNAL`].
    pub fn internal(msg: impl Into<String>) -> Error {
        Error::new(code::INTERNAL, msg)
    }

    /// The error object for a configuration of `version`.
    pub fn to_json(&self, version: &str) -> Value {
        let mut object = json!({"cniVersion": version, "code": self.code, "msg": self.msg});
        if !self.details.is_empty() {
            object["details"] = self.details.clone().into();
        }
        object
    }
}

/// A version's parts, for ordering ("1.0.0" < "1.1.0").
pub fn parse_version(version: &str) -> Option<(u32, u32, u32)> {
    let mut parts = version.split('.').map(|part| part.parse::<u32>().ok());
    let version = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(version)
}

/// Whether `version` is at least `least`; false when either is not a
/// version.
pub fn at_least(version: &str, least: &str) -> bool {
    matches!((parse_version(version), parse_version(least)), (Some(a), Some(b)) if a >= b)
}

/// The network configuration: one plugin's entry of a conflist, with the
/// list's cniVersion and name filled in by the runtime. The keys are the
/// reference `bridge` plugin's where it has them.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetConf {
    /// The version the runtime speaks.
    pub cni_version: String,
    /// The network's name.
    pub name: String,
    /// The bridge's `--name`, whose socket is /run/mpbridge/NAME.sock.
    #[serde(default)]
    pub bridge: Option<String>,
    /// The bridge's control socket, instead of its name.
    #[serde(default)]
    pub ctl: Option<String>,
    /// The IPAM plugin's configuration.
    #[serde(default)]
    pub ipam: Option<Map<String, Value>>,
    /// The container's port is an access port of this VLAN.
    #[serde(default)]
    pub vlan: Option<u16>,
    /// The port is isolated: it reaches only ports that are not.
    #[serde(default)]
    pub isolated: bool,
    /// Frames from another source MAC than the container's are dropped.
    #[serde(default)]
    pub macspoofchk: bool,
    /// The MTU of both ends of the veth.
    #[serde(default)]
    pub mtu: Option<u32>,
    /// A frame may leave by the port it came in by.
    #[serde(default)]
    pub hairpin_mode: bool,
    /// The port's receive ring per worker (`ring=` of a raw port).
    #[serde(default)]
    pub ring: Option<String>,
    /// DNS settings for the result (the reference's `dns`); IPAM's when
    /// absent.
    #[serde(default)]
    pub dns: Option<Dns>,
    /// The previous plugin's result, in a chain (CHECK needs it).
    #[serde(default)]
    pub prev_result: Option<Value>,
}

/// The default bridge name, the daemon's default `--name`.
pub const DEFAULT_BRIDGE: &str = "mpbridge";

/// A result as 1.0.0 and 1.1.0 write it (the two layouts are one); also
/// what IPAM gives, without interfaces.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Interfaces made or changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
    /// Addresses given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<IpConfig>,
    /// Routes made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    /// DNS settings for the container.
    #[serde(default, skip_serializing_if = "Dns::is_empty")]
    pub dns: Dns,
}

/// An interface of a result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    /// Its name.
    pub name: String,
    /// Its MAC address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    /// Its MTU (1.x only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// The namespace it is in, for the container's; empty for the host's.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
}

/// An address of a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    /// With its prefix: "198.18.0.5/24".
    pub address: String,
    /// The gateway of its subnet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
    /// Its interface, an index into `interfaces`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<usize>,
}

impl IpConfig {
    /// The address and prefix length; `None` when it is not a CIDR.
    pub fn cidr(&self) -> Option<(IpAddr, u8)> {
        cidr(&self.address)
    }
}

/// A route of a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// Its destination, "0.0.0.0/0".
    pub dst: String,
    /// Its gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
    /// 1.1.0's further route fields (mtu, advmss, priority, table,
    /// scope), kept as they came.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// DNS settings of a result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    /// Name servers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    /// The local domain.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    /// Search domains.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    /// Resolver options.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Dns {
    fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.is_empty()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

/// An address with its prefix length, from "ADDRESS/LEN".
pub fn cidr(text: &str) -> Option<(IpAddr, u8)> {
    let (address, len) = text.split_once('/')?;
    let address: IpAddr = address.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    let max = if address.is_ipv4() { 32 } else { 128 };
    (len <= max).then_some((address, len))
}

impl Outcome {
    /// A result of any version read as 1.x: 0.x's `ips[].version`
    /// dropped (the address says it), its interface index kept.
    pub fn from_any(mut value: Value) -> Result<Outcome, String> {
        if let Some(ips) = value.get_mut("ips").and_then(Value::as_array_mut) {
            for ip in ips {
                if let Some(ip) = ip.as_object_mut() {
                    ip.remove("version");
                }
            }
        }
        let outcome: Outcome =
            serde_json::from_value(value).map_err(|error| format!("a result: {error}"))?;
        if let Some(bad) = outcome.ips.iter().find(|ip| ip.cidr().is_none()) {
            return Err(format!(
                "a result's address {:?} is not a CIDR",
                bad.address
            ));
        }
        Ok(outcome)
    }

    /// The result in the layout of `version`: 1.x as it is; 0.3.x and
    /// 0.4.0 with `ips[].version` ("4" or "6"), interfaces of name, mac
    /// and sandbox, and routes of dst and gw (as the reference
    /// conversion writes them, less the 1.1 route fields it lets through).
    pub fn in_version(&self, version: &str) -> Value {
        if at_least(version, "1.0.0") {
            let mut value = serde_json::to_value(self).unwrap_or_else(|_| json!({}));
            value["cniVersion"] = version.into();
            return value;
        }
        let mut out = json!({"cniVersion": version});
        if !self.interfaces.is_empty() {
            let interfaces: Vec<Value> = self
                .interfaces
                .iter()
                .map(|i| {
                    let mut o = json!({"name": i.name});
                    if !i.mac.is_empty() {
                        o["mac"] = i.mac.clone().into();
                    }
                    if !i.sandbox.is_empty() {
                        o["sandbox"] = i.sandbox.clone().into();
                    }
                    o
                })
                .collect();
            out["interfaces"] = interfaces.into();
        }
        if !self.ips.is_empty() {
            let ips: Vec<Value> = self
                .ips
                .iter()
                .map(|ip| {
                    let v6 = ip.cidr().is_some_and(|(a, _)| a.is_ipv6());
                    let mut o =
                        json!({"version": if v6 { "6" } else { "4" }, "address": ip.address});
                    if let Some(gateway) = ip.gateway {
                        o["gateway"] = gateway.to_string().into();
                    }
                    if let Some(interface) = ip.interface {
                        o["interface"] = interface.into();
                    }
                    o
                })
                .collect();
            out["ips"] = ips.into();
        }
        if !self.routes.is_empty() {
            let routes: Vec<Value> = self
                .routes
                .iter()
                .map(|r| {
                    let mut o = json!({"dst": r.dst});
                    if let Some(gw) = r.gw {
                        o["gw"] = gw.to_string().into();
                    }
                    o
                })
                .collect();
            out["routes"] = routes.into();
        }
        if !self.dns.is_empty() {
            out["dns"] = serde_json::to_value(&self.dns).unwrap_or_default();
        }
        out
    }
}

impl Outcome {
    /// This result after `prev`, the result of the plugins before this
    /// one in a chain, which a plugin must pass on: `prev`'s interfaces,
    /// addresses and routes first, then these (their interface indexes
    /// shifted past `prev`'s interfaces); these DNS settings where there
    /// are any.
    pub fn after(mut self, mut prev: Outcome) -> Outcome {
        let shift = prev.interfaces.len();
        for ip in &mut self.ips {
            ip.interface = ip.interface.map(|i| i + shift);
        }
        prev.interfaces.append(&mut self.interfaces);
        prev.ips.append(&mut self.ips);
        prev.routes.append(&mut self.routes);
        if !self.dns.is_empty() {
            prev.dns = self.dns;
        }
        prev
    }
}

/// VERSION's answer to a configuration of `version`.
pub fn version_info(version: &str) -> Value {
    json!({"cniVersion": version, "supportedVersions": SUPPORTED})
}

/// One attachment GC keeps (`cni.dev/valid-attachments`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
pub struct Attachment {
    /// The container's id.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// Its interface's name.
    pub ifname: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spec's ADD result example (SPEC.md, "Add example").
    const SPEC_RESULT: &str = r#"{
        "cniVersion": "1.1.0",
        "interfaces": [
            {"name": "cni0", "mac": "00:11:22:33:44:55"},
            {"name": "veth3243", "mac": "55:44:33:22:11:11"},
            {"name": "eth0", "mac": "99:88:77:66:55:44", "sandbox": "/var/run/netns/blue"}
        ],
        "ips": [{"address": "10.1.0.5/16", "gateway": "10.1.0.1", "interface": 2}],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dns": {"nameservers": ["10.1.0.1"]}
    }"#;

    #[test]
    fn the_spec_example_reads_and_writes_back() {
        let value: Value = serde_json::from_str(SPEC_RESULT).unwrap();
        let outcome = Outcome::from_any(value.clone()).unwrap();
        assert_eq!(outcome.interfaces.len(), 3);
        assert_eq!(outcome.ips[0].interface, Some(2));
        assert_eq!(outcome.in_version("1.1.0"), value);
    }

    #[test]
    fn older_layouts_carry_the_ip_version_and_drop_new_fields() {
        let mut outcome = Outcome::from_any(serde_json::from_str(SPEC_RESULT).unwrap()).unwrap();
        outcome.interfaces[2].mtu = Some(9000);
        outcome.ips.push(IpConfig {
            address: "2001:2::5/64".into(),
            gateway: None,
            interface: Some(2),
        });
        outcome.routes[0].rest.insert("priority".into(), 10.into());
        let old = outcome.in_version("0.4.0");
        assert_eq!(old["cniVersion"], "0.4.0");
        assert_eq!(old["ips"][0]["version"], "4");
        assert_eq!(old["ips"][1]["version"], "6");
        assert_eq!(old["ips"][0]["interface"], 2);
        assert!(old["interfaces"][2].get("mtu").is_none());
        assert_eq!(old["routes"][0], json!({"dst": "0.0.0.0/0"}));
        // And back: the version field goes, the rest is kept.
        let back = Outcome::from_any(old).unwrap();
        assert_eq!(back.ips, outcome.ips);
        let new = outcome.in_version("1.0.0");
        assert_eq!(new["interfaces"][2]["mtu"], 9000);
        assert!(new["ips"][0].get("version").is_none());
        assert_eq!(new["routes"][0]["priority"], 10);
    }

    #[test]
    fn host_local_output_reads() {
        // What host-local 1.1.1 prints for a 1.0.0 configuration.
        let ipam = r#"{"cniVersion":"1.0.0","ips":[{"address":"198.18.0.2/24","gateway":"198.18.0.1"}],"dns":{}}"#;
        let outcome = Outcome::from_any(serde_json::from_str(ipam).unwrap()).unwrap();
        assert_eq!(
            outcome.ips[0].cidr(),
            Some(("198.18.0.2".parse().unwrap(), 24))
        );
        assert!(outcome.interfaces.is_empty());
        assert!(Outcome::from_any(json!({"ips": [{"address": "198.18.0.2"}]})).is_err());
    }

    #[test]
    fn a_result_after_another_keeps_it_and_points_past_it() {
        let prev = Outcome::from_any(serde_json::from_str(SPEC_RESULT).unwrap()).unwrap();
        let ours = Outcome {
            interfaces: vec![Interface {
                name: "eth1".into(),
                sandbox: "/run/netns/blue".into(),
                ..Interface::default()
            }],
            ips: vec![IpConfig {
                address: "198.18.0.2/24".into(),
                gateway: None,
                interface: Some(0),
            }],
            ..Outcome::default()
        };
        let merged = ours.after(prev.clone());
        assert_eq!(merged.interfaces.len(), 4);
        assert_eq!(merged.interfaces[..3], prev.interfaces[..]);
        assert_eq!(merged.ips[0], prev.ips[0]);
        assert_eq!(merged.ips[1].interface, Some(3));
        assert_eq!(merged.interfaces[3].name, "eth1");
        assert_eq!(merged.dns, prev.dns);
        assert_eq!(merged.routes, prev.routes);
    }

    #[test]
    fn versions_order() {
        assert!(at_least("1.1.0", "1.0.0"));
        assert!(at_least("0.4.0", "0.4.0"));
        assert!(!at_least("0.3.1", "0.4.0"));
        assert!(!at_least("1.1", "0.4.0"));
        assert_eq!(parse_version("1.0.0.0"), None);
    }

    #[test]
    fn errors_and_version_info_have_the_spec_shape() {
        let error = Error::new(code::DECODING_FAILURE, "not JSON");
        assert_eq!(
            error.to_json("0.4.0"),
            json!({"cniVersion": "0.4.0", "code": 6, "msg": "not JSON"})
        );
        assert_eq!(
            version_info("1.0.0"),
            json!({"cniVersion": "1.0.0", "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]})
        );
    }
}
