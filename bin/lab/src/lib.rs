//! The laboratory of mpbridge's tests and of mpbench: network namespaces,
//! veth links, processes under test, test stations, and the privilege probe
//! that decides whether the tests that need them can run. Everything made
//! here is removed or stopped on drop, also when a test fails. The MAC
//! table workloads (`workload`) are shared by `mpbench locks` and the
//! criterion benchmarks.

#![deny(unsafe_code)]

pub mod frr;
pub mod guest;
mod netns;
mod privileges;
mod process;
pub mod prometheus;
mod scratch;
mod station;
pub mod vhost;
mod wait;
pub mod workload;

pub use frr::{Frr, FRR_DIR};
pub use netns::{ip, unique, DevCounters, Netns};
pub use privileges::{installed, privilege_problem, privileged, run_tests, unavailable, Test};
pub use process::{
    cpu_over, cpu_seconds, pin_to, proc_status, rss_kib, stop_child, wait_exit, Daemon, Process,
};
pub use scratch::ScratchDir;
pub use station::{mac, tagged_test_frame, test_frame, Station, BROADCAST, TEST_ETHERTYPE};
pub use wait::{poll, steady};
