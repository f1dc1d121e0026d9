//! The cloud worker pool: threads that run the controller's cloud operations against
//! a provider and send the replies back. A driver beside the actor: it decides
//! nothing. The pool has a worker for each operation the controller can have in flight
//! ([`pool_size`]: `--concurrent-route-operations`, and the provider's changes at
//! once); the controller never dispatches more than that. An operation whose turn comes after
//! the [`Fence`] closed is answered as fenced without reaching the provider.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::controller::{CloudJob, CloudOp, CloudReply, OpId, RouteList};
use crate::fence::Fence;
use crate::metrics::{CloudOutcome, Metrics};
use crate::provider::{Budget, CloudError, CloudErrorKind, Meter, RouteChange, Routes};

/// Runs one operation against the provider, recording it in the metrics. What it
/// spent of the cloud's budget is dropped: the controller keeps the cost it
/// declared; [`run_op_metered`] also returns it.
pub fn run_op(
    provider: &dyn Routes,
    cluster_name: &str,
    op: &CloudOp,
    metrics: &Metrics,
) -> CloudReply {
    run_op_metered(provider, cluster_name, op, metrics).0
}

/// Runs one operation like [`run_op`] and returns, with its reply, the
/// [`CloudReply::Spent`] to send before it if the provider recorded what the call
/// spent ([`Meter`]).
pub fn run_op_metered(
    provider: &dyn Routes,
    cluster_name: &str,
    op: &CloudOp,
    metrics: &Metrics,
) -> (CloudReply, Option<CloudReply>) {
    let (reply, usage) = Meter::measure(|| call(provider, cluster_name, op, metrics));
    (reply, usage.map(CloudReply::Spent))
}

fn call(provider: &dyn Routes, cluster_name: &str, op: &CloudOp, metrics: &Metrics) -> CloudReply {
    let start = Instant::now();
    let (reply, outcome) = match op {
        CloudOp::List { nodes } => {
            // Each route is stored compactly as the provider reads it; a list that
            // fails part way is dropped.
            let mut list = RouteList::new();
            let r = provider
                .list_routes_each(cluster_name, nodes, &mut |route| list.push(&route))
                .map(|()| {
                    list.shrink_to_fit();
                    list
                });
            let outcome = outcome_of(&r);
            (CloudReply::Listed(r), outcome)
        }
        CloudOp::Create {
            route,
            name_hint,
            target,
        } => {
            let r = provider.create_route(cluster_name, name_hint, route, target);
            if let Err(e) = &r
                && let CloudErrorKind::Refused { .. } = e.kind
            {
                // The pre-flight check refused it: no request left, no call to count.
                return CloudReply::Done(r);
            }
            let outcome = outcome_of(&r);
            (CloudReply::Done(r), outcome)
        }
        CloudOp::Delete { route, .. } => {
            let r = provider.delete_route(cluster_name, route);
            let outcome = outcome_of(&r);
            (CloudReply::Done(r), outcome)
        }
        CloudOp::Apply { changes } => {
            let (outcomes, sent) = apply_prechecked(provider, cluster_name, changes);
            if !sent {
                // The pre-flight check refused every change: no request left, no call
                // to count (as for a single create). Known here only: a provider may
                // also refuse a change it did send (OpenStack, a port out of address
                // pairs), and that request counts.
                return CloudReply::Applied(outcomes);
            }
            // The request's outcome: the first failure of a change that was sent (a
            // pre-flight refusal sent nothing), else success.
            let outcome = outcomes
                .iter()
                .filter_map(|r| r.as_ref().err())
                .find(|e| !matches!(e.kind, CloudErrorKind::Refused { .. }))
                .map_or(CloudOutcome::Success, |e| e.kind.outcome());
            (CloudReply::Applied(outcomes), outcome)
        }
    };
    metrics.cloud_request(op.operation(), outcome, start.elapsed());
    reply
}

