//! `--cloud-provider=exec`: routes kept by a plugin, a program that speaks the
//! [`protocol`] (one JSON request on stdin, one JSON reply on stdout).
//!
//! **One process per call**, as kubectl's credential plugins and CNI plugins run.
//! Chosen over one long-lived process speaking line-delimited JSON because:
//! - a plugin is then trivially a shell script, and its state cannot drift: a
//!   plugin that leaks, wedges or dies affects one call, and the next call starts it
//!   afresh ("restarted" by construction);
//! - a timeout is one kill of one process group, with nothing to resynchronise (a
//!   long-lived process that missed a deadline leaves its half-written reply on the
//!   stream, and every later reply would have to be matched by ID);
//! - the cost, one fork and exec per call (a few milliseconds), is small next to the
//!   route change itself, and the controller makes few calls: one per route change and
//!   one list per pass or resync, paced by the budget the plugin declares.
//!
//! A plugin that crashes, hangs or prints garbage is started again with backoff: after
//! such a failure, calls within [`backoff`] of it are answered at once as
//! [`CloudErrorKind::Retry`] without starting anything, so a broken plugin is not
//! forked in a tight loop. A reply with an `error` is not a crash and resets it.
//!
//! Fencing: the [`Fence`] is checked right before each process starts, so no call
//! starts after it closes. A call already running is bounded by the plugin's timeout
//! plus the kill ([`Config::timeout`] + [`KILL_GRACE`]), which is declared to the fence
//! ([`Fence::covers`]) so a new leader waits that long before trusting its list.

pub mod config;
pub(crate) mod process;
pub mod protocol;

use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use config::Config;
use protocol::{Reply, Request, Verb};

use crate::fence::Fence;
use crate::model::Route;
use crate::provider::{
    Budget, CloudError, CloudErrorKind, Meter, NodeDirectory, RouteChange, RouteTarget, Routes,
    TableUsage,
};
use crate::sync::lock;

/// The words of the error of a plugin that could not be started at all (its command
/// is missing or not executable), for `plugin-check`, which stops there.
pub const CANNOT_START: &str = "cannot start";

/// What a timed-out call may take beyond its timeout: the kill and the reap.
pub const KILL_GRACE: Duration = Duration::from_secs(1);

/// Lines of a plugin's stderr logged per call (each line marked as the plugin's).
const STDERR_LINES_LOGGED: usize = 20;

/// How long calls wait after `failures` crashes in a row: 500 ms, doubling, at most
/// 30 s.
pub fn backoff(failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let doublings = failures.saturating_sub(1).min(6);
    (Duration::from_millis(500) * 2u32.pow(doublings)).min(Duration::from_secs(30))
}

/// What a plugin's `describe` declares, mapped to what the core can use.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Description {
    /// The budget the controller spends (`None`: the plugin declared none).
    pub budget: Option<Budget>,
    /// Changes one call can carry (default 1). Above 1, the controller sends a pass's
    /// creates and deletes as `apply` calls of at most this many changes, one at a
    /// time ([`Routes::batch_size`], DESIGN, invariant 11).
    pub batch_size: u32,
    /// The tables the plugin writes and the routes each may hold, if it said.
    pub tables: Vec<(String, Option<usize>)>,
    /// The plugin implements `describe`.
    pub implemented: bool,
}

/// The exec provider.
pub struct ExecRoutes {
    config: Config,
    fence: Fence,
    description: Description,
    /// The tables' usage at the last list.
    tables: Mutex<Vec<TableUsage>>,
    health: Mutex<Health>,
}

/// Crashes in a row, for the backoff.
#[derive(Debug, Default)]
struct Health {
    failures: u32,
    last_failure: Option<(Instant, String)>,
}

impl ExecRoutes {
    /// The provider, without asking the plugin anything (no `describe`).
    pub fn new(config: Config) -> ExecRoutes {
        ExecRoutes {
            config,
            fence: Fence::open(),
            description: Description {
                batch_size: 1,
                ..Description::default()
            },
            tables: Mutex::new(Vec::new()),
            health: Mutex::new(Health::default()),
        }
    }

