//! What a run leaves behind its result: the helper and its pid 1, exiting,
//! and the namespaces and cgroup leaf they tear down.
//!
//! In the full sandbox, pid 1 reports the command's status only once it has
//! killed and reaped every other process of its pid namespace; the library
//! then checks from outside that the run's cgroup holds nothing but the
//! helper and its pid 1 (`run::only_scaffolding`). From there on nothing of
//! the command can run, write or hold the output pipes, so the result is
//! returned at once, and what is left — pid 1's exit, which unmounts the
//! sandbox's mounts and frees its namespaces, the helper's reaping of it,
//! the removal of the cgroup leaf — finishes here, on a task of its own.
//! [`Behind::settle`] waits for all of it ([`Sandbox::settle`]; a
//! `Workspace`'s `dispose` does, and so does `portcullis exec` before it
//! exits). Dropped unfinished (the runtime shut down), a [`Rest`] kills
//! and reaps the helper and removes the leaf in its fields' `Drop`s.
//!
//! [`Sandbox::settle`]: super::Sandbox::settle

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::cgroup::Cgroup;
use super::launch;

/// The teardowns of one sandbox (shared by its clones).
#[derive(Debug, Clone, Default)]
pub(super) struct Behind {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    going: AtomicUsize,
    idle: tokio::sync::Notify,
}

/// One run's rest. Fields drop in order: the lifeline closes first (the
/// helper then kills its pid 1, if it is still there), then the helper is
/// reaped, then the cgroup leaf removed.
pub(super) struct Rest {
    lifeline: Option<OwnedFd>,
    child: launch::Helper,
    cgroup: Option<Cgroup>,
}

impl Rest {
    pub(super) fn new(lifeline: Option<OwnedFd>, child: launch::Helper, cgroup: Option<Cgroup>) -> Rest {
        Rest { lifeline, child, cgroup }
    }

    async fn finish(mut self) {
        // The helper exits once its pid 1 has, and pid 1's exit is the
        // namespaces' teardown.
        if tokio::time::timeout(Duration::from_secs(3), self.child.wait()).await.is_err() {
            self.child.kill();
            let _ = self.child.wait().await;
        }
        drop(self.lifeline.take());
        if let Some(c) = self.cgroup.as_mut() {
            // On failure, the leaf's `Drop` tries once more; a leaf left
            // after that is swept by the next `Sandbox::new`.
            c.kill_and_remove(Duration::from_secs(5)).await;
        }
    }
}

/// Counts a teardown as going until it is dropped (finished or abandoned).
struct Going(Arc<Inner>);

impl Drop for Going {
    fn drop(&mut self) {
        if self.0.going.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Behind {
    /// Finish `rest` on a task of its own.
    pub(super) fn start(&self, rest: Rest) {
        self.inner.going.fetch_add(1, Ordering::SeqCst);
        let going = Going(Arc::clone(&self.inner));
        tokio::spawn(async move {
            let _going = going;
            rest.finish().await;
        });
    }

    /// Wait until no teardown is going, at most `bound`; whether none is.
    pub(super) async fn settle(&self, bound: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            // Made before the count is read, so a wake-up in between is kept.
            let idle = self.inner.idle.notified();
            if self.inner.going.load(Ordering::SeqCst) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return self.inner.going.load(Ordering::SeqCst) == 0;
            }
        }
    }
}
