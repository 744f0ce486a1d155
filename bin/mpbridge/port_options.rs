//! A port's spanning tree, guard and storm options (`,cost=N`,
//! `,priority=N`, `,edge=on`, `,guard=on`, `,restricted_role=on`,
//! `,restricted_tcn=on`, `,bpdu_filter=on`,
//! `,storm=PPS`), its flags, its learning limit (`,max_learned=N`) and
//! its multicast options (`,mcast_router=0|1|2`, `,mcast_fast_leave=on`,
//! `,mcast_max_groups=N`),
//! named as the Linux bridge's `bridge link set` names them where it has
//! them.

use bridge::worker::{PortFlags, PortPolicy};

/// A port's spanning tree, guard and storm options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortOptions {
    /// Spanning tree path cost (by default from the link speed).
    pub cost: Option<u32>,
    /// Spanning tree port priority (by default 128).
    pub priority: Option<u8>,
    /// An edge port: it forwards at once, no BPDU expected.
    pub edge: bool,
    /// BPDU guard: a BPDU disables the port.
    pub guard: bool,
    /// 802.1Q's restrictedRole (Linux's `root_block`): never the root
    /// port; an alternate port where it would be.
    pub restricted_role: bool,
    /// 802.1Q's restrictedTcn: topology changes it hears or detects are
    /// not passed to the other ports, which do not flush for them.
    pub restricted_tcn: bool,
    /// BPDUs dropped in and out; the port takes no part in spanning tree.
    pub bpdu_filter: bool,
    /// Floods beyond this many frames a second are dropped.
    pub storm: Option<u32>,
    /// Linux's port flags: isolated, hairpin, learning, flood, mcast_flood,
    /// bcast_flood.
    pub flags: PortFlags,
    /// The most stations learned on the port (`max_learned=N`).
    pub max_learned: Option<u32>,
    /// Linux's `mcast_router`: 0 never a multicast router port, 1 when
    /// queries come in on it (the default), 2 always.
    pub mcast_router: u8,
    /// Linux's `mcast_fast_leave`: a leave removes the port from its group
    /// at once.
    pub mcast_fast_leave: bool,
    /// Linux's `mcast_max_groups`: the most multicast groups the port may
    /// be a member of; 0 (the default) is no limit.
    pub mcast_max_groups: u32,
}

/// The multicast router mode a port has unless told.
pub const MCAST_ROUTER_DEFAULT: u8 = 1;

impl Default for PortOptions {
    fn default() -> Self {
        PortOptions {
            cost: None,
            priority: None,
            edge: false,
            guard: false,
            restricted_role: false,
            restricted_tcn: false,
            bpdu_filter: false,
            storm: None,
            flags: PortFlags::default(),
            max_learned: None,
            mcast_router: MCAST_ROUTER_DEFAULT,
            mcast_fast_leave: false,
            mcast_max_groups: 0,
        }
    }
}

/// The port flags' names, as `bridge link set` gives them.
pub const FLAG_KEYS: [&str; 7] = [
    "isolated",
    "hairpin",
    "learning",
    "flood",
    "mcast_flood",
    "bcast_flood",
    "locked",
];

/// The value of option `key` among `items`, if given.
pub fn option<'a>(items: &'a [(String, String)], key: &str) -> Option<&'a str> {
    items
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

