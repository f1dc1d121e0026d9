//! `route-controller plugin-check`: drives an exec plugin through the protocol's
//! contract and prints what passes and what fails, with the fix for each.
//!
//! The contract, in order: `describe` (optional) is well formed; `list` on an empty
//! table returns no route; `create` works and the route is listed; `create` again is
//! a success (idempotent); `delete` works and the route is gone; `delete` again is
//! `NotFound`; for a plugin whose `describe` declares a `batchSize` above 1, `apply`
//! of two creates works, `apply` of a create again and a delete of a route that is
//! gone gives `{}` and `NotFound` in that order, and `apply` of a delete works; a
//! route of others (`--foreign-destination`) is neither listed, replaced nor deleted;
//! and requests the plugin must refuse (an unknown verb, another version, a
//! destination that is no CIDR) are refused in time, in the protocol.
//!
//! Every check starts the plugin afresh (no crash backoff between checks), so one
//! hanging call does not hide the others' verdicts; each call is bounded by the
//! timeout of `--cloud-config`, so the check itself never hangs.

use std::cell::Cell;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::UsageError;
use super::flags::{Flag, Kind, Parsed, Spec};
use crate::cloud::exec::protocol::{self, API_VERSION, Reply, Request};
use crate::cloud::exec::{Config, ExecRoutes};
use crate::model::{Cidr, NodeAddress, Route};
use crate::provider::{
    CloudError, CloudErrorKind, NodeDirectory, RouteChange, RouteTarget, Routes,
};

pub(super) static SPEC: Spec = Spec {
    name: "plugin-check",
    about: "Check an exec plugin (--cloud-provider=exec) against the protocol's contract: \
            list on an empty table, create, create again (idempotent), delete, delete of a \
            route that is gone (NotFound), apply (when describe declares a batchSize above \
            1: two creates, a create again with a delete of a route that is gone, a \
            delete), a route of others left alone, and refusals of bad requests in time. \
            Prints PASS or FAIL for each, with the fix; exits 1 if any fails. It creates \
            and deletes one route (two with apply: --destination and the block after it): \
            point the plugin at an empty table (or a test namespace) first.",
    env: &[],
    groups: &[(
        "Flags",
        &[
            Flag::new(
                "cloud-config",
                Kind::String,
                "the plugin's settings, as for run: Command=PATH, Arg=, Env=NAME=VALUE, \
                 Timeout= (default 10s)",
            )
            .required(),
            Flag::new(
                "destination",
                Kind::String,
                "the CIDR of the route the check creates and deletes (apply's checks also \
                 use the block of the same size after it)",
            )
            .default("10.255.0.0/24"),
            Flag::new(
                "node",
                Kind::String,
                "the node name the check's route targets",
            )
            .default("plugin-check-node"),
            Flag::new(
                "node-address",
                Kind::String,
                "the node's InternalIP: an address the router can route via (on a Linux \
                 gateway, one on a connected network)",
            )
            .default("10.255.255.2"),
            Flag::new(
                "foreign-destination",
                Kind::String,
                "the CIDR of a route that someone else put in the plugin's table before the \
                 check: the plugin must not list, replace or delete it (without this flag \
                 that check is skipped)",
            ),
            Flag::new(
                "cluster-name",
                Kind::String,
                "the cluster name sent with each call",
            )
            .default("kubernetes"),
        ],
    )],
};

/// The flags of `plugin-check`.
#[derive(Debug)]
pub struct PluginCheckArgs {
    pub cloud_config: String,
    pub destination: String,
    pub node: String,
    pub node_address: String,
    pub foreign_destination: Option<String>,
    pub cluster_name: String,
}

impl PluginCheckArgs {
    pub(super) fn from_parsed(p: &Parsed) -> Result<PluginCheckArgs, UsageError> {
        let cidr = |flag: &str, v: String| {
            Cidr::parse(&v)
                .map(|c| c.to_string())
                .map_err(|e| UsageError(format!("--{flag}: {e}")))
        };
        Ok(PluginCheckArgs {
            cloud_config: p.string("cloud-config"),
            destination: cidr("destination", p.string("destination"))?,
            node: p.string("node"),
            node_address: p.string("node-address"),
            foreign_destination: p
                .optional("foreign-destination")
                .map(|v| cidr("foreign-destination", v))
                .transpose()?,
            cluster_name: p.string("cluster-name"),
        })
    }
}

