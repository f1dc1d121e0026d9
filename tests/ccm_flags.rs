//! Every flag of upstream's cloud-controller-manager, from the real command's own flag
//! set, goes through the parser and validation `route-controller run` uses, without
//! starting anything.
//!
//! The flag set comes from `tests/kube-apiserver/ccm-flags`: `k8s.io/cloud-provider/app`
//! at the version pinned in go.mod builds the CCM command as a provider's main does and
//! prints every flag with its type and default, and every feature gate it knows. Go
//! must be installed (the test fails saying so otherwise, as the end-to-end tests do).
//!
//! What it guards: that a CCM's command line works unchanged (no "unknown flag"), that
//! each flag is typed as upstream types it (a value upstream takes is taken here), that
//! the flags that apply keep their meaning (they change the settings, and their defaults
//! are upstream's or differ on purpose, listed below), that every other flag gives one
//! warning naming it, and that `--feature-gates` knows exactly upstream's gates.

#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;

use std::collections::BTreeMap;
use std::process::Command;

use route_controller::cli::ccm::{GATES, Stage};
use route_controller::cli::flags::{self, Kind, Outcome, Use};
use route_controller::cli::run::{RunArgs, SPEC};
use serde_json::Value;

/// What every command line of this test starts with (both are required).
const BASE: [&str; 2] = ["--cloud-provider=fake", "--cluster-cidr=10.244.0.0/16"];

/// Defaults of applying flags that differ from upstream's on purpose.
const DELIBERATE_DEFAULTS: &[(&str, &str)] = &[
    // Upstream has no default cloud; here the flag is required.
    (
        "cloud-provider",
        "required: without a cloud there is nothing to do",
    ),
    // Upstream's route controller ignores --cluster-cidr without
    // --allocate-node-cidrs; here it is what decides which routes are ours.
    (
        "cluster-cidr",
        "required: it bounds what may ever be deleted",
    ),
    // The CCM beside it holds 10258 on the host network: the manifests and run share
    // one port of their own, so that `run` starts on a CCM's host as it is.
    (
        "secure-port",
        "10270, not the CCM's 10258, which the CCM beside it holds",
    ),
    // A name of our own, so that route-controller can run beside a CCM whose route
    // controller is turned off, each holding its own lease.
    (
        "leader-elect-resource-name",
        "route-controller, not cloud-controller-manager",
    ),
    // klog's 0 prints almost nothing of what an operator needs; 2 is what
    // CCM manifests pass.
    ("v", "2, as CCM manifests set it"),
];

struct UpstreamFlag {
    name: String,
    shorthand: String,
    kind: String,
    default: String,
}

struct Upstream {
    flags: Vec<UpstreamFlag>,
    gates: Vec<Value>,
}

fn upstream() -> Upstream {
    let binary = kube_apiserver::ccm_flags_binary();
    let out = Command::new(binary)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", binary.display()));
    assert!(
        out.status.success(),
        "{} failed: {}",
        binary.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).expect("ccm-flags prints JSON");
    let text = |f: &Value, k: &str| f[k].as_str().unwrap_or_default().to_string();
    let flags = json["flags"]
        .as_array()
        .expect("flags")
        .iter()
        .map(|f| UpstreamFlag {
            name: text(f, "name"),
            shorthand: text(f, "shorthand"),
            kind: text(f, "type"),
            default: text(f, "default"),
        })
        .collect();
    Upstream {
        flags,
        gates: json["gates"].as_array().expect("gates").clone(),
    }
}

/// How our parser must read a pflag type.
fn kind_of(go_type: &str) -> Kind {
    match go_type {
        "bool" | "version" => Kind::Bool,
        "duration" => Kind::Duration,
        "int" | "int32" | "int64" | "uint" | "uint32" | "Level" => Kind::Int,
        "float32" | "float64" => Kind::Float,
        "stringSlice" | "strings" | "int32Slice" | "ipSlice" | "namedCertKey" => Kind::List,
        "mapStringBool"
        | "mapStringString"
        | "colonSeparatedMultimapStringString"
        | "pattern=N,..."
        | "moduleSpec" => Kind::Map,
        _ => Kind::String,
    }
}