    /// The provider, after asking the plugin what it allows (`describe`). A plugin that
    /// does not implement `describe` gets the defaults. `Err` with
    /// [`CloudErrorKind::Invalid`] for a plugin that cannot run or speaks wrongly (a
    /// setting to fix); other kinds for a plugin that failed this once.
    pub fn connect(config: Config) -> Result<ExecRoutes, CloudError> {
        let mut provider = ExecRoutes::new(config);
        provider.description = provider.describe()?;
        Ok(provider)
    }

    /// Every call from now on first passes `fence`, which learns how long a call may
    /// still run after it closed.
    pub fn with_fence(mut self, fence: Fence) -> ExecRoutes {
        fence.covers(self.config.timeout + KILL_GRACE);
        self.fence = fence;
        self
    }

    /// The plugin's name in logs and errors.
    pub fn plugin_name(&self) -> &str {
        &self.config.name
    }

    /// What `describe` declared (the defaults if the plugin does not implement it).
    pub fn description(&self) -> &Description {
        &self.description
    }

    /// Asks the plugin's `describe` and maps it.
    pub fn describe(&self) -> Result<Description, CloudError> {
        let request = Request::new(Verb::Describe, "").to_json();
        let reply = match self.exchange(Verb::Describe.as_str(), request) {
            Ok(reply) => reply,
            Err(f) if f.wire_kind.as_deref() == Some(protocol::UNKNOWN_VERB) => {
                return Ok(Description {
                    batch_size: 1,
                    ..Description::default()
                });
            }
            Err(f) => return Err(f.error),
        };
        describe_reply(&self.config.name, reply)
    }

    /// Runs one call: the fence, the backoff, the process, and the reply read into a
    /// [`Reply`] with no `error` (a reply's error is returned as `Err`).
    pub fn call(&self, request: &Request<'_>) -> Result<Reply, CloudError> {
        self.call_json(request.verb().as_str(), request.to_json())
    }

    /// [`ExecRoutes::call`] with a request as JSON text, for `plugin-check`, which also
    /// sends requests the protocol does not allow (an unknown verb, another version).
    /// `verb` names the call in errors.
    pub fn call_json(&self, verb: &str, request: String) -> Result<Reply, CloudError> {
        self.exchange(verb, request).map_err(|f| f.error)
    }

    /// [`ExecRoutes::call_json`], keeping the kind the plugin wrote in its error.
    fn exchange(&self, verb: &str, request: String) -> Result<Reply, Failure> {
        self.fence.check().map_err(Failure::reply)?;
        self.backing_off().map_err(Failure::reply)?;
        Meter::request();
        let finished = process::run(process::Invocation {
            command: &self.config.command,
            args: &self.config.args,
            env: &self.config.env,
            stdin: request.into_bytes(),
            timeout: self.config.timeout,
            max_output: self.config.max_output_bytes,
        });
        let result = match finished {
            Ok(finished) => self.outcome(verb, finished),
            Err(e) => Err(Failure::crash(CloudError::invalid(format!(
                "plugin {}: {CANNOT_START} {:?}: {e}; check {}= in --cloud-config (a path to an \
                 executable file, or a name found in PATH)",
                self.config.name,
                self.config.command,
                config::KEY_COMMAND
            )))),
        };
        self.record(&result);
        result
    }

    /// Refuses a call at once while the plugin is backing off after a crash.
    fn backing_off(&self) -> Result<(), CloudError> {
        let health = lock(&self.health);
        let Some((at, why)) = &health.last_failure else {
            return Ok(());
        };
        let wait = backoff(health.failures).saturating_sub(at.elapsed());
        if wait.is_zero() {
            return Ok(());
        }
        Err(CloudError::new(
            CloudErrorKind::Retry { after: Some(wait) },
            format!(
                "plugin {}: not started for {} after {} failed call(s) in a row (last: {why})",
                self.config.name,
                crate::duration::format(wait),
                health.failures
            ),
        ))
    }

    /// Counts crashes for the backoff: a call that ended with a reply, even an error
    /// reply, resets it.
    fn record(&self, result: &Result<Reply, Failure>) {
        let mut health = lock(&self.health);
        match result {
            Err(Failure {
                error, crash: true, ..
            }) => {
                health.failures = health.failures.saturating_add(1);
                health.last_failure = Some((Instant::now(), error.message.clone()));
            }
            _ => *health = Health::default(),
        }
    }