/// One check's verdict.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Pass(String),
    Fail { what: String, fix: String },
    Skip(String),
}

fn fail(what: impl Into<String>, fix: impl Into<String>) -> Verdict {
    Verdict::Fail {
        what: what.into(),
        fix: fix.into(),
    }
}

/// The report and whether every check passed.
pub struct Report {
    /// What to print.
    pub text: String,
    /// No check failed.
    pub passed: bool,
}

/// Runs `plugin-check`.
pub fn run_plugin_check(args: &PluginCheckArgs) -> Result<Report, UsageError> {
    let path = std::path::PathBuf::from(&args.cloud_config);
    let pairs = super::cloud::read_cloud_config(&path)?;
    // A misspelt key, which run warns of, is an error here: this is the check before
    // run.
    if let Some(warning) = super::cloud::check_cloud_config_keys("exec", &path, &pairs)
        .into_iter()
        .next()
    {
        return Err(UsageError(warning));
    }
    let config = Config::from_pairs(&pairs).map_err(UsageError)?;
    let checker = Checker {
        config,
        args,
        batch_size: Cell::new(1),
    };
    Ok(checker.run())
}

/// One step of the contract, run once.
type Check<'a> = Box<dyn Fn() -> Verdict + 'a>;

struct Checker<'a> {
    config: Config,
    args: &'a PluginCheckArgs,
    /// What `describe` declared (1 until it has, or if it failed).
    batch_size: Cell<u32>,
}

/// The verdicts so far.
#[derive(Default)]
struct Tally {
    text: String,
    passed: usize,
    failed: usize,
    skipped: usize,
}