/// A batch: each change is [`Routes::precheck`]ed, and only those that pass go to
/// [`Routes::apply_changes`], so a change the cloud would refuse never fails the write
/// of the others. One outcome per change of `changes`, in order; an error of the
/// whole write stands for each change that was in it, with the change at fault of a
/// [`CloudErrorKind::BatchRefused`] given by its position in `changes`. And whether
/// the write was attempted: false when the pre-check refused every change.
fn apply_prechecked(
    provider: &dyn Routes,
    cluster_name: &str,
    changes: &[RouteChange],
) -> (Vec<Result<(), CloudError>>, bool) {
    let mut outcomes: Vec<Result<(), CloudError>> = vec![Ok(()); changes.len()];
    let mut passed = Vec::with_capacity(changes.len());
    let mut positions = Vec::with_capacity(changes.len());
    for (i, change) in changes.iter().enumerate() {
        match provider.precheck(change) {
            Ok(()) => {
                passed.push(change.clone());
                positions.push(i);
            }
            // Nothing more may be sent: none of the batch was.
            Err(e) if e.kind == CloudErrorKind::Fenced => {
                return (vec![Err(e); changes.len()], true);
            }
            Err(e) => outcomes[i] = Err(e),
        }
    }
    if passed.is_empty() {
        return (outcomes, false);
    }
    let written = match provider.apply_changes(cluster_name, &passed) {
        Ok(written) if written.len() == passed.len() => written,
        Ok(written) => {
            // The provider broke its contract: what happened to the changes it did
            // not answer for is unknown, so none of them is trusted.
            let e = CloudError::ambiguous(format!(
                "{}: {} outcomes for a batch of {} changes",
                provider.provider_name(),
                written.len(),
                passed.len()
            ));
            vec![Err(e); passed.len()]
        }
        Err(mut e) => {
            if let CloudErrorKind::BatchRefused { reason, at_fault } = e.kind {
                // A position in what was written, turned into one in the batch.
                let at_fault = at_fault.and_then(|k| positions.get(k).copied());
                e.kind = CloudErrorKind::BatchRefused { reason, at_fault };
            }
            vec![Err(e); passed.len()]
        }
    };
    for (i, outcome) in positions.into_iter().zip(written) {
        outcomes[i] = outcome;
    }
    (outcomes, true)
}

/// The reply to an operation the fence kept from starting, counted like any other.
fn fenced(op: &CloudOp, error: CloudError, metrics: &Metrics) -> CloudReply {
    metrics.cloud_request(op.operation(), error.kind.outcome(), Duration::ZERO);
    match op {
        CloudOp::List { .. } => CloudReply::Listed(Err(error)),
        CloudOp::Apply { changes } => CloudReply::Applied(vec![Err(error); changes.len()]),
        _ => CloudReply::Done(Err(error)),
    }
}

/// The route tables' size and limit after a successful list, to send before the
/// list's reply ([`CloudReply::Tables`]); `None` when the list failed or the provider
/// knows no limit.
pub fn tables_after(provider: &dyn Routes, reply: &CloudReply) -> Option<CloudReply> {
    if !matches!(reply, CloudReply::Listed(Ok(_))) {
        return None;
    }
    let tables = provider.route_tables();
    (!tables.is_empty()).then_some(CloudReply::Tables(tables))
}

fn outcome_of<T>(result: &Result<T, crate::provider::CloudError>) -> CloudOutcome {
    match result {
        Ok(_) => CloudOutcome::Success,
        Err(e) => e.kind.outcome(),
    }
}

/// How many workers the controller can keep busy: it sends a list only when nothing
/// else is out, and at most `max_in_flight` operations, no more than the budget lets
/// run at once ([`Budget::operations_at_once`]: one on Hetzner, whose network takes
/// one change at a time; on EC2 as many creates as its buckets pay for at once).
/// More workers would only wait, each with its stack and allocator cache. A
/// provider that batches has one write in flight at a time, and a list goes out only
/// when nothing else is out: one worker.
pub fn pool_size(max_in_flight: usize, budget: Option<Budget>, batch_size: Option<usize>) -> usize {
    if batch_size.is_some() {
        return 1;
    }
    budget
        .map_or(max_in_flight, |b| max_in_flight.min(b.operations_at_once()))
        .max(1)
}