    /// What a finished process means.
    fn outcome(&self, verb: &str, f: process::Finished) -> Result<Reply, Failure> {
        let name = &self.config.name;
        self.log_stderr(verb, &f);
        let (code, how) = match f.ended {
            process::Ended::TimedOut => {
                return Err(crash(format!(
                    "plugin {name}: {} did not finish within {}; killed it and every process it \
                     started. Make the plugin answer sooner or raise {}= in --cloud-config",
                    verb,
                    crate::duration::format(self.config.timeout),
                    config::KEY_TIMEOUT
                )));
            }
            process::Ended::OutputTooLarge => {
                return Err(crash(format!(
                    "plugin {name}: {} printed more than {} bytes on stdout; killed it. Print one \
                     JSON reply on stdout (logs go to stderr), or raise {}= in --cloud-config",
                    verb,
                    self.config.max_output_bytes,
                    config::KEY_MAX_OUTPUT
                )));
            }
            process::Ended::Signal(signal) => {
                return Err(crash(format!(
                    "plugin {name}: {} was killed by signal {signal} (it crashed or was killed); \
                     its stderr is in the log",
                    verb
                )));
            }
            process::Ended::Exited(code) => (code, format!("exit status {code}")),
        };
        if code != 0 && f.stdout.iter().all(u8::is_ascii_whitespace) {
            let kind = protocol::kind_of_exit_code(code);
            let stderr = String::from_utf8_lossy(&f.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            let message = format!(
                "plugin {name}: {} failed with {how} and no reply{}",
                verb,
                last.map(|l| format!(": {}", protocol::excerpt(l.trim(), 200)))
                    .unwrap_or_default()
            );
            return Err(match kind {
                CloudErrorKind::Ambiguous => crash(message),
                kind => Failure::reply(CloudError::new(kind, message)),
            });
        }
        let reply = protocol::parse_reply(name, verb, &f.stdout).map_err(Failure::crash)?;
        if let Some(error) = protocol::reply_error(name, verb, &reply) {
            return Err(Failure {
                wire_kind: reply.error.map(|e| e.kind),
                ..Failure::reply(error)
            });
        }
        if code != 0 {
            // A reply without an error but a failing exit: the exit code decides.
            return Err(Failure::reply(CloudError::new(
                protocol::kind_of_exit_code(code),
                format!(
                    "plugin {name}: {} printed a reply without \"error\" but failed with {how}; \
                     exit 0 with a reply, or put the failure in the reply's \"error\"",
                    verb
                ),
            )));
        }
        Ok(reply)
    }

    /// The plugin's stderr, into the log, bounded and marked as the plugin's: a warning
    /// when the call failed, info otherwise (a plugin that talks on success is rare,
    /// and what it says should be seen at the default level).
    fn log_stderr(&self, verb: &str, f: &process::Finished) {
        if f.stderr.is_empty() {
            return;
        }
        let failed = !matches!(f.ended, process::Ended::Exited(0));
        let level = if failed {
            log::Level::Warn
        } else {
            log::Level::Info
        };
        let text = String::from_utf8_lossy(&f.stderr);
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        for line in lines.by_ref().take(STDERR_LINES_LOGGED) {
            log::log!(target: "plugin", level, "plugin {} {}: stderr: {}", self.config.name, verb, protocol::excerpt(line, 500));
        }
        let more = lines.count();
        if more > 0 || f.stderr_cut {
            log::log!(target: "plugin", level, "plugin {} {}: stderr: … cut (kept {} lines, at most {} bytes)", self.config.name, verb, STDERR_LINES_LOGGED, process::STDERR_KEPT);
        }
    }
}

/// A failed call, and whether it counts as a crash for the backoff (the plugin did
/// not answer in the protocol: it could not start, hung, died, or printed garbage).
struct Failure {
    error: CloudError,
    crash: bool,
    /// The error's kind as the plugin wrote it, if it replied with one.
    wire_kind: Option<String>,
}

impl Failure {
    fn crash(error: CloudError) -> Failure {
        Failure {
            error,
            crash: true,
            wire_kind: None,
        }
    }