impl PortOptions {
    /// The options among `items` (key and value pairs of one port). A
    /// VXLAN port's `learning=` is its own (of remote VTEPs), not the flag.
    pub fn parse(items: &[(String, String)], vxlan: bool) -> Result<PortOptions, String> {
        let get = |key: &str| option(items, key);
        let cost = get("cost")
            .map(|text| match text.parse::<u32>() {
                Ok(cost) if (1..=200_000_000).contains(&cost) => Ok(cost),
                _ => Err(format!("cost={text}: a path cost from 1 to 200000000")),
            })
            .transpose()?;
        let priority = get("priority")
            .map(|text| match text.parse::<u8>() {
                Ok(priority) if priority % 16 == 0 && priority <= 240 => Ok(priority),
                _ => Err(format!(
                    "priority={text}: a port priority from 0 to 240 in steps of 16"
                )),
            })
            .transpose()?;
        let storm = get("storm")
            .map(|text| match text.parse::<u32>() {
                Ok(pps) if pps > 0 => Ok(pps),
                _ => Err(format!(
                    "storm={text}: frames a second, from 1 to {}",
                    u32::MAX
                )),
            })
            .transpose()?;
        let max_learned = get("max_learned")
            .map(|text| match text.parse::<u32>() {
                Ok(0) => Ok(None),
                Ok(n) => Ok(Some(n)),
                _ => Err(format!(
                    "max_learned={text}: stations from 0 (no limit) to {}",
                    u32::MAX
                )),
            })
            .transpose()?
            .flatten();
        let mcast_router = match get("mcast_router") {
            None => MCAST_ROUTER_DEFAULT,
            Some(text @ ("0" | "1" | "2")) => text.as_bytes()[0] - b'0',
            Some(text) => {
                return Err(format!(
                    "mcast_router={text}: 0 (never a router port), 1 (learned from queries) \
                     or 2 (always)"
                ))
            }
        };
        let mcast_max_groups = match get("mcast_max_groups") {
            None => 0,
            Some(text) => text.parse::<u32>().map_err(|_| {
                format!(
                    "mcast_max_groups={text}: groups from 0 (no limit) to {}",
                    u32::MAX
                )
            })?,
        };
        let on_by_default = |key: &str| match get(key) {
            None => Ok(true),
            value => flag(value, key),
        };
        let flags = PortFlags {
            isolated: flag(get("isolated"), "isolated")?,
            hairpin: flag(get("hairpin"), "hairpin")?,
            learning: match vxlan {
                true => true,
                false => on_by_default("learning")?,
            },
            flood: on_by_default("flood")?,
            mcast_flood: on_by_default("mcast_flood")?,
            bcast_flood: on_by_default("bcast_flood")?,
            locked: flag(get("locked"), "locked")?,
        };
        let options = PortOptions {
            cost,
            priority,
            edge: flag(get("edge"), "edge")?,
            guard: flag(get("guard"), "guard")?,
            restricted_role: flag(get("restricted_role"), "restricted_role")?,
            restricted_tcn: flag(get("restricted_tcn"), "restricted_tcn")?,
            bpdu_filter: flag(get("bpdu_filter"), "bpdu_filter")?,
            storm,
            flags,
            max_learned,
            mcast_router,
            mcast_fast_leave: flag(get("mcast_fast_leave"), "mcast_fast_leave")?,
            mcast_max_groups,
        };
        Ok(options)
    }

    /// What the workers apply of them, with the storm limit shared out
    /// among `workers` (each sees its own share of the port's frames).
    pub fn policy(&self, workers: usize) -> PortPolicy {
        PortPolicy {
            flags: self.flags,
            guard: self.guard,
            bpdu_filter: self.bpdu_filter,
            storm: self.storm.map(|pps| (pps / workers.max(1) as u32).max(1)),
        }
    }

    /// The options as `--port` takes them (`,cost=100,...`), or nothing.
    pub fn describe(&self) -> String {
        let mut text = String::new();
        if let Some(cost) = self.cost {
            text += &format!(",cost={cost}");
        }
        if let Some(priority) = self.priority {
            text += &format!(",priority={priority}");
        }
        for (on, name) in [
            (self.edge, "edge"),
            (self.guard, "guard"),
            (self.restricted_role, "restricted_role"),
            (self.restricted_tcn, "restricted_tcn"),
            (self.bpdu_filter, "bpdu_filter"),
        ] {
            if on {
                text += &format!(",{name}=on");
            }
        }
        if let Some(pps) = self.storm {
            text += &format!(",storm={pps}");
        }
        if let Some(n) = self.max_learned {
            text += &format!(",max_learned={n}");
        }
        if self.mcast_router != MCAST_ROUTER_DEFAULT {
            text += &format!(",mcast_router={}", self.mcast_router);
        }
        if self.mcast_fast_leave {
            text += ",mcast_fast_leave=on";
        }
        if self.mcast_max_groups != 0 {
            text += &format!(",mcast_max_groups={}", self.mcast_max_groups);
        }
        let f = &self.flags;
        for (on, name) in [
            (f.isolated, "isolated"),
            (f.hairpin, "hairpin"),
            (f.locked, "locked"),
        ] {
            if on {
                text += &format!(",{name}=on");
            }
        }
        for (on, name) in [
            (f.learning, "learning"),
            (f.flood, "flood"),
            (f.mcast_flood, "mcast_flood"),
            (f.bcast_flood, "bcast_flood"),
        ] {
            if !on {
                text += &format!(",{name}=off");
            }
        }
        text
    }

    /// Every port flag, by name, for `stats` and `port show`.
    pub fn flag_map(&self) -> std::collections::BTreeMap<String, bool> {
        let f = &self.flags;
        FLAG_KEYS
            .iter()
            .zip([
                f.isolated,
                f.hairpin,
                f.learning,
                f.flood,
                f.mcast_flood,
                f.bcast_flood,
                f.locked,
            ])
            .map(|(name, on)| (name.to_string(), on))
            .collect()
    }
}

