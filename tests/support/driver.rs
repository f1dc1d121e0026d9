//! Drives a `Controller` by hand in virtual time against the in-memory cloud: no
//! threads, no sockets, no sleeps. Cloud operations run when the test says so (or
//! at once with `settle`), condition writes succeed (unless `condition_failure` is
//! set) and are remembered.
#![allow(dead_code)] // each test binary uses part of this support module

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use route_controller::cloud::fake::FakeCloud;
use route_controller::metrics::Metrics;
use route_controller::model::{Cidr, Condition, Node, NodeAddress, Route};
use route_controller::run_op_metered;
use route_controller::{
    CloudOp, Command, Config, Controller, Input, NodeEvent, NodeEventRecord, OpId, PassReport,
    WriteError,
};

pub struct Driver {
    pub ctrl: Controller,
    pub cloud: Arc<FakeCloud>,
    pub metrics: Arc<Metrics>,
    pub t0: Instant,
    pub now: Instant,
    /// Cloud operations sent and not yet answered, oldest first.
    pub pending: VecDeque<(OpId, CloudOp)>,
    /// Every cloud operation ever sent, in order, with the time it was sent.
    pub sent: Vec<(Duration, CloudOp)>,
    /// The last condition written per node, and every write in order.
    pub conditions: BTreeMap<String, Condition>,
    pub condition_writes: Vec<(String, Condition)>,
    /// When set, every condition write fails with this message.
    pub condition_failure: Option<String>,
    /// How many more writes for a node are answered Busy (a conflict).
    pub busy_writes: BTreeMap<String, u32>,
    pub events: Vec<NodeEventRecord>,
    pub reports: Vec<PassReport>,
    /// The controller's exits, in order (at most one).
    pub exits: Vec<route_controller::Exit>,
    /// Every command, in order, for assertions on causes.
    pub commands: Vec<Command>,
}

impl Driver {
    pub fn new(config: Config) -> Driver {
        Driver::with_cloud(config, Arc::new(FakeCloud::new()))
    }

    pub fn with_cloud(config: Config, cloud: Arc<FakeCloud>) -> Driver {
        let metrics = Arc::new(Metrics::new());
        let t0 = Instant::now();
        Driver {
            ctrl: Controller::new(config, metrics.clone()),
            cloud,
            metrics,
            t0,
            now: t0,
            pending: VecDeque::new(),
            sent: Vec::new(),
            conditions: BTreeMap::new(),
            condition_writes: Vec::new(),
            condition_failure: None,
            events: Vec::new(),
            reports: Vec::new(),
            exits: Vec::new(),
            busy_writes: BTreeMap::new(),
            commands: Vec::new(),
        }
    }

    /// Seconds since the start, for messages.
    pub fn elapsed(&self) -> Duration {
        self.now - self.t0
    }

    /// Feeds one input now; cloud operations stay pending until answered.
    pub fn feed(&mut self, input: Input) {
        let commands = self.ctrl.handle(input, self.now);
        self.absorb(commands);
    }

    fn absorb(&mut self, commands: Vec<Command>) {
        let mut replies = Vec::new();
        for c in &commands {
            match c {
                Command::Cloud { id, op, .. } => {
                    self.pending.push_back((*id, op.clone()));
                    self.sent.push((self.elapsed(), op.clone()));
                }
                Command::WriteCondition {
                    node, condition, ..
                } => {
                    self.conditions.insert(node.clone(), condition.clone());
                    self.condition_writes
                        .push((node.clone(), condition.clone()));
                    let busy = self.busy_writes.get_mut(node).filter(|n| **n > 0);
                    let result = match (busy, &self.condition_failure) {
                        (Some(n), _) => {
                            *n -= 1;
                            Err(WriteError::Busy { after: None })
                        }
                        (None, Some(e)) => Err(WriteError::Failed(e.clone())),
                        (None, None) => Ok(()),
                    };
                    replies.push(Input::ConditionWritten {
                        node: node.clone(),
                        result,
                    });
                }
                Command::RecordEvent { event, .. } => self.events.push(event.clone()),
                Command::PassFinished(r) => self.reports.push(r.clone()),
                Command::Exit(why) => self.exits.push(*why),
                other => panic!("a command the driver does not know: {other:?}"),
            }
        }
        self.commands.extend(commands);
        for r in replies {
            self.feed(r);
        }
    }

