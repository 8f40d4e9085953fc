//! The parity host: one tokio task per actor on a paused current-thread runtime.
//!
//! Each round the coordinator sends every affected actor its work over the actor's mailbox and
//! then awaits the replies in name order: one handshake per actor per round. The runtime's clock
//! is paused and no tokio timer is ever set, so tokio time never moves; a check after every
//! round enforces it. Simulated time lives only in the coordinator.

use tokio::runtime::{Builder, Runtime};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, LocalSet};

use super::{Work, perform};
use crate::actor::{Actor, ActorId};
use crate::message::Message;

struct Job<M> {
    work: Work<M>,
    reply: oneshot::Sender<Work<M>>,
}

pub(crate) struct TaskHost<M: Message> {
    runtime: Runtime,
    local: LocalSet,
    mailboxes: Vec<mpsc::UnboundedSender<Job<M>>>,
    tasks: Vec<JoinHandle<Box<dyn Actor<M>>>>,
    replies: Vec<oneshot::Receiver<Work<M>>>,
    frozen_clock: tokio::time::Instant,
}

async fn serve<M: Message>(
    mut actor: Box<dyn Actor<M>>,
    mut mailbox: mpsc::UnboundedReceiver<Job<M>>,
) -> Box<dyn Actor<M>> {
    while let Some(Job { mut work, reply }) = mailbox.recv().await {
        perform(actor.as_mut(), &mut work);
        if reply.send(work).is_err() {
            break;
        }
    }
    actor
}

impl<M: Message> TaskHost<M> {
    pub(crate) fn new(actors: Vec<Box<dyn Actor<M>>>) -> TaskHost<M> {
        let runtime = Builder::new_current_thread()
            .start_paused(true)
            .build()
            .expect("a current-thread tokio runtime can always be built");
        let local = LocalSet::new();
        let mut mailboxes = Vec::with_capacity(actors.len());
        let mut tasks = Vec::with_capacity(actors.len());
        for actor in actors {
            let (sender, receiver) = mpsc::unbounded_channel();
            mailboxes.push(sender);
            tasks.push(local.spawn_local(serve(actor, receiver)));
        }
        let frozen_clock = runtime.block_on(async { tokio::time::Instant::now() });
        TaskHost { runtime, local, mailboxes, tasks, replies: Vec::new(), frozen_clock }
    }

    pub(crate) fn run_round(&mut self, affected: &[ActorId], works: &mut [Work<M>]) {
        let TaskHost { runtime, local, mailboxes, tasks, replies, frozen_clock } = self;
        runtime.block_on(local.run_until(async {
            for &id in affected {
                let (reply, receiver) = oneshot::channel();
                let work = std::mem::replace(&mut works[id.index()], Work::new(id));
                if mailboxes[id.index()].send(Job { work, reply }).is_err() {
                    rethrow(&mut tasks[id.index()]).await;
                }
                replies.push(receiver);
            }
            for receiver in replies.drain(..) {
                match receiver.await {
                    Ok(work) => {
                        let index = work.actor.index();
                        works[index] = work;
                    }
                    Err(_) => {
                        // The task dropped its reply: it panicked. Find it and rethrow.
                        for task in tasks.iter_mut().filter(|t| t.is_finished()) {
                            rethrow(task).await;
                        }
                        panic!("an actor task stopped without replying");
                    }
                }
            }
            assert_eq!(
                tokio::time::Instant::now(),
                *frozen_clock,
                "the parity host's tokio clock moved: some actor used a tokio timer"
            );
        }));
    }

    pub(crate) fn into_actors(self) -> Vec<Box<dyn Actor<M>>> {
        let TaskHost { runtime, local, mailboxes, tasks, .. } = self;
        drop(mailboxes);
        runtime.block_on(local.run_until(async {
            let mut actors = Vec::with_capacity(tasks.len());
            for task in tasks {
                match task.await {
                    Ok(actor) => actors.push(actor),
                    Err(error) => std::panic::resume_unwind(error.into_panic()),
                }
            }
            actors
        }))
    }
}

async fn rethrow<M: Message>(task: &mut JoinHandle<Box<dyn Actor<M>>>) {
    if let Err(error) = task.await
        && error.is_panic()
    {
        std::panic::resume_unwind(error.into_panic());
    }
}
