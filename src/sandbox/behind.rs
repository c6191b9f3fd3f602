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
//! the removal of the cgroup leaf — is finished by a thread of the sandbox's
//! own (the reaper), not by the caller's runtime: a current-thread runtime
//! that is not polled between two commands, or one that is dropped, would
//! otherwise leave the leaf in place. [`Behind::settle`] waits for all of it
//! ([`Sandbox::settle`]; a `Workspace`'s `dispose` does, and so does
//! `portcullis exec` before it exits). The reaper thread is started with
//! the first rest and ends once every handle of the sandbox is gone and the
//! rests it holds are finished.
//!
//! A sandbox of one command ([`Sandbox::one_shot`], `portcullis exec`'s)
//! keeps its rests instead, and [`Behind::settle`] finishes them on
//! the caller's task: the caller waits for the teardown right after the
//! result anyway, and a thread started for it, woken by the helper's exit
//! and waking the caller in turn, put two more wake-ups across the CPUs on
//! the path from the command's end to the caller's (each 0.1–0.5 ms on
//! this project's 2-vCPU VM). Dropped unsettled, a rest still finishes
//! (its fields' drops, bounded as the reaper's).
//!
//! [`Sandbox::one_shot`]: super::Sandbox::one_shot
//!
//! [`Sandbox::settle`]: super::Sandbox::settle

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, Weak};
use std::time::Duration;

use super::cgroup::Cgroup;
use super::launch;
use super::pool::Pool;

/// The teardowns of one sandbox (shared by its clones).
#[derive(Debug, Clone, Default)]
pub(super) struct Behind {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    going: AtomicUsize,
    idle: tokio::sync::Notify,
    /// The reaper's queue, once it is started.
    reaper: Mutex<Option<mpsc::Sender<Rest>>>,
    /// `Some`: no reaper; the rests wait here for `settle`.
    kept: Option<Mutex<Vec<Rest>>>,
}

/// One run's rest. Fields drop in order: the lifeline closes first (the
/// helper then kills its pid 1, if it is still there), then the helper is
/// reaped, then the cgroup leaf removed.
pub(super) struct Rest {
    lifeline: Option<OwnedFd>,
    child: launch::Helper,
    cgroup: Option<Cgroup>,
    /// The sandbox's pool, refilled once the rest is done (unless the
    /// sandbox is gone by then).
    refill: Option<Weak<Pool>>,
    /// Closed once the helper is reaped (`run::Launched::held`).
    held: Vec<OwnedFd>,
}

impl std::fmt::Debug for Rest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rest").field("helper", &self.child.pid()).finish()
    }
}

impl Rest {
    pub(super) fn new(lifeline: Option<OwnedFd>, child: launch::Helper, cgroup: Option<Cgroup>) -> Rest {
        Rest { lifeline, child, cgroup, refill: None, held: Vec::new() }
    }

    /// Close `held` once the helper is reaped.
    pub(super) fn holding(mut self, held: Vec<OwnedFd>) -> Rest {
        self.held = held;
        self
    }

    /// Refill `pool` once this rest is finished: making a slot right after
    /// the result (a thread, a helper, its namespaces and mounts) took the
    /// core the caller's runtime needed to deliver it (a `perf` timeline
    /// showed the run's own task preempted for up to a millisecond), and
    /// the teardown needs the CPU too.
    pub(super) fn then_refill(mut self, pool: Option<&Arc<Pool>>) -> Rest {
        self.refill = pool.map(Arc::downgrade);
        self
    }

    /// On the caller's task, in [`Behind::settle`]: as [`Rest::finish`],
    /// with the same bounds. Each step can be cut short (the settle's
    /// bound) and taken again.
    async fn finish_here(&mut self) {
        if !self.child.reaped() {
            let exited = |r: Result<std::io::Result<launch::Exit>, _>| matches!(r, Ok(Ok(_)));
            if !exited(tokio::time::timeout(Duration::from_secs(3), self.child.wait()).await) {
                self.child.kill();
                let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
            }
        }
        drop(self.lifeline.take());
        self.held.clear();
        if let Some(c) = self.cgroup.as_mut() {
            c.kill_and_remove(Duration::from_secs(5)).await;
        }
        if let Some(pool) = self.refill.take().and_then(|p| p.upgrade()) {
            pool.refill();
        }
    }

