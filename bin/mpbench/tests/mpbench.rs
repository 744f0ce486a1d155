//! mpbench as a user runs it: its outputs and its errors.

use std::process::Command;

/// The standard output of a run that must have succeeded.
fn succeeded(output: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// A CSV file's header and rows, split at commas (no field holds one).
fn table(csv: &str) -> (Vec<&str>, Vec<Vec<&str>>) {
    let mut lines = csv.lines();
    let header = lines.next().expect("a header").split(',').collect();
    (header, lines.map(|l| l.split(',').collect()).collect())
}

fn mpbench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mpbench"))
        .args(args)
        .output()
        .expect("cannot run mpbench")
}

/// Every subcommand takes a list of strategies the same two ways.
#[test]
fn strategy_lists_are_spelled_the_same_in_every_subcommand() {
    let dir = std::env::temp_dir().join(format!("mpbench-locklist-{}", std::process::id()));
    let out = dir.to_str().unwrap();
    for lock in [
        &["--lock", "mutex,rcu"][..],
        &["--lock", "mutex", "--lock", "rcu"][..],
    ] {
        let mut args = vec![
            "locks",
            "--seconds",
            "0.02",
            "--runs",
            "1",
            "--threads",
            "1",
            "--sizes",
            "64",
            "--workloads",
            "lookup",
            "--out",
            out,
        ];
        args.extend_from_slice(lock);
        let stdout = succeeded(&mpbench(&args));
        assert!(
            stdout.contains("mutex") && stdout.contains("rcu"),
            "{stdout}"
        );
        assert!(!stdout.contains("epoch"), "{stdout}");
    }
    for command in ["locks", "forward", "rfc2889", "memory"] {
        let output = mpbench(&[command, "--help"]);
        let help = succeeded(&output);
        assert!(
            help.contains("comma-separated or with the flag repeated"),
            "{command} --help: {help}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn locks_prints_tables_and_writes_csv_json_and_plots() {
    let out = std::env::temp_dir().join(format!("mpbench-test-{}", std::process::id()));
    let output = mpbench(&[
        "locks",
        "--seconds",
        "0.02",
        "--runs",
        "1",
        "--threads",
        "1,2",
        "--sizes",
        "64",
        "--workloads",
        "lookup,capacity",
        "--per-frame",
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = succeeded(&output);
    for heading in [
        "lookup only, 64 stations",
        "learning at capacity (MAC flood), 64 stations",
        "lock statistics",
    ] {
        assert!(
            stdout.contains(heading),
            "missing '{heading}' in:\n{stdout}"
        );
    }
    for name in [
        "unsync",
        "mutex",
        "rwlock",
        "rmlock",
        "sharded",
        "rcu",
        "epoch",
        "rmlock-per-frame",
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(name)),
            "no row for {name}:\n{stdout}"
        );
    }
    let csv = std::fs::read_to_string(out.join("locks.csv")).unwrap();
    let (header, rows) = table(&csv);
    assert_eq!(
        &header[..4],
        ["workload", "stations", "strategy", "threads"]
    );
    let mops = header.iter().position(|h| *h == "mops_median").unwrap();
    // Per workload: the floor at 1 thread, 6 strategies at 2 thread counts,
    // and for lookup 3 per-frame variants at 2 thread counts.
    assert_eq!(rows.len(), (1 + 12 + 6) + (1 + 12));
    for row in &rows {
        let value: f64 = row[mops].parse().unwrap();
        assert!(value > 0.0, "no operations measured: {row:?}");
    }
    let json = std::fs::read_to_string(out.join("locks.json")).unwrap();
    assert_eq!(json.matches("\"strategy\"").count(), rows.len());
    for plot in [
        "locks-lookup-64.svg",
        "locks-lookup-64.png",
        "locks-capacity-64.svg",
    ] {
        let bytes = std::fs::read(out.join(plot)).unwrap();
        assert!(bytes.len() > 100, "{plot} is empty");
    }
    let png = std::fs::read(out.join("locks-lookup-64.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn locks_batched_moves_reports_resident_memory() {
    let out = std::env::temp_dir().join(format!("mpbench-moves-{}", std::process::id()));
    let output = mpbench(&[
        "locks",
        "--lock",
        "epoch",
        "--lock",
        "rcu",
        "--seconds",
        "0.02",
        "--runs",
        "1",
        "--threads",
        "1,2",
        "--sizes",
        "64",
        "--workloads",
        "batched-moves",
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = succeeded(&output);
    assert!(
        stdout.contains("station-move storm, 64 moves per write section, 64 stations"),
        "{stdout}"
    );
    let memory = stdout
        .split("process memory")
        .nth(1)
        .unwrap_or_else(|| panic!("no memory table in:\n{stdout}"));
    for name in ["unsync", "rcu", "epoch"] {
        assert!(
            memory
                .lines()
                .any(|l| l.starts_with(name) && l.contains("1 thr: ")),
            "no memory row for {name}:\n{stdout}"
        );
    }
    let csv = std::fs::read_to_string(out.join("locks.csv")).unwrap();
    let (header, rows) = table(&csv);
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    // The floor at 1 thread, two strategies at 2 thread counts.
    assert_eq!(rows.len(), 1 + 4, "{csv}");
    for row in &rows {
        assert_eq!(row[col("workload")], "batched-moves");
        let mops: f64 = row[col("mops_median")].parse().unwrap();
        assert!(mops > 0.0, "no moves measured: {row:?}");
        let peak: f64 = row[col("rss_peak_kib")].parse().unwrap();
        let end: f64 = row[col("rss_end_kib")].parse().unwrap();
        // A process this size holds a few MiB at least, and far less than
        // a GiB for 64 stations.
        assert!(
            (1024.0..1048576.0).contains(&peak),
            "peak RSS {peak} KiB: {row:?}"
        );
        assert!(end > 0.0 && end <= peak, "end RSS {end} KiB: {row:?}");
    }
    let json = std::fs::read_to_string(out.join("locks.json")).unwrap();
    assert_eq!(json.matches("\"rss_peak_kib\"").count(), rows.len());
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn unknown_strategies_and_workloads_are_one_line_errors() {
    for args in [
        ["locks", "--lock", "spinlock"],
        ["locks", "--workloads", "reads"],
    ] {
        let output = mpbench(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.lines().next().unwrap().contains("invalid value"),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"));
    }
}

#[test]
fn forward_switches_strategies_on_one_running_bridge() {
    if !lab::privileged("forward_switches_strategies_on_one_running_bridge") {
        return;
    }
    let out = std::env::temp_dir().join(format!("mpbench-switch-{}", std::process::id()));
    let output = mpbench(&[
        "forward",
        "--runs",
        "2",
        "--seconds",
        "0.2",
        "--sizes",
        "64",
        "--ports",
        "raw",
        "--references",
        "direct",
        "--lock",
        "mutex,rcu,epoch",
        "--placement",
        "shared",
        "--switch",
        "--mpbridge",
        &mpbridge_binary(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = succeeded(&output);
    assert!(stdout.contains("not restarted"), "{stdout}");
    for lock in ["mutex", "rcu", "epoch"] {
        let heading = format!("mpbridge {lock} (raw, 1 worker)");
        assert!(
            stdout.contains(&heading),
            "missing '{heading}' in:\n{stdout}"
        );
    }
    let csv = std::fs::read_to_string(out.join("forward.csv")).unwrap();
    // Two runs of three strategies and the direct reference, one size.
    assert_eq!(csv.lines().count(), 1 + 2 * 4, "{csv}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn forward_measures_mpbridge_and_its_references() {
    if !lab::privileged("forward_measures_mpbridge_and_its_references") {
        return;
    }
    let out = std::env::temp_dir().join(format!("mpbench-forward-{}", std::process::id()));
    let output = mpbench(&[
        "forward",
        "--runs",
        "1",
        "--seconds",
        "0.2",
        "--sizes",
        "64,1518",
        "--ports",
        "raw,tap",
        "--workers",
        "1,2",
        "--references",
        "kernel,relay,direct,tpacket,loop",
        "--mpbridge",
        &mpbridge_binary(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = succeeded(&output);
    for heading in [
        "kernel bridge (veth) (a) rx apart",
        "C TPACKET_V3 loop (veth) (a) rx apart",
        "C TPACKET_V3 loop (veth) (b) rx shared",
        "/ C TPACKET_V3 loop (veth) (a) rx apart: 64:",
        "kernel bridge (veth) (b) rx shared",
        "relay (raw) (a) rx apart",
        "relay (tap)",
        "direct (generator to sink)",
        "read/write loop (tap)",
        "mpbridge epoch (raw, 1 worker) (a) rx apart",
        "mpbridge epoch (raw, 1 worker) (b) rx shared",
        "mpbridge epoch (tap, 2 workers)",
        "CPU ns/frame",
        "mpbridge as a fraction of each reference",
        "/ read/write loop (tap): 64:",
        "Kpps delivered by workers",
    ] {
        assert!(
            stdout.contains(heading),
            "missing '{heading}' in:\n{stdout}"
        );
    }
    let csv = std::fs::read_to_string(out.join("forward.csv")).unwrap();
    let (header, rows) = table(&csv);
    let delivered = header.iter().position(|h| *h == "delivered_pps").unwrap();
    let cost = header
        .iter()
        .position(|h| *h == "cpu_ns_per_frame")
        .unwrap();
    // Raw, each in two placements: kernel, relay, the C loop, mpbridge x2
    // worker counts; then direct, and on taps the loop, the relay and
    // mpbridge x2 worker counts; two sizes each.
    assert_eq!(rows.len(), (2 * 5 + 1 + 4) * 2, "{csv}");
    for row in &rows {
        let pps: f64 = row[delivered].parse().unwrap();
        assert!(pps > 0.0, "nothing delivered: {row:?}");
        // Forwarding a frame costs CPU time somewhere.
        let ns: f64 = row[cost].parse().unwrap();
        assert!(ns > 0.0, "no CPU time accounted: {row:?}");
    }
    assert!(out.join("forward-sizes.png").exists() && out.join("forward-workers.svg").exists());
    let _ = std::fs::remove_dir_all(&out);
    let leftover = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let pid = format!("mpbench-{}-", std::process::id());
    assert!(
        !String::from_utf8_lossy(&leftover.stdout).contains(&pid),
        "namespaces left behind"
    );
}

#[test]
fn forward_sweeps_offered_load_below_and_above_saturation() {
    if !lab::privileged("forward_sweeps_offered_load_below_and_above_saturation") {
        return;
    }
    let out = std::env::temp_dir().join(format!("mpbench-sweep-{}", std::process::id()));
    let output = mpbench(&[
        "forward",
        "--runs",
        "1",
        "--seconds",
        "0.3",
        "--sizes",
        "64",
        "--ports",
        "raw",
        "--references",
        "relay",
        "--placement",
        "shared",
        "--sweep",
        "25,max",
        "--mpbridge",
        &mpbridge_binary(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = succeeded(&output);
    assert!(stdout.contains("Offered-load sweep"), "{stdout}");
    assert!(out.join("forward-sweep.svg").exists());
    let csv = std::fs::read_to_string(out.join("forward.csv")).unwrap();
    let (header, rows) = table(&csv);
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    // relay and mpbridge, each flat out and at 25%.
    assert_eq!(rows.len(), 4, "{csv}");
    for target in ["relay", "mpbridge"] {
        let offered = |load: &str| -> f64 {
            let row = rows
                .iter()
                .find(|r| r[col("target")] == target && r[col("load")] == load)
                .unwrap_or_else(|| panic!("no {target} {load} row in {csv}"));
            row[col("offered_pps")].parse().unwrap()
        };
        // 25% of what flat out delivered is at most a quarter of what flat
        // out offered: the generator holds the rate it is given.
        assert!(
            offered("25%") < 0.5 * offered("max"),
            "{target}: the rate was not held: {csv}"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn forward_tcp_measures_goodput_through_each_forwarder() {
    if !lab::privileged("forward_tcp_measures_goodput_through_each_forwarder") {
        return;
    }
    let out = std::env::temp_dir().join(format!("mpbench-tcp-{}", std::process::id()));
    let output = mpbench(&[
        "forward",
        "--tcp",
        "--runs",
        "1",
        "--seconds",
        "0.5",
        "--ports",
        "raw,tap",
        "--references",
        "kernel",
        "--placement",
        "apart",
        "--mpbridge",
        &mpbridge_binary(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = succeeded(&output);
    assert!(
        stdout.contains("as a fraction of the kernel bridge"),
        "{stdout}"
    );
    let csv = std::fs::read_to_string(out.join("forward-tcp.csv")).unwrap();
    let (header, rows) = table(&csv);
    let mbps = header.iter().position(|h| *h == "tcp_mbps").unwrap();
    // The kernel bridge, mpbridge on raw ports and on taps.
    assert_eq!(rows.len(), 3, "{csv}");
    for row in &rows {
        // Bytes crossed: the transfer ran through the forwarder.
        let rate: f64 = row[mbps].parse().unwrap();
        assert!(rate > 0.0, "no TCP goodput: {row:?}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn rtt_times_round_trips_through_each_forwarder() {
    if !lab::privileged("rtt_times_round_trips_through_each_forwarder") {
        return;
    }
    let out = std::env::temp_dir().join(format!("mpbench-rtt-{}", std::process::id()));
    let output = mpbench(&[
        "rtt",
        "--runs",
        "1",
        "--seconds",
        "0.2",
        "--warmup",
        "20",
        "--mpbridge",
        &mpbridge_binary(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = succeeded(&output);
    assert!(stdout.contains("median us"), "{stdout}");
    let csv = std::fs::read_to_string(out.join("rtt.csv")).unwrap();
    let (header, rows) = table(&csv);
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (target, placement, rounds, median) = (
        column("target"),
        column("placement"),
        column("rounds"),
        column("median_us"),
    );
    let setups: Vec<(&str, &str)> = rows.iter().map(|r| (r[target], r[placement])).collect();
    // The kernel bridge once; each mpbridge setup in both placements.
    assert_eq!(
        setups,
        [
            ("kernel", ""),
            ("frame", "apart"),
            ("frame", "shared"),
            ("block", "apart"),
            ("block", "shared"),
            ("poll", "apart"),
            ("poll", "shared"),
        ],
        "{csv}"
    );
    for row in &rows {
        // Answers came back through the forwarder.
        assert!(row[rounds].parse::<f64>().unwrap() > 0.0, "{row:?}");
        assert!(row[median].parse::<f64>().unwrap() > 0.0, "{row:?}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn forward_measures_two_vteps_over_vxlan() {
    if !lab::privileged("forward_measures_two_vteps_over_vxlan") {
        return;
    }
    let out = std::env::temp_dir().join(format!("mpbench-vxlan-{}", std::process::id()));
    let output = mpbench(&[
        "forward",
        "--runs",
        "1",
        "--seconds",
        "0.3",
        "--sizes",
        "64,1518",
        "--ports",
        "vxlan",
        "--references",
        "kernel",
        "--mpbridge",
        &mpbridge_binary(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = succeeded(&output);
    for heading in [
        "kernel vxlan devices and bridges (veth hosts)",
        "mpbridge epoch (vxlan, 1 worker)",
        "/ kernel vxlan devices and bridges (veth hosts): 64:",
    ] {
        assert!(
            stdout.contains(heading),
            "missing '{heading}' in:\n{stdout}"
        );
    }
    let csv = std::fs::read_to_string(out.join("forward.csv")).unwrap();
    let (header, rows) = table(&csv);
    let delivered = header.iter().position(|h| *h == "delivered_pps").unwrap();
    assert_eq!(rows.len(), 4, "{csv}");
    for row in &rows {
        // 1518-byte frames cross too: the underlay has room for them.
        let pps: f64 = row[delivered].parse().unwrap();
        assert!(pps > 0.0, "nothing delivered: {row:?}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn forward_without_root_says_so_in_one_line() {
    if !lab::privileged("forward_without_root_says_so_in_one_line") {
        return;
    }
    let output = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .args([env!("CARGO_BIN_EXE_mpbench"), "forward"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("needs root"), "{stderr}");
}

#[test]
fn rfc2889_reports_learning_rate_and_caching_capacity() {
    if !lab::privileged("rfc2889_reports_learning_rate_and_caching_capacity") {
        return;
    }
    let out = std::env::temp_dir().join(format!("mpbench-rfc-{}", std::process::id()));
    let output = mpbench(&[
        "rfc2889",
        "--lock",
        "epoch,mutex",
        "--addresses",
        "200",
        "--capacity",
        "64",
        "--steps",
        "2",
        "--max-rate",
        "20000",
        "--mpbridge",
        &mpbridge_binary(),
        "--out",
        out.to_str().unwrap(),
    ]);
    succeeded(&output);
    let csv = std::fs::read_to_string(out.join("rfc2889.csv")).unwrap();
    let (header, rows) = table(&csv);
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    assert_eq!(rows.len(), 2, "{csv}");
    // What the measurement guarantees whatever the machine's load: frames
    // may be lost on the way (a lost test frame counts as held, a lost
    // learning frame as refused), so the figures are bounded, not exact.
    let mut strategies = Vec::new();
    for row in rows {
        strategies.push(row[col("strategy")].to_owned());
        let offered: u64 = row[col("offered_addresses")].parse().unwrap();
        assert_eq!(offered, 128, "twice the capacity is offered: {csv}");
        let held: u64 = row[col("held_entries")].parse().unwrap();
        // The test station's own entry, up to every address offered.
        assert!((1..=offered + 1).contains(&held), "held {held}: {csv}");
        let rate: f64 = row[col("learning_rate_fps")].parse().unwrap();
        assert!(
            rate.is_finite() && rate >= 0.0,
            "learning rate {rate}: {csv}"
        );
        let capped = &row[col("rate_capped")];
        assert!(
            *capped == "0" || *capped == "1",
            "rate_capped {capped}: {csv}"
        );
    }
    assert_eq!(strategies, ["epoch", "mutex"], "{csv}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn forward_measures_vde_switch_between_taps() {
    if !lab::privileged("forward_measures_vde_switch_between_taps") {
        return;
    }
    if !lab::installed(
        "forward_measures_vde_switch_between_taps",
        "vde_switch",
        "vde2",
    ) {
        return;
    }
    let out = std::env::temp_dir().join(format!("mpbench-vde-{}", std::process::id()));
    let output = mpbench(&[
        "forward",
        "--runs",
        "1",
        "--seconds",
        "0.2",
        "--sizes",
        "64",
        "--ports",
        "tap",
        "--references",
        "vde",
        "--mpbridge",
        &mpbridge_binary(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = succeeded(&output);
    assert!(stdout.contains("vde_switch (tap)"), "{stdout}");
    assert!(stdout.contains("/ vde_switch (tap): 64:"), "{stdout}");
    let csv = std::fs::read_to_string(out.join("forward.csv")).unwrap();
    let vde = csv
        .lines()
        .find(|l| l.starts_with("vde,"))
        .expect("no vde row");
    let column = csv
        .lines()
        .next()
        .unwrap()
        .split(',')
        .position(|h| h == "delivered_pps")
        .unwrap();
    let delivered: f64 = vde.split(',').nth(column).unwrap().parse().unwrap();
    assert!(delivered > 0.0, "{csv}");
    let _ = std::fs::remove_dir_all(&out);
}

/// The mpbridge daemon of this workspace's build (mpbench's experiments run
/// it). `cargo test --workspace` builds it; `cargo test -p mpbench` alone
/// does not.
fn mpbridge_binary() -> String {
    // target/<profile>/deps/mpbench-HASH -> target/<profile>/mpbridge
    let exe = std::env::current_exe().expect("test executable");
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target directory")
        .join("mpbridge");
    assert!(
        path.exists(),
        "{} is not built: run cargo build --bin mpbridge, or cargo test --workspace",
        path.display()
    );
    path.to_string_lossy().into_owned()
}