impl Checker<'_> {
    /// A fresh provider for each call: no backoff carried from one check to the next.
    fn plugin(&self) -> ExecRoutes {
        ExecRoutes::new(self.config.clone())
    }

    fn route(&self, destination: &str) -> Route {
        Route {
            destination_cidr: destination.to_string(),
            target_node: self.args.node.clone(),
            target_node_addresses: vec![NodeAddress::internal_ip(&self.args.node_address)],
            ..Route::default()
        }
    }

    fn target(&self) -> RouteTarget {
        RouteTarget {
            node_name: self.args.node.clone(),
            provider_id: None,
            addresses: vec![NodeAddress::internal_ip(&self.args.node_address)],
        }
    }

    fn create(&self, destination: &str) -> Result<(), CloudError> {
        self.plugin().create_route(
            &self.args.cluster_name,
            "plugin-check-uid",
            &self.route(destination),
            &self.target(),
        )
    }

    fn delete(&self, destination: &str) -> Result<(), CloudError> {
        self.plugin()
            .delete_route(&self.args.cluster_name, &self.route(destination))
    }

    fn list(&self) -> Result<Vec<Route>, CloudError> {
        self.plugin()
            .list_routes(&self.args.cluster_name, &NodeDirectory::default())
    }

    fn listed(&self, destination: &str) -> Result<Option<Route>, CloudError> {
        let want = Cidr::parse(destination).ok();
        Ok(self
            .list()?
            .into_iter()
            .find(|r| Cidr::parse(&r.destination_cidr).ok() == want))
    }

    fn run(&self) -> Report {
        let mut tally = Tally::default();
        let _ = writeln!(
            tally.text,
            "plugin-check: plugin {} ({}), protocol {API_VERSION}, timeout {}\n",
            self.config.name,
            std::iter::once(&self.config.command)
                .chain(&self.config.args)
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(" "),
            crate::duration::format(self.config.timeout)
        );
        let d = &self.args.destination;
        let second = self.second_destination();
        let describe: Vec<(&str, Check<'_>)> =
            vec![("describe", Box::new(|| self.check_describe()))];
        // What describe declares decides whether apply is checked.
        if self.run_checks(describe, &mut tally) {
            let mut checks: Vec<(&str, Check<'_>)> = vec![
                (
                    "list on an empty table",
                    Box::new(|| self.check_empty_list()),
                ),
                ("create", Box::new(|| self.check_create(d))),
                (
                    "create again (idempotent)",
                    Box::new(|| self.check_create_again(d)),
                ),
                ("delete", Box::new(|| self.check_delete(d))),
                (
                    "delete of a route that is gone",
                    Box::new(|| self.check_delete_gone(d)),
                ),
            ];
            checks.extend(self.apply_checks(d, second.as_deref()));
            checks.extend::<Vec<(&str, Check<'_>)>>(vec![
                (
                    "a route of others is left alone",
                    Box::new(|| self.check_foreign()),
                ),
                (
                    "an unknown verb is refused",
                    Box::new(|| self.check_unknown_verb()),
                ),
                (
                    "another protocol version is refused",
                    Box::new(|| self.check_version()),
                ),
                (
                    "a bad destination is refused",
                    Box::new(|| self.check_bad_request()),
                ),
            ]);
            self.run_checks(checks, &mut tally);
        }
        // Leave the table as found, whatever failed.
        let _ = self.delete(d);
        if let Some(second) = second.as_deref().filter(|_| self.batching()) {
            let _ = self.delete(second);
        }
        let _ = writeln!(
            tally.text,
            "\n{} passed, {} failed, {} skipped",
            tally.passed, tally.failed, tally.skipped
        );
        Report {
            text: tally.text,
            passed: tally.failed == 0,
        }
    }

    /// Runs `checks` in order into `tally`; `false` if it stopped because the plugin
    /// cannot be started.
    fn run_checks(&self, checks: Vec<(&str, Check<'_>)>, tally: &mut Tally) -> bool {
        let text = &mut tally.text;
        for (name, check) in checks {
            let started = Instant::now();
            let verdict = check();
            // A plugin that cannot be started fails every step the same way: say it once.
            if let Verdict::Fail { what, .. } = &verdict
                && what.contains(crate::cloud::exec::CANNOT_START)
            {
                tally.failed += 1;
                let _ = writeln!(
                    text,
                    "FAIL  {name}: {what}\n      the other checks need a plugin that starts"
                );
                return false;
            }
            let took = ms(started.elapsed());
            match verdict {
                Verdict::Pass(detail) => {
                    tally.passed += 1;
                    let _ = writeln!(text, "PASS  {name}: {detail} ({took})");
                }
                Verdict::Fail { what, fix } => {
                    tally.failed += 1;
                    let _ = writeln!(text, "FAIL  {name}: {what} ({took})\n      fix: {fix}");
                }
                Verdict::Skip(why) => {
                    tally.skipped += 1;
                    let _ = writeln!(text, "SKIP  {name}: {why}");
                }
            }
        }
        true
    }

    fn check_describe(&self) -> Verdict {
        let plugin = self.plugin();
        match plugin.describe() {
            Ok(d) if !d.implemented => Verdict::Pass(
                "not implemented (UnknownVerb): no budget, one change per call".into(),
            ),
            Ok(d) => {
                self.batch_size.set(d.batch_size);
                Verdict::Pass(format!(
                    "budget {}, batch size {} ({}), tables {}",
                    d.budget.map_or("none".to_string(), |b| format!(
                        "{}/s, burst {}, {} change(s) at once",
                        b.requests_per_second,
                        b.burst,
                        if b.mutations_at_once == usize::MAX {
                            "any".to_string()
                        } else {
                            b.mutations_at_once.to_string()
                        }
                    )),
                    d.batch_size,
                    if d.batch_size > 1 {
                        "changes go out in apply calls; apply is checked below"
                    } else {
                        "one create or delete per call"
                    },
                    if d.tables.is_empty() {
                        "none".to_string()
                    } else {
                        d.tables
                            .iter()
                            .map(|(n, l)| match l {
                                Some(l) => format!("{n} (limit {l})"),
                                None => n.clone(),
                            })
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ))
            }
            Err(e) => self.failed(
                e,
                "describe is optional: reply {\"apiVersion\": \"route-controller.plugin/v1\", \
                 \"error\": {\"kind\": \"UnknownVerb\"}} if you do not implement it, or a \
                 budget, batchSize and tables as the README shows",
            ),
        }
    }

    fn check_empty_list(&self) -> Verdict {
        match self.list() {
            Ok(routes) if routes.is_empty() => Verdict::Pass("no routes".into()),
            Ok(routes) => {
                let foreign = self.args.foreign_destination.as_deref().and_then(|f| {
                    routes
                        .iter()
                        .find(|r| Cidr::parse(&r.destination_cidr).ok() == Cidr::parse(f).ok())
                });
                match foreign {
                    Some(r) => fail(
                        format!("list returned {}, the route of others", r.destination_cidr),
                        "list only the routes this plugin made (mark them, as linux-router \
                         marks its routes with a proto number of its own)",
                    ),
                    None => fail(
                        format!(
                            "list returned {} route(s) on a table that should be empty: {}",
                            routes.len(),
                            routes
                                .iter()
                                .map(|r| r.destination_cidr.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                        "run the check against an empty table (delete the plugin's routes, or \
                         point it at a table or namespace of its own), or fix list to return \
                         only routes that exist",
                    ),
                }
            }
            Err(e) => self.failed(
                e,
                "list must reply {\"apiVersion\": \"route-controller.plugin/v1\", \"routes\": \
                 []} on an empty table, within the timeout",
            ),
        }
    }

    fn check_create(&self, d: &str) -> Verdict {
        if let Err(e) = self.create(d) {
            return self.failed(
                e,
                "create must add the route and reply {\"apiVersion\": \"route-controller.plugin/v1\"}",
            );
        }
        match self.listed(d) {
            Ok(Some(r)) if r.target_node == self.args.node => {
                Verdict::Pass(format!("{d} via {} is listed", self.args.node))
            }
            Ok(Some(r)) => fail(
                format!(
                    "{d} is listed with targetNode {:?}, not {:?}",
                    r.target_node, self.args.node
                ),
                "list must report each route's targetNode as create gave it (keep the name \
                 with the route, or in a state file as linux-router does)",
            ),
            Ok(None) => fail(
                format!("create succeeded but list does not return {d}"),
                "create must add the route so that the next list returns it",
            ),
            Err(e) => self.failed(e, "list must succeed after a create"),
        }
    }

    fn check_create_again(&self, d: &str) -> Verdict {
        match self.create(d) {
            Ok(()) => Verdict::Pass("an identical create is a success".into()),
            Err(e) => self.failed(
                e,
                "an identical route that already exists counts as created: reply without \
                 \"error\" (AlreadyExists is only for a route to another target)",
            ),
        }
    }

    fn check_delete(&self, d: &str) -> Verdict {
        if let Err(e) = self.delete(d) {
            return self.failed(
                e,
                "delete must remove the route and reply {\"apiVersion\": \"route-controller.plugin/v1\"}",
            );
        }
        match self.listed(d) {
            Ok(None) => Verdict::Pass(format!("{d} is gone from the list")),
            Ok(Some(_)) => fail(
                format!("delete succeeded but list still returns {d}"),
                "delete must remove the route before it replies",
            ),
            Err(e) => self.failed(e, "list must succeed after a delete"),
        }
    }

    fn check_delete_gone(&self, d: &str) -> Verdict {
        match self.delete(d) {
            Err(e) if e.kind == CloudErrorKind::NotFound => {
                Verdict::Pass("NotFound, as the controller counts it done".into())
            }
            Ok(()) => fail(
                "a delete of a route that is gone succeeded",
                "reply \"error\": {\"kind\": \"NotFound\"} (or exit 3) for a route that is not \
                 there, so the controller can tell it from a delete that happened",
            ),
            Err(e) => self.failed(
                e,
                "reply \"error\": {\"kind\": \"NotFound\"} (or exit 3) for a route that is not there",
            ),
        }
    }

    /// The plugin's describe declared a batchSize above 1: it gets `apply`.
    fn batching(&self) -> bool {
        self.batch_size.get() > 1
    }

    /// The block of `--destination`'s size right after it (past the route of others,
    /// if that is the one), for apply's second route; `None` at the end of the space.
    fn second_destination(&self) -> Option<String> {
        let foreign = self
            .args
            .foreign_destination
            .as_deref()
            .and_then(|f| Cidr::parse(f).ok());
        let mut cidr = Cidr::parse(&self.args.destination).ok()?;
        loop {
            let next = match cidr.last() {
                IpAddr::V4(a) => IpAddr::from(u32::from(a).checked_add(1)?.to_be_bytes()),
                IpAddr::V6(a) => IpAddr::from(u128::from(a).checked_add(1)?.to_be_bytes()),
            };
            cidr = Cidr::parse(&format!("{next}/{}", cidr.prefix())).ok()?;
            if Some(cidr) != foreign {
                return Some(cidr.to_string());
            }
        }
    }

    fn create_change(&self, destination: &str) -> RouteChange {
        RouteChange::Create {
            route: self.route(destination),
            name_hint: "plugin-check-uid".into(),
            target: self.target(),
        }
    }

    fn delete_change(&self, destination: &str) -> RouteChange {
        RouteChange::Delete {
            route: self.route(destination),
        }
    }

    fn apply(&self, changes: &[RouteChange]) -> Result<Vec<Result<(), CloudError>>, CloudError> {
        self.plugin()
            .apply_changes(&self.args.cluster_name, changes)
    }

    /// apply's checks for a plugin that batches, or one line saying why there are none.
    fn apply_checks<'s>(
        &'s self,
        d: &'s str,
        second: Option<&'s str>,
    ) -> Vec<(&'s str, Check<'s>)> {
        if !self.batching() {
            return vec![(
                "apply",
                Box::new(|| {
                    Verdict::Skip(
                        "describe declares no batchSize above 1: the controller sends one \
                         create or delete per call, never apply"
                            .into(),
                    )
                }),
            )];
        }
        let Some(second) = second else {
            return vec![(
                "apply",
                Box::new(move || {
                    fail(
                        format!(
                            "--destination {d} leaves no block after it for apply's second route"
                        ),
                        "choose a --destination with room after it, such as 10.255.0.0/24",
                    )
                }),
            )];
        };
        vec![
            (
                "apply of two creates",
                Box::new(move || self.check_apply_creates(d, second)),
            ),
            (
                "apply of a create again and a delete of a route that is gone",
                Box::new(move || self.check_apply_again_and_gone(d, second)),
            ),
            (
                "apply of a delete",
                Box::new(move || self.check_apply_delete(d)),
            ),
        ]
    }

    fn check_apply_creates(&self, d: &str, second: &str) -> Verdict {
        let fix = "apply must carry out each change as create would and reply one outcome per \
                   change, in order: {\"outcomes\": [{}, {}]}";
        let outcomes = match self.apply(&[self.create_change(d), self.create_change(second)]) {
            Ok(outcomes) => outcomes,
            Err(e) => return self.failed(e, fix),
        };
        if let Some(e) = outcomes.iter().find_map(|o| o.as_ref().err()) {
            return self.failed(e.clone(), fix);
        }
        for destination in [d, second] {
            match self.listed(destination) {
                Ok(Some(r)) if r.target_node == self.args.node => {}
                Ok(Some(r)) => {
                    return fail(
                        format!(
                            "{destination} is listed with targetNode {:?}, not {:?}",
                            r.target_node, self.args.node
                        ),
                        "list must report each route's targetNode as apply's create gave it",
                    );
                }
                Ok(None) => {
                    return fail(
                        format!("apply's create succeeded but list does not return {destination}"),
                        "apply must add each route it reports done, so that the next list \
                         returns it",
                    );
                }
                Err(e) => return self.failed(e, "list must succeed after an apply"),
            }
        }
        Verdict::Pass(format!("{d} and {second} are listed"))
    }

    fn check_apply_again_and_gone(&self, d: &str, second: &str) -> Verdict {
        match self.delete(second) {
            Ok(()) => {}
            Err(e) => {
                return self.failed(
                    e,
                    "delete must remove a route that apply created (the step before this apply)",
                );
            }
        }
        let outcomes = match self.apply(&[self.create_change(d), self.delete_change(second)]) {
            Ok(outcomes) => outcomes,
            Err(e) => {
                return self.failed(
                    e,
                    "a change that fails in an apply fails in its place among the outcomes, not \
                     the whole call: reply {\"outcomes\": [{}, {\"error\": {\"kind\": \
                     \"NotFound\"}}]}",
                );
            }
        };
        let [create, delete] = outcomes.as_slice() else {
            return fail(
                format!("apply of 2 changes gave {} outcome(s)", outcomes.len()),
                "reply one outcome per change, in order",
            );
        };
        match (create, delete) {
            (Ok(()), Err(e)) if e.kind == CloudErrorKind::NotFound => Verdict::Pass(format!(
                "{{}} for the create of {d} that exists, NotFound for the delete of {second}, in \
                 order"
            )),
            (Err(e), Ok(())) if e.kind == CloudErrorKind::NotFound => fail(
                format!(
                    "the outcomes look swapped: NotFound for the create of {d}, {{}} for the \
                     delete of {second} ({})",
                    e.message
                ),
                "reply the outcomes in the order of the request's changes",
            ),
            (Err(e), _) => self.failed(
                e.clone(),
                "an identical route that already exists counts as created: its outcome is {} \
                 (AlreadyExists is only for a route to another target)",
            ),
            (Ok(()), Ok(())) => fail(
                format!("apply reported the delete of {second}, a route that is gone, as done"),
                "the outcome of a delete of a route that is not there is {\"error\": {\"kind\": \
                 \"NotFound\"}}, so the controller can tell it from a delete that happened",
            ),
            (Ok(()), Err(e)) => self.failed(
                e.clone(),
                "the outcome of a delete of a route that is not there is {\"error\": {\"kind\": \
                 \"NotFound\"}}, in the delete's place among the outcomes",
            ),
        }
    }

    fn check_apply_delete(&self, d: &str) -> Verdict {
        let fix = "apply must carry out each change as delete would and reply {\"outcomes\": [{}]}";
        match self.apply(&[self.delete_change(d)]) {
            Ok(outcomes) => {
                if let Some(e) = outcomes.iter().find_map(|o| o.as_ref().err()) {
                    return self.failed(e.clone(), fix);
                }
            }
            Err(e) => return self.failed(e, fix),
        }
        match self.listed(d) {
            Ok(None) => Verdict::Pass(format!("{d} is gone from the list")),
            Ok(Some(_)) => fail(
                format!("apply's delete succeeded but list still returns {d}"),
                "apply must remove each route it reports deleted before it replies",
            ),
            Err(e) => self.failed(e, "list must succeed after an apply"),
        }
    }

    fn check_foreign(&self) -> Verdict {
        let Some(f) = self.args.foreign_destination.as_deref() else {
            return Verdict::Skip(
                "no --foreign-destination: put a route of your own in the plugin's table and \
                 name its CIDR"
                    .into(),
            );
        };
        match self.listed(f) {
            Ok(None) => {}
            Ok(Some(_)) => {
                return fail(
                    format!("list returns {f}, a route the plugin did not make"),
                    "list only the routes this plugin made (mark them, as linux-router does \
                     with its proto number)",
                );
            }
            Err(e) => return self.failed(e, "list must succeed"),
        }
        match self.create(f) {
            Err(e) if e.kind == CloudErrorKind::AlreadyExists => {}
            Ok(()) => {
                return fail(
                    format!("create of {f} succeeded over a route of others"),
                    "a create whose destination holds a route of others must leave it and \
                     reply \"error\": {\"kind\": \"AlreadyExists\"}",
                );
            }
            Err(e) => {
                return self.failed(
                    e,
                    "a create whose destination holds a route of others must leave it and \
                     reply \"error\": {\"kind\": \"AlreadyExists\"}",
                );
            }
        }
        match self.delete(f) {
            Err(e) if e.kind == CloudErrorKind::NotFound => Verdict::Pass(format!(
                "{f} is not listed, create says AlreadyExists, delete says NotFound"
            )),
            Ok(()) => fail(
                format!("delete of {f} succeeded: the plugin deleted a route of others"),
                "delete only routes this plugin made; reply NotFound for any other",
            ),
            Err(e) => self.failed(
                e,
                "delete only routes this plugin made; reply NotFound for any other",
            ),
        }
    }

    /// A request the plugin must refuse, in the protocol and in time.
    fn refused(&self, verb: &str, request: String, fix: &str) -> Verdict {
        match self.plugin().call_json(verb, request) {
            Ok(reply) => fail(
                format!("the plugin replied {}", summary(&reply)),
                fix.to_string(),
            ),
            Err(e) if e.kind == CloudErrorKind::Ambiguous => self.failed(e, fix),
            Err(e) => Verdict::Pass(format!("refused: {}", protocol::excerpt(&e.message, 120))),
        }
    }

    fn check_unknown_verb(&self) -> Verdict {
        let request = format!(
            "{{\"apiVersion\":\"{API_VERSION}\",\"verb\":\"plugin-check-unknown\",\"clusterName\":\"{}\"}}",
            self.args.cluster_name
        );
        self.refused(
            "plugin-check-unknown",
            request,
            "reply \"error\": {\"kind\": \"UnknownVerb\"} to a verb you do not know (newer \
             controllers may add verbs), within the timeout",
        )
    }

    fn check_version(&self) -> Verdict {
        let request = format!(
            "{{\"apiVersion\":\"route-controller.plugin/v0\",\"verb\":\"list\",\"clusterName\":\"{}\"}}",
            self.args.cluster_name
        );
        self.refused(
            "list (apiVersion v0)",
            request,
            "check the request's apiVersion; reply \"error\": {\"kind\": \"Invalid\"} naming \
             the version you speak",
        )
    }

    fn check_bad_request(&self) -> Verdict {
        let route = self.route("not-a-cidr");
        let request = Request::create(&self.args.cluster_name, "uid", &route, &self.target());
        self.refused(
            "create (destinationCIDR not-a-cidr)",
            request.to_json(),
            "refuse a request you cannot carry out with \"error\": {\"kind\": \"Invalid\"}, \
             not a crash or a success",
        )
    }
}

/// How a call failed, when the plugin did not answer in the protocol: each has a fix of
/// its own, whatever the step. A reply in the protocol that is the wrong answer gets the
/// step's contract instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Symptom {
    /// Killed at its timeout.
    Hang,
    /// Killed by a signal, or exited non-zero with nothing on stdout.
    Crash,
    /// Exited 0 with nothing on stdout.
    Silent,
    /// Printed something that is not one JSON object.
    Garbage,
    /// Printed more than `MaxOutputBytes`.
    TooMuch,
    /// Replied with another apiVersion.
    OtherVersion,
    /// Replied without apiVersion.
    NoVersion,
    /// Replied with an error kind the protocol does not have.
    UnknownKind,
    /// Replied UnknownVerb to a verb every plugin must implement.
    Unimplemented,
}

/// The symptom `e` shows, read from the words the exec provider's messages use for it.
/// `None`: the plugin answered in the protocol. (The unit test below runs a plugin of
/// each kind through the provider, so a reworded message cannot slip past this.)
fn symptom(e: &CloudError) -> Option<Symptom> {
    let m = e.message.as_str();
    let is = |words: &str| m.contains(words);
    Some(if is("did not finish within") {
        Symptom::Hang
    } else if is("was killed by signal") || (is("failed with exit status") && is("and no reply")) {
        Symptom::Crash
    } else if is("printed nothing on stdout") {
        Symptom::Silent
    } else if is("is not one JSON object") {
        Symptom::Garbage
    } else if is("bytes on stdout; killed it") {
        Symptom::TooMuch
    } else if is("replied with apiVersion") {
        Symptom::OtherVersion
    } else if is("reply has no apiVersion") {
        Symptom::NoVersion
    } else if is("is unknown, so the call is treated as ambiguous") {
        Symptom::UnknownKind
    } else if is("failed: UnknownVerb") {
        Symptom::Unimplemented
    } else {
        return None;
    })
}

impl Checker<'_> {
    /// A step failed with `e`: the fix for what went wrong if the plugin did not
    /// answer in the protocol, else `contract`, what the step expects.
    fn failed(&self, e: CloudError, contract: &str) -> Verdict {
        let fix = match symptom(&e) {
            None => contract.to_string(),
            Some(s) => self.fix(s),
        };
        fail(e.message, fix)
    }

    fn fix(&self, symptom: Symptom) -> String {
        let command = std::iter::once(&self.config.command)
            .chain(&self.config.args)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(" ");
        let by_hand = format!(
            "run it by hand to see where: echo '{{\"apiVersion\":\"{API_VERSION}\",\"verb\":\"list\",\
             \"clusterName\":\"{}\"}}' | {command}",
            self.args.cluster_name
        );
        match symptom {
            Symptom::Hang => format!(
                "the plugin hung: reply within Timeout= ({}) or raise it in --cloud-config; a \
                 plugin that waits on a lock, a prompt or a second read of stdin never ends; \
                 {by_hand}",
                crate::duration::format(self.config.timeout)
            ),
            Symptom::Crash => format!(
                "the plugin crashed before it replied: its stderr is in the log above; reply \
                 {{\"error\": {{\"kind\": ...}}}} and exit 0 for a failure it knows; {by_hand}"
            ),
            Symptom::Silent => "the plugin exited 0 without a reply: end every path with one \
                JSON reply on stdout ({\"apiVersion\": \"route-controller.plugin/v1\"} at least)"
                .into(),
            Symptom::Garbage => "the plugin printed something besides its reply: print exactly \
                one JSON object on stdout, and logs or progress on stderr (>&2)"
                .into(),
            Symptom::TooMuch => "the plugin printed more than one reply's worth: logs go to \
                stderr; raise MaxOutputBytes= in --cloud-config only for a very large table"
                .into(),
            Symptom::OtherVersion | Symptom::NoVersion => format!(
                "put \"apiVersion\": \"{API_VERSION}\" in every reply, error replies too (the \
                 version the request names)"
            ),
            Symptom::UnknownKind => format!(
                "use one of the protocol's error kinds: {}",
                protocol::ERROR_KINDS
                    .iter()
                    .map(|(k, _)| *k)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Symptom::Unimplemented => {
                "implement this verb: every plugin implements list, create and delete".into()
            }
        }
    }
}

fn summary(reply: &Reply) -> String {
    match &reply.routes {
        Some(r) => format!("success, with {} route(s)", r.len()),
        None => "success".into(),
    }
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// What list of a plugin that runs `script` (after reading its request) fails with.
    fn error_of(label: &str, script: &str) -> CloudError {
        let dir =
            std::env::temp_dir().join(format!("rc-plugin-check-{label}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("plugin");
        std::fs::write(&path, format!("#!/bin/sh\ncat >/dev/null\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let pairs: Vec<(String, String)> = [
            ("Command", path.to_str().unwrap()),
            ("Timeout", "500ms"),
            ("MaxOutputBytes", "4096"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let plugin = ExecRoutes::new(Config::from_pairs(&pairs).unwrap());
        let error = plugin
            .list_routes("kubernetes", &NodeDirectory::default())
            .expect_err(label);
        let _ = std::fs::remove_dir_all(&dir);
        error
    }

    /// Guards the specific fix lines: each way of not answering in the protocol, made
    /// by a real plugin through the exec provider, is told apart (a reworded message in
    /// the provider fails this), and a reply in the protocol that is wrong is left to
    /// the step's contract.
    #[test]
    fn each_way_of_breaking_the_protocol_is_told_apart() {
        let v = API_VERSION;
        for (label, script, want) in [
            ("hang", "sleep 5".to_string(), Some(Symptom::Hang)),
            ("signal", "kill -9 $$".into(), Some(Symptom::Crash)),
            ("exit", "echo oops >&2; exit 1".into(), Some(Symptom::Crash)),
            ("silent", "exit 0".into(), Some(Symptom::Silent)),
            ("garbage", "echo hello".into(), Some(Symptom::Garbage)),
            (
                "too-much",
                "head -c 8192 /dev/zero | tr '\\0' x".into(),
                Some(Symptom::TooMuch),
            ),
            (
                "version",
                "echo '{\"apiVersion\":\"route-controller.plugin/v0\"}'".into(),
                Some(Symptom::OtherVersion),
            ),
            (
                "no-version",
                "echo '{\"routes\":[]}'".into(),
                Some(Symptom::NoVersion),
            ),
            (
                "kind",
                format!("echo '{{\"apiVersion\":\"{v}\",\"error\":{{\"kind\":\"Oops\"}}}}'"),
                Some(Symptom::UnknownKind),
            ),
            (
                "unknown-verb",
                format!("echo '{{\"apiVersion\":\"{v}\",\"error\":{{\"kind\":\"UnknownVerb\"}}}}'"),
                Some(Symptom::Unimplemented),
            ),
            (
                "invalid",
                format!("echo '{{\"apiVersion\":\"{v}\",\"error\":{{\"kind\":\"Invalid\"}}}}'"),
                None,
            ),
        ] {
            let e = error_of(label, &script);
            assert_eq!(symptom(&e), want, "{label}: {}", e.message);
        }
    }
}
