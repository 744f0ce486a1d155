//! Whether this process may make what the privileged tests need, and a test
//! runner that reports those tests as ignored (not passed) when it may not.

use std::process::Command;

use crate::Netns;

/// Why this process cannot run the tests that need namespaces, taps and
/// packet sockets, found by trying to make each (not by the uid: root in a
/// container without CAP_NET_ADMIN cannot); `None` when it can. Tried once.
pub fn privilege_problem() -> Option<String> {
    static PROBLEM: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    PROBLEM.get_or_init(probe_privileges).clone()
}

fn probe_privileges() -> Option<String> {
    let ip = Command::new("ip").arg("-V").output();
    if !ip.is_ok_and(|o| o.status.success()) {
        return Some("needs iproute2 (the ip command)".to_owned());
    }
    let ns = match Netns::new("probe") {
        Ok(ns) => ns,
        Err(why) => {
            return Some(format!(
                "cannot make a network namespace (needs CAP_SYS_ADMIN): {why}"
            ))
        }
    };
    let probed = ns.run(|| {
        if let Err(e) = bridge::port::TapQueue::open("probe0", 1) {
            return Some(format!("cannot make a tap (needs CAP_NET_ADMIN): {e}"));
        }
        use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
        // Closed at once, when dropped.
        match socket(
            AddressFamily::Packet,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            None,
        ) {
            Ok(_) => None,
            Err(e) => Some(format!(
                "cannot open a packet socket (needs CAP_NET_RAW): {e}"
            )),
        }
    });
    probed.unwrap_or_else(Some)
}

/// Whether this process may make namespaces and links. When it may not,
/// prints why and returns false, unless MPBRIDGE_REQUIRE_PRIV=1 asks for a
/// failure instead.
pub fn privileged(test: &str) -> bool {
    let Some(reason) = privilege_problem() else {
        return true;
    };
    if std::env::var("MPBRIDGE_REQUIRE_PRIV").as_deref() == Ok("1") {
        panic!("{test}: {reason}, and MPBRIDGE_REQUIRE_PRIV=1 forbids skipping");
    }
    eprintln!("skipped {test}: {reason}");
    false
}

/// Whether `program` (from Debian's `package`) can be run, for a test
/// that needs it. When it cannot, prints why and returns false, unless
/// MPBRIDGE_REQUIRE_PRIV=1 asks for a failure instead, as [`privileged`]
/// does for privileges.
pub fn installed(test: &str, program: &str, package: &str) -> bool {
    // `--version` is not universal; starting the program at all is enough.
    let found = Command::new(program)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok();
    if found {
        return true;
    }
    unavailable(
        test,
        &format!("{program} is not installed (Debian's {package} package)"),
    )
}

/// For a test that cannot run here for `reason`: prints it and returns
/// false, unless MPBRIDGE_REQUIRE_PRIV=1 asks for a failure instead.
pub fn unavailable(test: &str, reason: &str) -> bool {
    if std::env::var("MPBRIDGE_REQUIRE_PRIV").as_deref() == Ok("1") {
        panic!("{test}: {reason}, and MPBRIDGE_REQUIRE_PRIV=1 forbids skipping");
    }
    eprintln!("skipped {test}: {reason}");
    false
}

/// One test of a suite run by [`run_tests`].
pub struct Test {
    /// Its name.
    pub name: &'static str,
    /// Its body; it fails by panicking.
    pub run: fn(),
    /// Whether it needs namespaces, taps and packet sockets.
    pub privileged: bool,
}

/// Runs a suite as `cargo test` would, with one difference: where the
/// privileges are missing, the tests that need them are reported as
/// ignored, with the reason, rather than passing without having run; under
/// MPBRIDGE_REQUIRE_PRIV=1 (CI) they fail instead.
pub fn run_tests(tests: Vec<Test>) -> ! {
    let args = libtest_mimic::Arguments::from_args();
    let problem = privilege_problem();
    let required = std::env::var("MPBRIDGE_REQUIRE_PRIV").as_deref() == Ok("1");
    if let (Some(reason), false) = (&problem, required) {
        let count = tests.iter().filter(|t| t.privileged).count();
        eprintln!("ignoring {count} tests that need privileges: {reason}");
    }
    let trials = tests
        .into_iter()
        .map(|test| {
            let run = test.run;
            match (&problem, test.privileged) {
                (Some(reason), true) if required => {
                    let message = format!("{reason}, and MPBRIDGE_REQUIRE_PRIV=1 forbids skipping");
                    libtest_mimic::Trial::test(test.name, move || Err(message.into()))
                }
                (Some(_), true) => libtest_mimic::Trial::test(test.name, move || {
                    run();
                    Ok(())
                })
                .with_ignored_flag(true),
                _ => libtest_mimic::Trial::test(test.name, move || {
                    run();
                    Ok(())
                }),
            }
        })
        .collect();
    libtest_mimic::run(&args, trials).exit()
}

/// `fn main` for a test file: `test_main!(privileged: [a, b], plain: [c])`.
#[macro_export]
macro_rules! test_main {
    (privileged: [$($p:ident),* $(,)?], plain: [$($q:ident),* $(,)?] $(,)?) => {
        fn main() {
            $crate::run_tests(vec![
                $($crate::Test { name: stringify!($p), run: $p, privileged: true },)*
                $($crate::Test { name: stringify!($q), run: $q, privileged: false },)*
            ])
        }
    };
}