/// An `on`/`off` option; off when absent.
fn flag(value: Option<&str>, key: &str) -> Result<bool, String> {
    match value {
        None | Some("off") => Ok(false),
        Some("on") => Ok(true),
        Some(other) => Err(format!("{key}={other}: on or off")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(text: &str) -> Vec<(String, String)> {
        text.split(',')
            .map(|item| {
                let (k, v) = item.split_once('=').unwrap();
                (k.to_owned(), v.to_owned())
            })
            .collect()
    }

    #[test]
    fn options_parse_and_describe_themselves() {
        let options = PortOptions::parse(
            &items("cost=100,priority=64,edge=on,guard=off,storm=5000"),
            false,
        )
        .unwrap();
        assert_eq!(options.cost, Some(100));
        assert_eq!(options.priority, Some(64));
        assert!(options.edge && !options.guard && !options.bpdu_filter);
        assert_eq!(
            options.describe(),
            ",cost=100,priority=64,edge=on,storm=5000"
        );
        assert_eq!(options.policy(2).storm, Some(2500));
        assert_eq!(
            PortOptions::parse(&[], false).unwrap(),
            PortOptions::default()
        );
        let flags = PortOptions::parse(
            &items("isolated=on,hairpin=on,learning=off,flood=off"),
            false,
        )
        .unwrap();
        assert!(flags.flags.isolated && flags.flags.hairpin);
        assert!(!flags.flags.learning && !flags.flags.flood && flags.flags.mcast_flood);
        assert_eq!(
            flags.describe(),
            ",isolated=on,hairpin=on,learning=off,flood=off"
        );
        assert!(!flags.flag_map()["learning"]);
        let limits = PortOptions::parse(
            &items("max_learned=4,mcast_router=2,mcast_fast_leave=on,mcast_max_groups=16"),
            false,
        )
        .unwrap();
        assert_eq!(limits.max_learned, Some(4));
        assert_eq!((limits.mcast_router, limits.mcast_fast_leave), (2, true));
        assert_eq!(limits.mcast_max_groups, 16);
        assert_eq!(
            limits.describe(),
            ",max_learned=4,mcast_router=2,mcast_fast_leave=on,mcast_max_groups=16"
        );
        let restricted =
            PortOptions::parse(&items("restricted_role=on,restricted_tcn=on"), false).unwrap();
        assert!(restricted.restricted_role && restricted.restricted_tcn);
        assert_eq!(
            restricted.describe(),
            ",restricted_role=on,restricted_tcn=on"
        );
        assert_eq!(
            PortOptions::parse(&items(&restricted.describe()[1..]), false).unwrap(),
            restricted
        );
        let unlimited = PortOptions::parse(&items("mcast_max_groups=0"), false).unwrap();
        assert_eq!(unlimited.mcast_max_groups, 0);
        assert_eq!(unlimited.describe(), "");
        let unlimited = PortOptions::parse(&items("max_learned=0"), false).unwrap();
        assert_eq!(unlimited.max_learned, None);
        assert_eq!(flags.flag_map().len(), 7);
        // A VXLAN port's learning= is its own.
        let vxlan = PortOptions::parse(&items("learning=off"), true).unwrap();
        assert!(vxlan.flags.learning);
    }

    #[test]
    fn bad_values_are_named() {
        for (text, needle) in [
            ("priority=17", "priority=17"),
            ("priority=256", "priority=256"),
            ("cost=0", "cost=0"),
            ("cost=x", "cost=x"),
            ("storm=0", "storm=0"),
            ("guard=yes", "guard=yes: on or off"),
            ("restricted_role=1", "restricted_role=1: on or off"),
            ("restricted_tcn=yes", "restricted_tcn=yes: on or off"),
            ("hairpin=1", "hairpin=1: on or off"),
            ("mcast_flood=no", "mcast_flood=no: on or off"),
            ("max_learned=x", "max_learned=x"),
            ("max_learned=-1", "max_learned=-1"),
            ("mcast_router=3", "mcast_router=3"),
            ("mcast_fast_leave=1", "mcast_fast_leave=1: on or off"),
            ("mcast_max_groups=-1", "mcast_max_groups=-1"),
            ("mcast_max_groups=x", "mcast_max_groups=x"),
            ("mcast_max_groups=4294967296", "mcast_max_groups=4294967296"),
            ("mcast_max_groups=", "mcast_max_groups="),
        ] {
            let error = PortOptions::parse(&items(text), false).unwrap_err();
            assert!(error.contains(needle), "{text}: {error}");
        }
    }
}