/// A value of the flag's type that differs from its default, so that a flag that
/// applies must change the settings.
fn value_for(name: &str, kind: Kind) -> &'static str {
    match name {
        "cloud-provider" => "aws",
        "cluster-cidr" => "10.0.0.0/8",
        "feature-gates" => "CloudControllerManagerWatchBasedRoutesReconciliation=true",
        "leader-elect-lease-duration" => "20s",
        "leader-elect-renew-deadline" => "12s",
        "leader-elect-retry-period" => "3s",
        "leader-elect-resource-lock" => "leases",
        "leader-elect-resource-namespace" => "ccm-system",
        "logging-format" => "json",
        "v" => "5",
        "bind-address" => "127.0.0.1",
        "authorization-always-allow-paths" => "/healthz,/metrics",
        // One client-go has a serializer for; another is refused at start.
        "kube-api-content-type" => "application/json",
        _ => match kind {
            Kind::Bool => "false",
            Kind::Duration => "37s",
            Kind::Int => "5",
            Kind::Float => "7.5",
            Kind::List => "a,b",
            Kind::Map => "a=b",
            Kind::String => "x",
        },
    }
}

/// Flags that only go together: each is given with the other.
fn companions(name: &str) -> Vec<&'static str> {
    match name {
        "tls-cert-file" => vec!["--tls-private-key-file=key.pem"],
        "tls-private-key-file" => vec!["--tls-cert-file=cert.pem"],
        _ => vec![],
    }
}

/// The settings, with the random part (the lease identity) taken out, for comparing.
fn settings_of(args: &[&str]) -> Result<String, String> {
    let parsed = RunArgs::parse(args).map_err(|e| e.0)?;
    let mut settings = parsed.settings().map_err(|e| e.0)?;
    if let Some(lease) = settings.lease.as_mut() {
        lease.identity.clear();
    }
    Ok(format!("{settings:?}"))
}

fn ours(name: &str) -> Option<&'static flags::Flag> {
    SPEC.flags().find(|f| f.name == name)
}