    /// The plugin answered, with an error (or was not started): not a crash.
    fn reply(error: CloudError) -> Failure {
        Failure {
            error,
            crash: false,
            wire_kind: None,
        }
    }
}

fn crash(message: String) -> Failure {
    Failure::crash(CloudError::ambiguous(message))
}

/// Maps a `describe` reply to what the core can express today.
fn describe_reply(name: &str, reply: Reply) -> Result<Description, CloudError> {
    let budget = match reply.budget {
        None => None,
        Some(b) => {
            let rps = b.requests_per_second.unwrap_or(DEFAULT_REQUESTS_PER_SECOND);
            if !rps.is_finite() || rps <= 0.0 {
                return Err(CloudError::invalid(format!(
                    "plugin {name}: describe's budget.requestsPerSecond {rps} is not a positive \
                     number; declare the calls per second the router takes, or leave it out"
                )));
            }
            let burst = b.burst.unwrap_or(rps.ceil() as u32).max(1);
            let at_once = b.mutations_at_once.unwrap_or(DEFAULT_CHANGES_AT_ONCE);
            Some(Budget::new(rps, burst).mutations_at_once(at_once))
        }
    };
    let batch_size = match reply.batch_size {
        None => 1,
        Some(0) => {
            return Err(CloudError::invalid(format!(
                "plugin {name}: describe's batchSize is 0; declare at least 1 (one change per \
                 call), or leave it out"
            )));
        }
        Some(n) => n,
    };
    Ok(Description {
        budget,
        batch_size,
        tables: reply
            .tables
            .into_iter()
            .map(|t| (t.name, t.limit))
            .collect(),
        implemented: true,
    })
}

/// The rate used when `describe` declares a budget without `requestsPerSecond`.
pub const DEFAULT_REQUESTS_PER_SECOND: f64 = 1000.0;

/// The changes that run at once when `describe` declares no `mutationsAtOnce` (or no
/// budget at all): the controller's fixed default before it followed the budget.
pub const DEFAULT_CHANGES_AT_ONCE: usize = 16;

impl Routes for ExecRoutes {
    fn provider_name(&self) -> &'static str {
        "exec"
    }

    fn list_routes(
        &self,
        cluster_name: &str,
        _nodes: &NodeDirectory,
    ) -> Result<Vec<Route>, CloudError> {
        let mut reply = self.call(&Request::new(Verb::List, cluster_name))?;
        let tables = std::mem::take(&mut reply.tables);
        let routes = protocol::routes_of(&self.config.name, reply)?;
        *lock(&self.tables) = self.usage(&tables);
        Ok(routes)
    }

    fn create_route(
        &self,
        cluster_name: &str,
        name_hint: &str,
        route: &Route,
        target: &RouteTarget,
    ) -> Result<(), CloudError> {
        self.call(&Request::create(cluster_name, name_hint, route, target))
            .map(|_| ())
    }

    fn delete_route(&self, cluster_name: &str, route: &Route) -> Result<(), CloudError> {
        self.call(&Request::delete(cluster_name, route)).map(|_| ())
    }

    /// The budget `describe` declared; without one, [`DEFAULT_CHANGES_AT_ONCE`]
    /// changes at once: a plugin is a process per call, and the controller's own
    /// default (as many as the budget allows, up to 200) would start hundreds of them
    /// on a router that never said it takes that.
    fn budget(&self) -> Option<Budget> {
        Some(self.description.budget.unwrap_or_else(|| {
            let rate = DEFAULT_REQUESTS_PER_SECOND;
            Budget::new(rate, rate as u32).mutations_at_once(DEFAULT_CHANGES_AT_ONCE)
        }))
    }

