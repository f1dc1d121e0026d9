//! The reconcile actor: the thread that owns the [`Controller`] and connects it to the
//! other threads through channels.
//!
//! It waits on its input channels and on the controller's next deadline, feeds
//! whatever arrives to [`Controller::handle`] with the current time, and sends the
//! resulting commands to the cloud workers and the status writer. It holds no logic of
//! its own beyond priorities: shutdown first, then leadership (so that a lost lease
//! stops writes before anything else is handled), then replies, then node events.
//! The [`Fence`]'s deadline counts as leadership news: when it passes unrenewed, the
//! controller hears that the lease is lost at once, even while the lease thread is
//! still stuck in a renewal.

use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, at, never, select_biased};

use crate::controller::{
    CloudJob, CloudReply, Command, Controller, Input, NodeEvent, OpId, PassReport, StatusRequest,
    WriteError,
};
use crate::fence::Fence;

/// The channels around the actor. Senders of the inputs belong to the other threads.
pub struct ActorIo {
    pub nodes: Receiver<NodeEvent>,
    pub cloud_replies: Receiver<(OpId, CloudReply)>,
    pub status_replies: Receiver<(String, Result<(), WriteError>)>,
    /// `true` when the lease is gained, `false` when it is lost.
    pub leadership: Receiver<bool>,
    /// Any message, or the sender being dropped, asks for a clean shutdown.
    pub shutdown: Receiver<()>,
    /// The fence leader election keeps; its deadline passing is a loss of the lease.
    pub fence: Fence,
    pub cloud_jobs: Sender<CloudJob>,
    pub status_requests: Sender<StatusRequest>,
    /// Where pass reports go besides the log, if anywhere (tests, embedding tools).
    pub reports: Option<Sender<PassReport>>,
}

/// Why the actor returned: the controller's decision (re-exported here for the
/// binary, which maps it to an exit status).
pub use crate::controller::Exit;

/// Runs the actor until the controller says it is done ([`Command::Exit`]: shutdown
/// drained, lease lost) or the node watch ends.
pub fn run(mut controller: Controller, mut io: ActorIo) -> Exit {
    let mut shutting_down = false;
    loop {
        let timer = controller.next_deadline().map(at).unwrap_or_else(never);
        let fence_deadline = io.fence.deadline().map(at).unwrap_or_else(never);
        let input = select_biased! {
            recv(io.shutdown) -> _ => {
                io.shutdown = never();
                shutting_down = true;
                log::info!("shutdown requested: no new passes; waiting for in-flight operations");
                Input::Shutdown
            }
            recv(io.leadership) -> msg => match msg {
                Ok(leading) => Input::Leadership(leading),
                Err(_) => { io.leadership = never(); continue; }
            },
            recv(fence_deadline) -> _ => {
                if io.fence.check().is_ok() || !controller.is_leading() {
                    continue; // renewed meanwhile, or nothing to stop
                }
                log::error!("the leader lease's renew deadline passed without a renewal");
                Input::Leadership(false)
            }
            recv(io.cloud_replies) -> msg => match msg {
                Ok((id, reply)) => Input::Cloud { id, reply },
                Err(_) => { io.cloud_replies = never(); continue; }
            },
            recv(io.status_replies) -> msg => match msg {
                Ok((node, result)) => Input::ConditionWritten { node, result },
                Err(_) => { io.status_replies = never(); continue; }
            },
            recv(io.nodes) -> msg => match msg {
                Ok(event) => Input::Node(event),
                Err(_) => {
                    if shutting_down {
                        io.nodes = never();
                        continue;
                    }
                    log::error!("the node watch stopped; exiting");
                    return Exit::WatchEnded;
                }
            },
            recv(timer) -> _ => Input::Tick,
        };
        let commands = controller.handle(input, Instant::now());
        if let Some(exit) = dispatch(commands, &io) {
            return exit;
        }
    }
}

/// Forwards each command whole, cause included, to the driver that carries it out;
/// returns the controller's exit, if it decided one.
fn dispatch(commands: Vec<Command>, io: &ActorIo) -> Option<Exit> {
    let mut exit = None;
    for command in commands {
        match command {
            Command::Cloud { id, op, cause } => {
                if io.cloud_jobs.send(CloudJob { id, op, cause }).is_err() {
                    log::error!("cloud workers are gone; operation {id} dropped");
                }
            }
            Command::WriteCondition {
                node,
                uid,
                condition,
                cause,
            } => {
                let _ = io.status_requests.send(StatusRequest::WriteCondition {
                    node,
                    uid,
                    condition,
                    cause,
                });
            }
            Command::RecordEvent { event, cause } => {
                let _ = io
                    .status_requests
                    .send(StatusRequest::RecordEvent { event, cause });
            }
            Command::PassFinished(report) => {
                if report.list_error.is_some() || report.failed > 0 {
                    log::warn!("{report}");
                } else {
                    log::info!("{report}");
                }
                if let Some(tx) = &io.reports {
                    let _ = tx.send(report);
                }
            }
            Command::Exit(why) => exit = Some(why),
        }
    }
    exit
}