    /// On the reaper thread.
    fn finish(mut self) {
        // The helper exits once its pid 1 has, and pid 1's exit is the
        // namespaces' teardown.
        if !self.child.wait_blocking(Duration::from_secs(3)) {
            self.child.kill();
            self.child.wait_blocking(Duration::from_secs(5));
        }
        drop(self.lifeline.take());
        self.held.clear();
        if let Some(c) = self.cgroup.as_mut() {
            // On failure, the leaf's `Drop` tries once more; a leaf left
            // after that is swept by the next `Sandbox::new`.
            c.kill_and_remove_blocking(Duration::from_secs(5));
        }
        if let Some(pool) = self.refill.take().and_then(|p| p.upgrade()) {
            pool.refill();
        }
    }
}

/// One teardown less; the last one wakes `settle`.
fn done(inner: &Inner) {
    if inner.going.fetch_sub(1, Ordering::SeqCst) == 1 {
        inner.idle.notify_waiters();
    }
}

impl Behind {
    /// Rests kept for [`Behind::settle`], with no reaper thread (see the
    /// module documentation).
    pub(super) fn kept() -> Behind {
        Behind { inner: Arc::new(Inner { kept: Some(Mutex::default()), ..Inner::default() }) }
    }

    /// Hand `rest` to the reaper (started with the first one). Where no
    /// thread can be started, `rest` is finished here, blocking (a few
    /// hundred microseconds, bounded like the reaper's).
    pub(super) fn start(&self, rest: Rest) {
        self.inner.going.fetch_add(1, Ordering::SeqCst);
        if let Some(kept) = &self.inner.kept {
            lock(kept).push(rest);
            // A settle waiting for others' rests takes this one too.
            self.inner.idle.notify_waiters();
            return;
        }
        let mut reaper = self.inner.reaper.lock().unwrap_or_else(|p| p.into_inner());
        if reaper.is_none() {
            *reaper = spawn_reaper(Arc::downgrade(&self.inner));
        }
        let rest = match reaper.as_ref() {
            Some(tx) => match tx.send(rest) {
                Ok(()) => return,
                Err(mpsc::SendError(rest)) => {
                    *reaper = None;
                    rest
                }
            },
            None => rest,
        };
        drop(reaper);
        rest.finish();
        done(&self.inner);
    }

    /// Wait until no teardown is going, at most `bound`; whether none is.
    /// With kept rests, every settle takes what is kept and finishes it, and
    /// looks again whenever woken (another settle put back what its bound
    /// cut short, or a run added a rest).
    pub(super) async fn settle(&self, bound: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            // Made before the count is read, so a wake-up in between is kept.
            let idle = self.inner.idle.notified();
            if let Some(kept) = &self.inner.kept {
                let mut taken = Taken { inner: &self.inner, rests: Vec::new() };
                taken.rests = std::mem::take(&mut *lock(kept)).into_iter().map(Some).collect();
                for slot in &mut taken.rests {
                    let Some(rest) = slot.as_mut() else { continue };
                    // Past the bound, the rest goes back (the guard's drop),
                    // for the next settle or the sandbox's drop.
                    if tokio::time::timeout_at(deadline, rest.finish_here()).await.is_ok() {
                        *slot = None;
                        done(&self.inner);
                    }
                }
            }
            if self.inner.going.load(Ordering::SeqCst) == 0 {
                return true;
            }
            // Checked here, not only by the timeout below: a put-back of this
            // settle's own (its bound cut it short) wakes `idle` at once.
            if tokio::time::Instant::now() >= deadline || tokio::time::timeout_at(deadline, idle).await.is_err() {
                return self.inner.going.load(Ordering::SeqCst) == 0;
            }
        }
    }
}

fn lock(kept: &Mutex<Vec<Rest>>) -> std::sync::MutexGuard<'_, Vec<Rest>> {
    kept.lock().unwrap_or_else(|p| p.into_inner())
}

/// The rests one settle took: what it has not finished goes back to the
/// kept list when it ends, or when it is dropped midway (a caller's own
/// timeout around it), and the other settles are woken to take it.
struct Taken<'a> {
    inner: &'a Inner,
    rests: Vec<Option<Rest>>,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        let left: Vec<Rest> = self.rests.drain(..).flatten().collect();
        if left.is_empty() {
            return;
        }
        if let Some(kept) = &self.inner.kept {
            lock(kept).extend(left);
        }
        self.inner.idle.notify_waiters();
    }
}