    /// The `batchSize` that `describe` declared (at [`ExecRoutes::connect`]), when it
    /// is above 1: the plugin then gets `apply`. Otherwise `None`: one change per call.
    fn batch_size(&self) -> Option<usize> {
        let n = self.description.batch_size;
        (n > 1).then(|| usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// One `apply` call for every change (through the same fence, backoff and timeout
    /// as any call), its outcomes mapped one by one.
    fn apply_changes(
        &self,
        cluster_name: &str,
        changes: &[RouteChange],
    ) -> Result<Vec<Result<(), CloudError>>, CloudError> {
        if changes.is_empty() {
            return Ok(Vec::new());
        }
        let reply = self.call(&Request::apply(cluster_name, changes))?;
        protocol::outcomes_of(&self.config.name, changes, reply)
    }

    fn route_tables(&self) -> Vec<TableUsage> {
        lock(&self.tables).clone()
    }
}

impl ExecRoutes {
    /// The tables of a list reply with a known size and limit (the list's limit, else
    /// `describe`'s for that table).
    fn usage(&self, listed: &[protocol::WireTable]) -> Vec<TableUsage> {
        listed
            .iter()
            .filter_map(|t| {
                let limit = t.limit.or_else(|| {
                    self.description
                        .tables
                        .iter()
                        .find(|(name, _)| *name == t.name)
                        .and_then(|(_, limit)| *limit)
                })?;
                // Both families' counts, or one count for both.
                let by_family = t.routes_ipv4.zip(t.routes_ipv6);
                let routes = match by_family {
                    Some((v4, v6)) => v4.max(v6),
                    None => t.routes?,
                };
                Some(TableUsage {
                    table: t.name.clone(),
                    routes,
                    limit,
                    by_family,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plugin written as a shell script in a temp file.
    fn plugin(name: &str, script: &str) -> (ExecRoutes, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "rc-exec-unit-{}-{name}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut config = Config::new(path.to_string_lossy());
        config.timeout = Duration::from_millis(500);
        (ExecRoutes::new(config), dir)
    }

    const V: &str = protocol::API_VERSION;

    /// Guards the per-family counts of a plugin's table: both given, the table's usage
    /// is per family (the core then measures an IPv6 create against the IPv6 count
    /// only); one of them alone is one count for both, from `routes`.
    #[test]
    fn a_list_reply_with_both_families_counts_gives_usage_per_family() {
        let (p, dir) = plugin(
            "families",
            &format!(
                r#"cat >/dev/null; echo '{{"apiVersion":"{V}","routes":[],"tables":[{{"name":"t","routesIPv4":10,"routesIPv6":2,"limit":10}},{{"name":"u","routes":4,"routesIPv4":3,"limit":10}}]}}'"#
            ),
        );
        p.list_routes("c", &NodeDirectory::default()).unwrap();
        let usage = p.route_tables();
        assert_eq!(
            usage[0],
            TableUsage {
                table: "t".into(),
                routes: 10,
                limit: 10,
                by_family: Some((10, 2)),
            }
        );
        assert_eq!(
            (usage[0].routes_of(false), usage[0].routes_of(true)),
            (10, 2)
        );
        assert_eq!((usage[1].routes, usage[1].by_family), (4, None));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_list_reply_gives_routes_and_table_usage() {
        let (p, dir) = plugin(
            "lister",
            &format!(
                r#"cat >/dev/null; echo '{{"apiVersion":"{V}","routes":[{{"destinationCIDR":"10.244.1.0/24","targetNode":"a"}}],"tables":[{{"name":"t","routes":3,"limit":10}}]}}'"#
            ),
        );
        let routes = p.list_routes("c", &NodeDirectory::default()).unwrap();
        assert_eq!(routes.len(), 1);
        assert_eq!(routes[0].target_node, "a");
        assert_eq!(
            p.route_tables(),
            [TableUsage {
                table: "t".into(),
                routes: 3,
                limit: 10,
                by_family: None,
            }]
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn exit_codes_without_a_reply_map_to_kinds_and_stderr_is_in_the_message() {
        let (p, dir) = plugin("gone", "echo 'no such route' >&2; exit 3");
        let e = p.delete_route("c", &Route::default()).unwrap_err();
        assert_eq!(e.kind, CloudErrorKind::NotFound);
        assert!(
            e.message.contains("no such route") && e.message.contains("plugin gone"),
            "{e}"
        );
        // Not a crash: the next call starts at once.
        assert!(p.backing_off().is_ok());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_crashing_plugin_is_started_again_only_after_backoff() {
        let (p, dir) = plugin("crash", "kill -SEGV $$");
        let e = p.delete_route("c", &Route::default()).unwrap_err();
        assert_eq!(e.kind, CloudErrorKind::Ambiguous);
        assert!(e.message.contains("signal"), "{e}");
        let e = p.delete_route("c", &Route::default()).unwrap_err();
        assert!(
            matches!(e.kind, CloudErrorKind::Retry { after: Some(_) }),
            "{e:?}"
        );
        assert!(e.message.contains("not started"), "{e}");
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(3), Duration::from_secs(2));
        assert_eq!(backoff(100), Duration::from_secs(30));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn garbage_or_a_timeout_is_ambiguous_names_the_fix_and_backs_off() {
        let (p, dir) = plugin("garbage", "echo 'hello there'");
        let e = p.list_routes("c", &NodeDirectory::default()).unwrap_err();
        assert_eq!(e.kind, CloudErrorKind::Ambiguous);
        assert!(
            e.message.contains("plugin garbage: list") && e.message.contains("stderr"),
            "{e}"
        );
        assert!(p.backing_off().is_err(), "garbage counts as a crash");
        let (p, dir2) = plugin("slow", "sleep 5");
        let started = Instant::now();
        let e = p
            .create_route(
                "c",
                "uid",
                &Route::default(),
                &RouteTarget {
                    node_name: "a".into(),
                    provider_id: None,
                    addresses: Vec::new(),
                },
            )
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(e.kind, CloudErrorKind::Ambiguous);
        assert!(
            e.message.contains("did not finish within 500ms") && e.message.contains("Timeout="),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(dir);
        let _ = std::fs::remove_dir_all(dir2);
    }

    #[test]
    fn no_call_starts_once_the_fence_is_closed_and_the_bound_is_declared() {
        let (p, dir) = plugin("fenced", &format!("touch {}/ran", "$(dirname $0)"));
        let fence = Fence::open();
        let p = p.with_fence(fence.clone());
        assert_eq!(
            fence.request_bound(),
            Some(Duration::from_millis(500) + KILL_GRACE)
        );
        fence.close();
        let e = p.list_routes("c", &NodeDirectory::default()).unwrap_err();
        assert_eq!(e.kind, CloudErrorKind::Fenced);
        assert!(
            !dir.join("ran").exists(),
            "the plugin ran after the fence closed"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn describe_maps_budget_batch_size_and_tables_and_is_optional() {
        let (p, dir) = plugin(
            "desc",
            &format!(
                r#"echo '{{"apiVersion":"{V}","budget":{{"requestsPerSecond":5,"burst":10,"mutationsAtOnce":2}},"batchSize":50,"tables":[{{"name":"t","limit":7}}]}}'"#
            ),
        );
        let d = p.describe().unwrap();
        assert_eq!(d.budget, Some(Budget::new(5.0, 10).mutations_at_once(2)));
        assert_eq!(d.batch_size, 50);
        assert_eq!(d.tables, [("t".to_string(), Some(7))]);
        let (p, dir2) = plugin(
            "nodesc",
            &format!(r#"echo '{{"apiVersion":"{V}","error":{{"kind":"UnknownVerb"}}}}'"#),
        );
        let d = p.describe().unwrap();
        assert!(!d.implemented && d.budget.is_none() && d.batch_size == 1);
        // Without a budget, or one without mutationsAtOnce, 16 changes at once: not
        // the controller's 200 processes.
        let quiet = ExecRoutes {
            description: d,
            ..p
        };
        assert_eq!(
            quiet.budget().map(|b| b.mutations_at_once),
            Some(DEFAULT_CHANGES_AT_ONCE)
        );
        let reply = |budget: &str| {
            serde_json::from_str::<Reply>(&format!(r#"{{"apiVersion":"{V}","budget":{budget}}}"#))
                .unwrap()
        };
        let d = describe_reply("p", reply(r#"{"requestsPerSecond":5}"#)).unwrap();
        assert_eq!(d.budget.map(|b| b.mutations_at_once), Some(16));
        let _ = std::fs::remove_dir_all(dir);
        let _ = std::fs::remove_dir_all(dir2);
    }

    fn two_changes() -> Vec<RouteChange> {
        let route = |cidr: &str| Route {
            destination_cidr: cidr.into(),
            target_node: "a".into(),
            ..Route::default()
        };
        vec![
            RouteChange::Create {
                route: route("10.244.1.0/24"),
                name_hint: "uid".into(),
                target: RouteTarget {
                    node_name: "a".into(),
                    provider_id: None,
                    addresses: Vec::new(),
                },
            },
            RouteChange::Delete {
                route: route("10.244.2.0/24"),
            },
        ]
    }

    #[test]
    fn apply_sends_one_call_with_every_change_and_maps_each_outcome() {
        // The plugin keeps the request, and answers only an apply of two changes.
        let (p, dir) = plugin(
            "batcher",
            &format!(
                r#"cat > "$(dirname $0)/request"; echo '{{"apiVersion":"{V}","outcomes":[{{}},{{"error":{{"kind":"NotFound","message":"no such route"}}}}]}}'"#
            ),
        );
        let outcomes = p.apply_changes("c", &two_changes()).unwrap();
        assert!(outcomes[0].is_ok(), "{outcomes:?}");
        let e = outcomes[1].as_ref().unwrap_err();
        assert_eq!(e.kind, CloudErrorKind::NotFound);
        assert!(
            e.message.contains("plugin batcher: apply, change 2 of 2"),
            "{e}"
        );
        let sent: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("request")).unwrap()).unwrap();
        assert_eq!(sent["verb"], "apply");
        assert_eq!(sent["changes"][0]["action"], "create");
        assert_eq!(
            sent["changes"][0]["route"]["destinationCIDR"],
            "10.244.1.0/24"
        );
        assert_eq!(sent["changes"][1]["action"], "delete");
        assert_eq!(
            sent["changes"][1]["route"]["destinationCIDR"],
            "10.244.2.0/24"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn apply_with_too_few_outcomes_is_an_ambiguous_error_naming_the_plugin_and_the_fix() {
        let (p, dir) = plugin(
            "short",
            &format!(r#"cat >/dev/null; echo '{{"apiVersion":"{V}","outcomes":[{{}}]}}'"#),
        );
        let e = p.apply_changes("c", &two_changes()).unwrap_err();
        assert_eq!(e.kind, CloudErrorKind::Ambiguous);
        assert!(
            e.message
                .contains("plugin short: apply of 2 change(s) replied 1 outcome(s)")
                && e.message.contains("reply one outcome per change"),
            "{e}"
        );
        // A whole-call error stands for every change.
        let (p, dir2) = plugin(
            "busy",
            &format!(
                r#"cat >/dev/null; echo '{{"apiVersion":"{V}","error":{{"kind":"Conflict","message":"locked"}}}}'"#
            ),
        );
        let e = p.apply_changes("c", &two_changes()).unwrap_err();
        assert_eq!(e.kind, CloudErrorKind::Conflict);
        assert!(
            e.message
                .contains("plugin busy: apply failed: Conflict: locked"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(dir);
        let _ = std::fs::remove_dir_all(dir2);
    }

    #[test]
    fn batching_is_declared_only_for_a_batch_size_above_one_and_apply_is_fenced() {
        let (p, dir) = plugin(
            "declares",
            &format!(r#"touch "$(dirname $0)/ran"; echo '{{"apiVersion":"{V}","batchSize":100}}'"#),
        );
        let mut p = p;
        p.description = p.describe().unwrap();
        assert_eq!(Routes::batch_size(&p), Some(100));
        p.description.batch_size = 1;
        assert_eq!(
            Routes::batch_size(&p),
            None,
            "batchSize 1: one change per call"
        );
        let _ = std::fs::remove_file(dir.join("ran"));
        let fence = Fence::open();
        let p = p.with_fence(fence.clone());
        fence.close();
        let e = p.apply_changes("c", &two_changes()).unwrap_err();
        assert_eq!(e.kind, CloudErrorKind::Fenced);
        assert!(
            !dir.join("ran").exists(),
            "apply ran after the fence closed"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