    /// Answers the oldest pending cloud operation from the fake cloud.
    pub fn answer_one(&mut self) -> bool {
        let Some((id, op)) = self.pending.pop_front() else {
            return false;
        };
        let (reply, spent) = run_op_metered(
            self.cloud.as_ref(),
            &self.ctrl.config().cluster_name.clone(),
            &op,
            &self.metrics,
        );
        if let Some(spent) = spent {
            self.feed(Input::Cloud { id, reply: spent });
        }
        if let Some(tables) = route_controller::workers::tables_after(self.cloud.as_ref(), &reply) {
            self.feed(Input::Cloud { id, reply: tables });
        }
        self.feed(Input::Cloud { id, reply });
        true
    }

    /// Answers every pending cloud operation, including those the answers cause.
    pub fn settle(&mut self) {
        while self.answer_one() {}
    }

    /// Moves time forward by `d`, waking the controller at each deadline on the way and
    /// answering cloud operations at once.
    pub fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        self.settle();
        while let Some(deadline) = self.ctrl.next_deadline() {
            if deadline > end {
                break;
            }
            self.now = self.now.max(deadline);
            self.feed(Input::Tick);
            self.settle();
        }
        self.now = end;
        self.feed(Input::Tick);
        self.settle();
    }

    /// Starts the controller with these nodes (a complete initial list) and settles.
    pub fn start(&mut self, nodes: Vec<Node>) {
        self.list(nodes);
        self.settle();
    }

    /// Delivers a complete node list (Init, InitApply each, InitDone), leaving the
    /// cloud operations it causes pending.
    pub fn list(&mut self, nodes: Vec<Node>) {
        self.feed(Input::Node(NodeEvent::Init));
        for n in nodes {
            self.feed(Input::Node(NodeEvent::InitApply(n)));
        }
        self.feed(Input::Node(NodeEvent::InitDone));
    }

    pub fn node_event(&mut self, event: NodeEvent) {
        self.feed(Input::Node(event));
    }

    /// Sent operations of one kind.
    pub fn count(&self, kind: &str) -> usize {
        self.sent
            .iter()
            .filter(|(_, op)| op_kind(op) == kind)
            .count()
    }

    pub fn passes(&self) -> u64 {
        self.metrics.passes_total()
    }

    /// The cloud's routes as `(target node, destination)` pairs, sorted.
    pub fn cloud_routes(&self) -> Vec<(String, String)> {
        let mut v: Vec<_> = self
            .cloud
            .routes()
            .into_iter()
            .map(|r| (r.target_node, r.destination_cidr))
            .collect();
        v.sort();
        v
    }
}

pub fn op_kind(op: &CloudOp) -> &'static str {
    op.operation().as_str()
}

/// A node with a uid derived from its name, one InternalIP and the given pod CIDRs.
pub fn node(name: &str, pod_cidrs: &[&str], ip: &str) -> Node {
    Node {
        name: name.to_string(),
        uid: format!("uid-{name}"),
        resource_version: "1".to_string(),
        provider_id: None,
        pod_cidrs: pod_cidrs.iter().map(|s| s.to_string()).collect(),
        addresses: vec![NodeAddress::internal_ip(ip)],
        network_unavailable: None,
    }
}

/// The same node with a new resourceVersion.
pub fn bumped(mut n: Node, rv: u64) -> Node {
    n.resource_version = rv.to_string();
    n
}

pub fn route(name: &str, target: &str, cidr: &str) -> Route {
    Route {
        name: name.to_string(),
        target_node: target.to_string(),
        destination_cidr: cidr.to_string(),
        ..Route::default()
    }
}

pub fn cidrs(list: &[&str]) -> Vec<Cidr> {
    list.iter()
        .map(|c| Cidr::parse(c).expect("test CIDR"))
        .collect()
}

/// A watch-mode config for cluster CIDR 10.0.0.0/16 with a fixed seed.
pub fn watch_config() -> Config {
    let mut c = Config::new(cidrs(&["10.0.0.0/16"]));
    c.seed = Some(7);
    c
}

pub fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}
