//! Bridge and port parameters, their ranges, and the recommended path costs.
//!
//! The ranges are those of 802.1D-2004 Table 17-1 (bridge timers, Transmit
//! Hold Count), 17.13 (the Bridge and Port Priority steps) and Table 17-3
//! (path costs). Messages name the daemon's flags, so an operator reads
//! which setting to change.

/// Parameters of one bridge (802.1D-2004 17.13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StpConfig {
    /// Bridge Priority, the upper 16 bits of the bridge identifier: a
    /// multiple of 4096 in 0..=61440 (the low 12 bits, the system id
    /// extension, stay 0).
    pub priority: u16,
    /// Bridge Hello Time in seconds (1..=2).
    pub hello_time: u8,
    /// Bridge Forward Delay in seconds (4..=30).
    pub forward_delay: u8,
    /// Bridge Max Age in seconds (6..=40).
    pub max_age: u8,
    /// Transmit Hold Count (17.13.12): BPDUs a port may send in a burst
    /// before it is held to one a second (1..=10).
    pub tx_hold_count: u8,
    /// Force Protocol Version (17.13.4): 2 for RSTP, 0 for STP
    /// compatibility (Configuration and TCN BPDUs only, no rapid
    /// transitions).
    pub force_version: u8,
}

impl Default for StpConfig {
    fn default() -> StpConfig {
        StpConfig {
            priority: 32768,
            hello_time: 2,
            forward_delay: 15,
            max_age: 20,
            tx_hold_count: 6,
            force_version: 2,
        }
    }
}

impl StpConfig {
    /// Checks every value against its range and the timers against each
    /// other (17.14: 2 x (Forward Delay - 1) >= Max Age >= 2 x (Hello
    /// Time + 1)); the error is one line naming the offending value.
    pub fn validate(&self) -> Result<(), String> {
        if self.priority % 4096 != 0 || self.priority > 61440 {
            return Err(format!(
                "--stp-priority {} is not a multiple of 4096 in 0..=61440",
                self.priority
            ));
        }
        if !(1..=2).contains(&self.hello_time) {
            return Err(format!(
                "--stp-hello {} is outside 1..=2 seconds (802.1D-2004 Table 17-1)",
                self.hello_time
            ));
        }
        if !(4..=30).contains(&self.forward_delay) {
            return Err(format!(
                "--stp-forward-delay {} is outside 4..=30 seconds (802.1D-2004 Table 17-1)",
                self.forward_delay
            ));
        }
        if !(6..=40).contains(&self.max_age) {
            return Err(format!(
                "--stp-max-age {} is outside 6..=40 seconds (802.1D-2004 Table 17-1)",
                self.max_age
            ));
        }
        let (hello, delay, age) = (
            u32::from(self.hello_time),
            u32::from(self.forward_delay),
            u32::from(self.max_age),
        );
        if 2 * (delay - 1) < age {
            return Err(format!(
                "--stp-max-age {age} breaks 2 x (forward delay - 1) >= max age (forward delay {delay})"
            ));
        }
        if age < 2 * (hello + 1) {
            return Err(format!(
                "--stp-max-age {age} breaks max age >= 2 x (hello time + 1) (hello time {hello})"
            ));
        }
        if !(1..=10).contains(&self.tx_hold_count) {
            return Err(format!(
                "STP transmit hold count {} is outside 1..=10 (802.1D-2004 Table 17-1)",
                self.tx_hold_count
            ));
        }
        if self.force_version != 0 && self.force_version != 2 {
            return Err(format!(
                "STP force version {} is neither 0 (STP) nor 2 (RSTP)",
                self.force_version
            ));
        }
        Ok(())
    }
}

/// Parameters of one bridge port (802.1D-2004 17.13, 6.4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortConfig {
    /// Port Priority, the upper 4 bits of the port identifier: a multiple
    /// of 16 in 0..=240.
    pub priority: u8,
    /// Port Path Cost (17.13.11), 1..=200,000,000; see [`path_cost`].
    pub path_cost: u32,
    /// AdminEdge (17.13.1): the port starts as an edge port (no bridge
    /// behind it) and forwards at once.
    pub admin_edge: bool,
    /// AutoEdge (17.13.3): a designated port that hears no BPDU for the
    /// edge delay becomes an edge port.
    pub auto_edge: bool,
    /// operPointToPointMAC (6.4.3): the link has exactly one other bridge
    /// on it, so proposals and agreements may skip the forward delays.
    pub point_to_point: bool,
    /// restrictedRole (802.1Q-2018 13.27.64): the port is never selected
    /// as root port, even when it has the best root path priority vector;
    /// it becomes an alternate port instead. Linux's `root_block`.
    pub restricted_role: bool,
    /// restrictedTcn (802.1Q-2018 13.27.65): topology changes the port
    /// receives or detects are not propagated to the other ports, so
    /// nothing is flushed because of them.
    pub restricted_tcn: bool,
}

