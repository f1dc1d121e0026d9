//! Creates the provider's pre-flight check refused before any request
//! ([`CloudErrorKind::Refused`](crate::CloudErrorKind::Refused)): a node address
//! outside the network, a server not attached to it, an instance in another VPC, an
//! IPv6 pod CIDR on a cloud that routes IPv4 only.
//!
//! No request left, so nothing failed at the cloud. A lasting refusal (a pod CIDR
//! this cloud can never route) is not tried again until the request built from the
//! node differs (the node changed). Any other is tried again with the usual backoff,
//! each try again only a check against the provider's knowledge (the server joins the
//! network, the operator fixes the node). The operator hears once per refusal, not per
//! try: a log line, an event naming the fix, and `NetworkUnavailable=True` with the
//! check's reason.

use std::collections::HashMap;

use super::ops::OpKind;
use super::{Command, Controller, NodeEventRecord};
use crate::model::Cidr;
use crate::plan::CreateRequest;
use crate::provider::{CloudError, CloudErrorKind};

/// The lasting refusals, by destination: the request as refused, which is not sent
/// again. See the module documentation.
#[derive(Default)]
pub(super) struct Refusals {
    by_cidr: HashMap<Cidr, CreateRequest>,
}

impl Refusals {
    /// Whether `request` was refused for good as it is.
    pub fn holds_back(&self, request: &CreateRequest) -> bool {
        self.by_cidr.get(&request.cidr) == Some(request)
    }

    pub fn forget(&mut self, cidr: Cidr) {
        self.by_cidr.remove(&cidr);
    }

    pub fn keep_wanted(&mut self, wanted: &std::collections::HashSet<Cidr>) {
        self.by_cidr.retain(|c, _| wanted.contains(c));
    }

    /// The destinations of `node` refused for good (not routable on this cloud).
    pub fn lasting_for<'a>(&'a self, node: &'a str) -> impl Iterator<Item = Cidr> + 'a {
        self.by_cidr
            .iter()
            .filter(move |(_, r)| r.route.target_node == node)
            .map(|(c, _)| *c)
    }
}

impl Controller {
    /// The provider refused `request` before sending it: remember it, and tell the
    /// operator unless this very refusal was reported already.
    pub(super) fn create_refused(
        &mut self,
        request: &CreateRequest,
        reason: &'static str,
        lasting: bool,
        err: &CloudError,
        pass: u64,
        out: &mut Vec<Command>,
    ) {
        let node = request.route.target_node.clone();
        self.metrics.route_refused(reason);
        let repeated = self
            .conditions
            .reason(&node)
            .is_some_and(|(r, m)| r == reason && m == err.message);
        self.conditions.set_reason(&node, reason, &err.message);
        if lasting {
            self.refusals.by_cidr.insert(request.cidr, request.clone());
        }
        if repeated {
            log::debug!(
                "create of route {} for node {node} refused again: {}",
                request.cidr,
                err.message
            );
            return;
        }
        log::warn!(
            "create of route {} for node {node} not sent ({reason}): {} (pass {pass})",
            request.cidr,
            err.message
        );
        if self.leading {
            out.push(Command::RecordEvent {
                event: NodeEventRecord {
                    node,
                    uid: request.name_hint.clone(),
                    kind: "Warning",
                    reason,
                    message: err.message.clone(),
                },
                cause: self.passes.cause_of(pass),
            });
        }
    }

    /// The cloud refused a batch (or a single change) for this change
    /// ([`CloudErrorKind::BatchRefused`]): the change is refused for its node alone,
    /// as a pre-check refusal is (reason, event, metric), and goes alone from now on
    /// ([`super::batches`]). A delete has no node to tell: a warning and the metric.
    pub(super) fn cloud_refused(
        &mut self,
        op: &OpKind,
        err: &CloudError,
        pass: u64,
        out: &mut Vec<Command>,
    ) {
        let CloudErrorKind::BatchRefused { reason, .. } = err.kind else {
            return;
        };
        self.splitting.refused(op.cidr());
        match op {
            OpKind::Create(c) => self.create_refused(c, reason, false, err, pass, out),
            OpKind::Delete(d) => {
                self.metrics.route_refused(reason);
                log::warn!(
                    "delete of route {} refused by the cloud ({reason}): {}; tried again \
                     alone, slowly (pass {pass})",
                    d.cidr,
                    err.message
                );
            }
        }
    }
}