/// Starts `count` workers. They stop when `jobs` is closed and drained, or when the
/// reply channel is gone. Each operation starts only while `fence` is open.
pub fn spawn(
    provider: Arc<dyn Routes>,
    fence: Fence,
    cluster_name: String,
    count: usize,
    jobs: Receiver<CloudJob>,
    replies: Sender<(OpId, CloudReply)>,
    metrics: Arc<Metrics>,
) -> std::io::Result<Vec<JoinHandle<()>>> {
    metrics.set_provider(provider.provider_name());
    (0..count.max(1))
        .map(|i| {
            let (provider, fence, cluster_name, jobs, replies, metrics) = (
                provider.clone(),
                fence.clone(),
                cluster_name.clone(),
                jobs.clone(),
                replies.clone(),
                metrics.clone(),
            );
            std::thread::Builder::new()
                .name(format!("cloud-worker-{i}"))
                .spawn(move || {
                    for job in jobs.iter() {
                        log::debug!(
                            "cloud {} (pass {}, caused by {})",
                            job.op.operation().as_str(),
                            job.cause.pass,
                            job.cause
                        );
                        let (reply, spent) = match fence.check() {
                            Ok(()) => {
                                run_op_metered(provider.as_ref(), &cluster_name, &job.op, &metrics)
                            }
                            Err(e) => (fenced(&job.op, e, &metrics), None),
                        };
                        if let Some(spent) = spent
                            && replies.send((job.id, spent)).is_err()
                        {
                            return;
                        }
                        if let Some(tables) = tables_after(provider.as_ref(), &reply)
                            && replies.send((job.id, tables)).is_err()
                        {
                            return;
                        }
                        if replies.send((job.id, reply)).is_err() {
                            return;
                        }
                    }
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Route;
    use crate::provider::{NodeDirectory, RouteChange, RouteTarget};

    /// A provider whose batches answer `answer`.
    struct Answers(Result<Vec<Result<(), CloudError>>, CloudError>);

    impl Routes for Answers {
        fn provider_name(&self) -> &'static str {
            "answers"
        }
        fn list_routes(&self, _: &str, _: &NodeDirectory) -> Result<Vec<Route>, CloudError> {
            Ok(Vec::new())
        }
        fn create_route(
            &self,
            _: &str,
            _: &str,
            _: &Route,
            _: &RouteTarget,
        ) -> Result<(), CloudError> {
            Ok(())
        }
        fn delete_route(&self, _: &str, _: &Route) -> Result<(), CloudError> {
            Ok(())
        }
        fn apply_changes(
            &self,
            _: &str,
            _: &[RouteChange],
        ) -> Result<Vec<Result<(), CloudError>>, CloudError> {
            self.0.clone()
        }
    }

    fn kinds(provider: &dyn Routes, changes: usize) -> Vec<Option<CloudErrorKind>> {
        let change = RouteChange::Delete {
            route: Route::default(),
        };
        let op = CloudOp::Apply {
            changes: vec![change; changes],
        };
        match run_op(provider, "kubernetes", &op, &Metrics::new()) {
            CloudReply::Applied(outcomes) => outcomes
                .into_iter()
                .map(|o| o.err().map(|e| e.kind))
                .collect(),
            other => panic!("not a batch's answer: {other:?}"),
        }
    }

    /// Guards the batch's answer: a request that failed as a whole fails every change,
    /// and a provider that answers for fewer or more changes than it was given has
    /// every change ambiguous, never one taken for another's outcome.
    #[test]
    fn a_batch_is_answered_once_for_each_change() {
        let conflict = CloudError::new(CloudErrorKind::Conflict, "busy");
        assert_eq!(
            kinds(&Answers(Err(conflict)), 2),
            vec![Some(CloudErrorKind::Conflict); 2]
        );
        assert_eq!(
            kinds(&Answers(Ok(vec![Ok(())])), 2),
            vec![Some(CloudErrorKind::Ambiguous); 2]
        );
        let done = Ok(vec![
            Ok(()),
            Err(CloudError::new(CloudErrorKind::NotFound, "gone")),
        ]);
        assert_eq!(
            kinds(&Answers(done), 2),
            vec![None, Some(CloudErrorKind::NotFound)]
        );
    }

    /// Guards the count of a batch's request: a write the provider sent counts even
    /// when it refused every change in it (OpenStack maps a port out of address pairs
    /// to a refusal after its update). A batch the pre-check refused whole sent
    /// nothing and counts nothing (`a_batch_the_precheck_refuses_whole_counts_no_request`
    /// in tests/controller_batches.rs).
    #[test]
    fn a_batch_refused_after_it_was_sent_counts_its_request() {
        let refused = || CloudError::refused("AllowedAddressPairExhausted", false, "full");
        let metrics = Metrics::new();
        let op = CloudOp::Apply {
            changes: vec![
                RouteChange::Delete {
                    route: Route::default(),
                };
                2
            ],
        };
        let sent = Answers(Ok(vec![Err(refused()), Err(refused())]));
        let reply = run_op(&sent, "kubernetes", &op, &metrics);
        assert!(matches!(reply, CloudReply::Applied(o) if o.iter().all(Result::is_err)));
        assert_eq!(
            metrics.cloud_requests(crate::metrics::CloudOperation::Apply),
            1
        );
    }

    /// Guards the pool's size: the budget's changes at once bound it, `max_in_flight`
    /// bounds it, a provider that batches needs one, and there is always one worker.
    #[test]
    fn the_pool_has_a_worker_per_operation_that_can_be_in_flight() {
        let hetzner = Budget::new(1.0, 10).mutations_at_once(1);
        assert_eq!(pool_size(16, Some(hetzner), None), 1);
        assert_eq!(
            pool_size(16, Some(Budget::new(1.0, 10).mutations_at_once(4)), None),
            4
        );
        assert_eq!(pool_size(2, Some(Budget::new(1.0, 10)), None), 2);
        // Full buckets pay for ten changes at once, in EC2's form as in the default.
        assert_eq!(pool_size(200, Some(Budget::new(1.0, 10)), None), 10);
        let ec2 = Budget::new(1.0, 1)
            .bucket("CreateRoute", 5.0, 100)
            .bucket("DeleteRoute", 5.0, 40)
            .draw(crate::provider::BudgetOp::Create, "CreateRoute", 1)
            .draw(crate::provider::BudgetOp::Delete, "DeleteRoute", 1);
        assert_eq!(pool_size(200, Some(ec2), None), 100);
        assert_eq!(pool_size(16, Some(ec2), None), 16);
        assert_eq!(pool_size(16, None, None), 16);
        assert_eq!(pool_size(0, None, None), 1);
        assert_eq!(pool_size(16, None, Some(100)), 1);
    }
}