impl Default for PortConfig {
    fn default() -> PortConfig {
        PortConfig {
            priority: 128,
            path_cost: 20000,
            admin_edge: false,
            auto_edge: true,
            point_to_point: true,
            restricted_role: false,
            restricted_tcn: false,
        }
    }
}

impl PortConfig {
    /// Checks the priority and the cost; the error is one line naming the
    /// offending value.
    pub fn validate(&self) -> Result<(), String> {
        if self.priority % 16 != 0 || self.priority > 240 {
            return Err(format!(
                "port priority={} is not a multiple of 16 in 0..=240",
                self.priority
            ));
        }
        if !(1..=200_000_000).contains(&self.path_cost) {
            return Err(format!(
                "cost={} is outside 1..=200000000 (802.1D-2004 Table 17-3)",
                self.path_cost
            ));
        }
        Ok(())
    }
}

/// The recommended Port Path Cost for a link speed in Mb/s (802.1D-2004
/// Table 17-3): 20,000,000 / speed, so 20,000,000 for 1 Mb/s, 20,000 for
/// 1 Gb/s, 2,000 for 10 Gb/s, 2 for 10 Tb/s (and at least 1 above that).
/// An unknown speed (`None` or 0) gets 20,000, the cost of 1 Gb/s.
pub fn path_cost(speed_mbps: Option<u32>) -> u32 {
    match speed_mbps {
        None | Some(0) => 20_000,
        Some(speed) => (20_000_000 / speed).max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert_eq!(StpConfig::default().validate(), Ok(()));
        assert_eq!(PortConfig::default().validate(), Ok(()));
    }

    #[test]
    fn bridge_messages_name_the_flag() {
        let bad = |f: fn(&mut StpConfig)| {
            let mut config = StpConfig::default();
            f(&mut config);
            config.validate().unwrap_err()
        };
        assert_eq!(
            bad(|c| c.priority = 1000),
            "--stp-priority 1000 is not a multiple of 4096 in 0..=61440"
        );
        assert!(bad(|c| c.priority = 65535).starts_with("--stp-priority 65535 "));
        assert!(bad(|c| c.hello_time = 3).starts_with("--stp-hello 3 is outside 1..=2"));
        assert!(bad(|c| c.hello_time = 0).starts_with("--stp-hello 0 "));
        assert!(bad(|c| c.forward_delay = 3).starts_with("--stp-forward-delay 3 is outside 4..=30"));
        assert!(bad(|c| c.forward_delay = 31).starts_with("--stp-forward-delay 31 "));
        assert!(bad(|c| c.max_age = 41).starts_with("--stp-max-age 41 is outside 6..=40"));
        assert_eq!(
            bad(|c| c.max_age = 30),
            "--stp-max-age 30 breaks 2 x (forward delay - 1) >= max age (forward delay 15)"
        );
        // max age >= 2 x (hello time + 1) holds throughout Table 17-1's
        // ranges (hello at most 2, max age at least 6); it is checked all
        // the same.
        assert!(bad(|c| c.tx_hold_count = 0).contains("transmit hold count 0"));
        assert!(bad(|c| c.force_version = 1).contains("force version 1"));
        // The extremes that the relations allow.
        let edge = StpConfig {
            priority: 61440,
            hello_time: 1,
            forward_delay: 4,
            max_age: 6,
            tx_hold_count: 10,
            force_version: 0,
        };
        assert_eq!(edge.validate(), Ok(()));
    }

    #[test]
    fn port_messages_name_the_value() {
        let port = PortConfig {
            priority: 100,
            ..PortConfig::default()
        };
        assert_eq!(
            port.validate().unwrap_err(),
            "port priority=100 is not a multiple of 16 in 0..=240"
        );
        let port = PortConfig {
            priority: 0,
            path_cost: 0,
            ..PortConfig::default()
        };
        assert!(port
            .validate()
            .unwrap_err()
            .starts_with("cost=0 is outside 1..=200000000"));
        let port = PortConfig {
            priority: 240,
            path_cost: 200_000_000,
            ..PortConfig::default()
        };
        assert_eq!(port.validate(), Ok(()));
    }

    #[test]
    fn table_17_3() {
        let table = [
            (1, 20_000_000),
            (10, 2_000_000),
            (100, 200_000),
            (1_000, 20_000),
            (10_000, 2_000),
            (100_000, 200),
            (1_000_000, 20),
            (10_000_000, 2),
        ];
        for (speed, cost) in table {
            assert_eq!(path_cost(Some(speed)), cost, "{speed} Mb/s");
        }
        assert_eq!(path_cost(Some(25_000)), 800);
        assert_eq!(path_cost(Some(40_000)), 500);
        assert_eq!(path_cost(Some(u32::MAX)), 1);
        assert_eq!(path_cost(None), 20_000);
        assert_eq!(path_cost(Some(0)), 20_000);
    }
}
