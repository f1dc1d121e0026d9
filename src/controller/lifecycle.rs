//! Leadership and shutdown: when this replica may write, and when its drivers should
//! stop. Both are decisions in virtual time like the rest: the drain deadline is a
//! timer of the controller, and the exit is a command ([`Command::Exit`]).

use std::time::Instant;

use super::{Command, Controller, Exit, Trigger};

impl Controller {
    pub(super) fn on_leadership(&mut self, leading: bool, now: Instant, out: &mut Vec<Command>) {
        if leading == self.leading {
            return;
        }
        self.leading = leading;
        self.metrics.leader.set(i64::from(leading));
        self.metrics.leader_transitions.inc();
        if leading {
            self.handover_at = self.config.handover_relist.map(|after| now + after);
            if self.nodes.is_synced() {
                self.arm_timer(now);
                self.trigger(Trigger::Leadership, now);
            }
        } else {
            self.handover_at = None;
            // Writes stop at once: nothing queued is sent; replies still update the view.
            self.abandon_planning(now, out);
            self.cancel_queued(now, out);
            self.scheduler.clear();
            // As the CCM does, the process ends and a standby takes over. During a
            // shutdown's drain it ends too, cleanly (SIGTERM means exit 0): whatever
            // is still in flight can no longer send a request past the fence, so
            // there is nothing left to wait for.
            if self.shutting_down {
                log::warn!("lost the leader lease while draining; stopping now");
                self.exit(Exit::Shutdown, out);
            } else {
                log::error!("lost the leader lease; stopping");
                self.exit(Exit::LostLeadership, out);
            }
        }
    }

    /// Dual protection behind the fence: the previous leader stopped sending at its
    /// renew deadline at the latest, but a request it had on the wire may land up to
    /// the cloud's request timeout later, after this replica's first list. Listing
    /// again once that has passed shows such a late write, and the pass repairs it.
    pub(super) fn handover_due(&mut self, now: Instant) {
        if self.handover_at.is_some_and(|t| t <= now) {
            self.handover_at = None;
            self.trigger(Trigger::Handover, now);
        }
    }

    /// Stop starting passes and sending; let what is in flight finish, for at most
    /// `drain_timeout`.
    pub(super) fn on_shutdown(&mut self, now: Instant, out: &mut Vec<Command>) {
        self.shutting_down = true;
        self.drain_until
            .get_or_insert(now + self.config.drain_timeout);
        self.abandon_planning(now, out);
        self.cancel_queued(now, out);
    }

    /// A shutdown ends when nothing is in flight or the drain deadline passes.
    pub(super) fn maybe_exit(&mut self, now: Instant, out: &mut Vec<Command>) {
        let Some(limit) = self.drain_until else {
            return;
        };
        if self.exited {
            return;
        }
        if !self.is_idle() {
            if now < limit {
                return;
            }
            log::warn!(
                "shutdown: giving up on in-flight operations after {}",
                crate::duration::format(self.config.drain_timeout)
            );
        }
        self.exit(Exit::Shutdown, out);
    }

    fn exit(&mut self, why: Exit, out: &mut Vec<Command>) {
        if !self.exited {
            self.exited = true;
            out.push(Command::Exit(why));
        }
    }
}