#[test]
fn every_upstream_flag_is_accepted_with_its_type_and_the_ones_that_apply_keep_their_meaning() {
    let upstream = upstream();
    assert!(
        upstream.flags.len() > 60,
        "the CCM has some 85 flags, ccm-flags printed {}",
        upstream.flags.len()
    );
    let baseline = settings_of(&BASE).expect("the base command line is valid");
    let mut problems = Vec::new();
    for f in &upstream.flags {
        let Some(flag) = ours(&f.name) else {
            problems.push(format!("--{} ({}) is unknown to run", f.name, f.kind));
            continue;
        };
        if flag.kind != kind_of(&f.kind) {
            problems.push(format!(
                "--{}: upstream's type is {}, ours {:?}",
                f.name, f.kind, flag.kind
            ));
        }
        if f.shorthand != flag.short.map(String::from).unwrap_or_default() {
            problems.push(format!(
                "--{}: upstream's shorthand is {:?}, ours {:?}",
                f.name, f.shorthand, flag.short
            ));
        }
        let deliberate = DELIBERATE_DEFAULTS.iter().any(|(n, _)| *n == f.name);
        let default_matches = flag.default == f.default
            || (flag.kind == Kind::Duration && same_duration(flag.default, &f.default))
            || (flag.kind == Kind::Float && same_number(flag.default, &f.default))
            || (flag.kind == Kind::Bool && flag.default.is_empty() && f.default == "false");
        if !deliberate && !default_matches && flag.role == Use::Ignored {
            problems.push(format!(
                "--{}: upstream's default is {:?}, help shows {:?}",
                f.name, f.default, flag.default
            ));
        }
        if f.name == "help" || f.name == "version" {
            let args = vec![format!("--{}", f.name)];
            let outcome = flags::parse(&SPEC, &args);
            let printed = matches!(outcome, Ok(Outcome::Help(_) | Outcome::Version(_)));
            if !printed {
                problems.push(format!("--{} does not print: {outcome:?}", f.name));
            }
            continue;
        }
        let given = format!("--{}={}", f.name, value_for(&f.name, flag.kind));
        let mut args: Vec<&str> = BASE.to_vec();
        args.push(&given);
        args.extend(companions(&f.name));
        let parsed = match RunArgs::parse(&args) {
            Ok(p) => p,
            Err(e) => {
                problems.push(format!("{given}: refused: {e}"));
                continue;
            }
        };
        let warnings = parsed.ignored_warnings();
        let settings = settings_of(&args);
        match (flag.role, settings) {
            (_, Err(e)) => problems.push(format!("{given}: invalid: {e}")),
            (Use::Ignored, Ok(s)) => {
                let named = warnings
                    .iter()
                    .filter(|w| w.contains(&format!("--{} ", f.name)))
                    .count();
                if warnings.len() != 1 || named != 1 {
                    problems.push(format!(
                        "{given}: expected one warning naming it: {warnings:?}"
                    ));
                }
                if s != baseline {
                    problems.push(format!("{given}: ignored, yet it changed the settings"));
                }
            }
            (Use::Applies, Ok(s)) => {
                if !warnings.is_empty() {
                    problems.push(format!("{given}: applies, yet warned: {warnings:?}"));
                }
                // leases is the only lock there is: its value is its default.
                if s == baseline && f.name != "leader-elect-resource-lock" {
                    problems.push(format!("{given}: applies, yet changed nothing"));
                }
                if !deliberate && !default_matches {
                    problems.push(format!(
                        "--{}: applies with default {:?}, upstream's is {:?}; list it in \
                         DELIBERATE_DEFAULTS with the reason, or use upstream's",
                        f.name, flag.default, f.default
                    ));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems over {} upstream flags:\n{}",
        problems.len(),
        upstream.flags.len(),
        problems.join("\n")
    );
}

#[test]
fn the_whole_upstream_flag_set_on_one_command_line_gives_one_warning_per_ignored_flag() {
    let upstream = upstream();
    let given: Vec<(String, Use)> = upstream
        .flags
        .iter()
        .filter(|f| f.name != "help" && f.name != "version")
        .map(|f| {
            let kind = kind_of(&f.kind);
            let role = ours(&f.name).map_or(Use::Applies, |flag| flag.role);
            (format!("--{}={}", f.name, value_for(&f.name, kind)), role)
        })
        .collect();
    let mut args: Vec<&str> = BASE.to_vec();
    args.extend(given.iter().map(|(a, _)| a.as_str()));
    let parsed = RunArgs::parse(&args).expect("every upstream flag at once parses");
    parsed
        .settings()
        .unwrap_or_else(|e| panic!("every upstream flag at once is valid: {e}"));
    let ignored = given.iter().filter(|(_, r)| *r == Use::Ignored).count();
    assert_eq!(parsed.ignored_warnings().len(), ignored);
}

#[test]
fn feature_gates_are_exactly_upstreams() {
    let upstream = upstream();
    let theirs: BTreeMap<String, (String, bool, bool)> = upstream
        .gates
        .iter()
        .map(|g| {
            (
                g["name"].as_str().unwrap_or_default().to_string(),
                (
                    g["preRelease"].as_str().unwrap_or_default().to_string(),
                    g["default"].as_bool().unwrap_or_default(),
                    g["lockToDefault"].as_bool().unwrap_or_default(),
                ),
            )
        })
        .collect();
    let stage = |s: Stage| match s {
        Stage::Alpha => "ALPHA",
        Stage::Beta => "BETA",
        Stage::Ga => "",
        Stage::Deprecated => "DEPRECATED",
    };
    let mine: BTreeMap<String, (String, bool, bool)> = GATES
        .iter()
        .map(|g| {
            (
                g.name.to_string(),
                (stage(g.stage).to_string(), g.default, g.locked),
            )
        })
        .collect();
    // GA is "" in component-base; tolerate "GA" as well.
    let normal = |m: BTreeMap<String, (String, bool, bool)>| {
        m.into_iter()
            .map(|(k, (s, d, l))| (k, (if s == "GA" { String::new() } else { s }, d, l)))
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(normal(mine), normal(theirs));
    assert!(GATES.iter().any(|g| g.name == "AllAlpha"));
    assert!(
        GATES
            .iter()
            .any(|g| g.name == route_controller::cli::run::WATCH_GATE)
    );
}

/// Whether two Go durations are equal (`12h` and `12h0m0s`).
fn same_duration(a: &str, b: &str) -> bool {
    millis(a).is_some() && millis(a) == millis(b)
}

/// A Go duration of h, m, s and ms parts, in milliseconds.
fn millis(s: &str) -> Option<u64> {
    let (mut total, mut rest) = (0u64, s);
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        let number: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = [("ms", 1), ("h", 3_600_000), ("m", 60_000), ("s", 1000)]
            .into_iter()
            .find(|(u, _)| rest.starts_with(u))
            .map(|(u, f)| (f, u.len()))?;
        total += number * unit;
        rest = &rest[len..];
    }
    Some(total)
}

fn same_number(a: &str, b: &str) -> bool {
    matches!((a.parse::<f64>(), b.parse::<f64>()), (Ok(x), Ok(y)) if x == y)
}
