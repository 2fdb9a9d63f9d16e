//! Token outputs on their way to the request streams, sent while the device runs the next step.
//!
//! A step's outputs are routed to the HTTP handlers' channels, and each send may wake a task on
//! another thread: at 128 sequences that is most of the 0.1 ms the engine thread spends after a
//! step. The step loop therefore queues a step's outputs here and sends them from the next
//! step's launch callback, once its forward is queued on the device and before the host waits
//! for its tokens; they go out at once when no step follows (the loop is about to idle), and
//! before anything else is said to a client (a failure, an abort), so each stream keeps its
//! order. A client that hung up is reported back, for the loop to abort its request once the
//! step in flight is done with it.

use tokio::sync::mpsc::UnboundedSender;

use super::StepOutput;
use crate::scheduler::io::RequestId;

struct Mail {
    id: RequestId,
    to: UnboundedSender<StepOutput>,
    out: StepOutput,
}

#[derive(Default)]
pub(super) struct Outbox {
    mail: Vec<Mail>,
    /// Requests whose client was gone when their (unfinished) output was sent.
    hung_up: Vec<RequestId>,
}

impl Outbox {
    pub(super) fn push(&mut self, id: RequestId, to: UnboundedSender<StepOutput>, out: StepOutput) {
        self.mail.push(Mail { id, to, out });
    }

    /// Sends everything queued, in order.
    pub(super) fn flush(&mut self) {
        for m in self.mail.drain(..) {
            let done = m.out.finished.is_some();
            if m.to.send(m.out).is_err() && !done {
                self.hung_up.push(m.id);
            }
        }
    }

    /// The requests found hung up since the last call.
    pub(super) fn take_hung_up(&mut self) -> Vec<RequestId> {
        std::mem::take(&mut self.hung_up)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(finished: bool) -> StepOutput {
        StepOutput {
            new_token_ids: vec![7],
            logprobs: Vec::new(),
            prompt_logprobs: None,
            finished: finished.then_some(crate::scheduler::FinishedRequest {
                reason: crate::scheduler::FinishReason::Length,
                num_prompt_tokens: 1,
                num_generated_tokens: 1,
                num_cached_prompt_tokens: 0,
                num_preemptions: 0,
            }),
        }
    }

    #[test]
    fn mail_waits_for_flush_keeps_its_order_and_reports_hang_ups() {
        let mut outbox = Outbox::default();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let (gone, gone_rx) = tokio::sync::mpsc::unbounded_channel();
        drop(gone_rx);
        outbox.push(1, tx.clone(), output(false));
        outbox.push(2, gone.clone(), output(false));
        outbox.push(1, tx, output(true));
        outbox.push(3, gone, output(true));
        assert!(rx.try_recv().is_err(), "nothing is sent before the flush");
        outbox.flush();
        assert!(rx.try_recv().expect("first").finished.is_none());
        assert!(rx.try_recv().expect("second").finished.is_some());
        // Request 2 was unfinished when its client left: abort it. Request 3 had finished.
        assert_eq!(outbox.take_hung_up(), vec![2]);
        assert!(outbox.take_hung_up().is_empty());
        outbox.flush();
        assert!(rx.try_recv().is_err(), "a flush sends each output once");
    }
}