/// The reaper: finishes the rests in the order they come, until every
/// handle of the sandbox is gone (the queue's sender with them).
fn spawn_reaper(inner: Weak<Inner>) -> Option<mpsc::Sender<Rest>> {
    let (tx, rx) = mpsc::channel::<Rest>();
    let started = std::thread::Builder::new().name("portcullis-reaper".into()).spawn(move || {
        for rest in rx {
            rest.finish();
            if let Some(inner) = inner.upgrade() {
                done(&inner);
            }
        }
    });
    started.ok().map(|_| tx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn rt() -> tokio::runtime::Runtime {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build();
        rt.unwrap_or_else(|e| panic!("runtime: {e}"))
    }

    /// A helper stand-in: `/bin/sleep secs`, attached to the current runtime.
    fn sleeper(secs: &str) -> launch::Helper {
        let s = launch::spawn_detached(Path::new("/bin/sleep"), &[secs], &[], None);
        let s = s.unwrap_or_else(|e| panic!("spawn sleep: {e}"));
        s.attach().unwrap_or_else(|e| panic!("attach: {e}"))
    }

    /// A kept rest is finished by `settle`, not before: `settle(0)` while
    /// its process still runs is cut short and keeps it (nothing lost), a
    /// settle with a bound finishes it, and two at once both see it done.
    /// The control: a rest handed to the reaper is finished without any
    /// settle.
    #[test]
    fn a_kept_rest_waits_for_settle_and_survives_a_cut_short_one() {
        rt().block_on(async {
            let kept = Behind::kept();
            let child = sleeper("0.3");
            let pid = child.pid();
            kept.start(Rest::new(None, child, None));
            assert!(!kept.settle(Duration::ZERO).await, "settle(0) finished a rest whose process still runs");
            tokio::time::sleep(Duration::from_millis(500)).await;
            // The process has exited, but nothing reaped it: a kept rest
            // waits for settle.
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            assert!(stat.contains(") Z "), "not a zombie before settle: {stat}");
            let (a, b) = tokio::join!(kept.settle(Duration::from_secs(5)), kept.settle(Duration::from_secs(5)));
            assert!(a && b, "not settled: {a} {b}");
            assert!(!Path::new(&format!("/proc/{pid}")).exists(), "not reaped after settle");
            // CONTROL: the reaper finishes a rest with no settle at all.
            let reaped = Behind::default();
            let child = sleeper("0.1");
            let pid = child.pid();
            reaped.start(Rest::new(None, child, None));
            tokio::time::sleep(Duration::from_millis(600)).await;
            assert!(!Path::new(&format!("/proc/{pid}")).exists(), "the reaper did not reap");
            assert!(reaped.settle(Duration::ZERO).await);
        });
    }

    /// A settle dropped midway (the caller's own timeout around it) puts
    /// back what it took, at once and without blocking: a later settle
    /// finishes it, and the count stays right.
    #[test]
    fn a_settle_dropped_midway_loses_nothing() {
        rt().block_on(async {
            let kept = Behind::kept();
            kept.start(Rest::new(None, sleeper("0.6"), None));
            let t = std::time::Instant::now();
            let cut = tokio::time::timeout(Duration::from_millis(100), kept.settle(Duration::from_secs(10))).await;
            assert!(cut.is_err(), "the settle ended before its caller's timeout");
            assert!(t.elapsed() < Duration::from_millis(400), "the dropped settle blocked for {:?}", t.elapsed());
            assert!(kept.settle(Duration::from_secs(5)).await, "the rest was lost");
            assert!(kept.settle(Duration::ZERO).await, "the count is off");
        });
    }

    /// Two settles at once: the one holding the rests runs out of time and
    /// puts them back; the other, still within its bound, takes and
    /// finishes them (it is woken, not left waiting until its own bound).
    /// A rest added while a settle waits is taken by it too.
    #[test]
    fn a_waiting_settle_takes_what_another_put_back() {
        rt().block_on(async {
            let kept = Behind::kept();
            kept.start(Rest::new(None, sleeper("0.8"), None));
            let t = std::time::Instant::now();
            let short = kept.settle(Duration::from_millis(300));
            let long = async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                kept.settle(Duration::from_secs(4)).await
            };
            let (a, b) = tokio::join!(short, long);
            assert!(!a, "the short settle finished a rest that runs 0.8 s");
            assert!(b, "the long settle did not finish the rest put back");
            assert!(t.elapsed() < Duration::from_secs(2), "the long settle waited {:?}", t.elapsed());
            // A rest added while a settle waits for another's.
            kept.start(Rest::new(None, sleeper("0.4"), None));
            let t = std::time::Instant::now();
            let (a, b) = tokio::join!(kept.settle(Duration::from_secs(4)), async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                kept.start(Rest::new(None, sleeper("0.2"), None));
                kept.settle(Duration::from_secs(4)).await
            });
            assert!(a && b, "not settled: {a} {b}");
            assert!(t.elapsed() < Duration::from_secs(2), "settling took {:?}", t.elapsed());
        });
    }
}
