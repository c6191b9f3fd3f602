//! Pre-made sandboxes: a [`Sandbox`](super::Sandbox) made with a pool keeps
//! up to `size` helpers started with `--slot` (`helper/src/slot.rs`), each
//! with its namespaces, its cgroup leaf and the plan's system mounts
//! (`/usr`, `/etc`, `/tmp`, `/proc`, `/dev`) made ahead. A run whose plan a
//! slot admits ([`SlotSpec::admits`]: the same identity, network, cgroup
//! limits and system mounts, and none of the run's own mounts before a
//! related one of the slot's) takes a slot and sends it its spec; the slot
//! makes the run's own mounts (workspace, grants, read roots, carve-outs,
//! masks) and runs the command exactly as a fresh helper would. Every slot
//! is used once: nothing of one run is ever seen by another.
//!
//! What the slot makes ahead is whatever the last run's plan had in common
//! with every run (its "base"): the first run of a sandbox, and the first
//! after the base changed (another `/tmp` size, a run with the host's
//! network), is run by a fresh helper while the pool refills for the new
//! base. A slot is made on one of the pool's maker threads (as many as its
//! size, up to the CPUs, for the pool's life, started with its first slot): right after one is taken
//! when no other is ready, else once the run that took it has ended and
//! its teardown is done (the sandbox's reaper starts it: `sandbox::behind`),
//! so that it costs no time on either run's critical path (the CPU it
//! takes is the same as a fresh run's setup); while runs outpace it, it
//! makes none (`PRESSURE`), since a fresh run costs less CPU than a slot. A slot that fails while it is built
//! is thrown away; three in a row turn the pool off (runs go on with fresh
//! helpers), and [`Pool::status`] says why.
//!
//! An idle slot is two sleeping processes (its pid 1, cloned by the
//! sandbox's zygote as this process's child, and the command's process
//! forked ahead; three, with an outer helper, where the zygote cannot
//! clone it: `launch::Launcher::clone_slot`)
//! with their namespaces, a 1 MiB root tmpfs holding only mount points, a
//! detached copy of the host's mount tree (for the request's bind sources),
//! and an empty cgroup leaf. The request goes straight to the command's
//! process over the slot's socket; for a root caller the library first
//! makes the run's idmapped trees through the user namespace the slot sent
//! with its `k`. Dropping the pool
//! closes every slot's socket and lifeline: the helper kills its pid 1 (and
//! with it the namespaces and mounts), exits, and its cgroup is removed.
//! When the process holding the pool dies, the same happens through the
//! lifeline and pid 1's parent-death signal.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

use nix::sys::socket::{sendmsg, socketpair, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType};
use portcullis_helper::mount_api::place_at;
use portcullis_helper::report::Step;
use portcullis_helper::spec::{Mode, MountOp, SlotSpec, SpawnSpec, SPEC_VERSION};

use super::cgroup::{Cgroup, CgroupHost, CgroupPlan};
use super::network::Namespaces;
use super::{launch, run, sys, Plan, SandboxError, Stdin};

/// Failed slots in a row (with no slot handed out between) that turn the
/// pool off.
const MAX_FAILURES: u32 = 3;

/// How long the pool stops making slots after a run found none ready while
/// one was being made and another run had started less than this before
/// (one caller's commands one after another never pause it, nor does a
/// background job long under way): runs come faster than slots are made, so a slot
/// would only be a fresh run's setup made earlier, at a higher cost (the
/// mount table read and compared, the host's tree copied, the shape's
/// messages: a pooled `/bin/true` costs about 0.4 ms more CPU than a fresh
/// one), on cores the runs need. Each such run renews it; once it has
/// passed with none, the pool fills up again.
const PRESSURE: std::time::Duration = std::time::Duration::from_millis(100);

/// What the slots of a pool are made for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    /// Shared by the pool's state, its jobs and its slots (compared by
    /// value: `Arc`'s equality is its content's).
    base: Arc<SlotSpec>,
    cgroup: Option<CgroupPlan>,
}

/// One pre-made sandbox. Fields drop in order: the socket and the lifeline
/// close first, then the helper is waited for, then its cgroup removed.
pub(super) struct Slot {
    sock: OwnedFd,
    lifeline: OwnedFd,
    report_r: OwnedFd,
    child: launch::Spawned,
    cgroup: Option<Cgroup>,
    key: Key,
    /// The workspace's network the slot joined, when it joined one: a slot
    /// is only ever handed to a run of that network.
    net: Option<Arc<Namespaces>>,
    ready: bool,
    /// Pid 1's user namespace, which the helper sends with `k` to a root
    /// caller: the run's idmapped trees are made through it.
    userns: Option<OwnedFd>,
    /// Pid 1's pid, which the helper sends with `k` (pid 1 is its child,
    /// so the pid stays pid 1's until the helper reaps it), or the zygote
    /// with its clone.
    pid1: Option<libc::pid_t>,
    /// Cloned by the zygote (`child` is pid 1 itself, and the command's
    /// process says a bare `k`), not started as an outer helper.
    direct: bool,
    /// What the slot built for one shape of run, when it was prepared.
    prepared: Option<Box<Readied>>,
    /// The host's mount table as read just before the slot copied the
    /// host's tree ([`Table`]), or `None` where it could not be read (then
    /// the slot is never used).
    table: Option<Arc<Table>>,
}

/// A slot built whole for one shape of run (`helper/src/slot.rs`,
/// `prepared`): its own mounts made, its command's process confined
/// (limits, capabilities, Landlock, seccomp with the observer's listener
/// handed over), waiting for the command, its environment and its working
/// directory.
struct Readied {
    /// The spec it was built for; a run whose spec has the same shape
    /// ([`SpawnSpec::same_shape`]) may take it.
    shape: Arc<SpawnSpec>,
    /// The indexes of `shape`'s own mounts (the ones not made with the slot).
    own: Vec<usize>,
    /// The mount each own mount's destination lay on once the slot had made
    /// them all, as the slot's command process found it.
    mounts: Vec<u64>,
    /// The sandbox's root (`O_PATH`), through which the destinations are
    /// looked at again at the request.
    root: OwnedFd,
    /// The run's observer, started when the slot installed its filter.
    observing: Option<super::observe::Setup>,
    /// The copy of the host's tree the slot sent back (a slot with no
    /// outer helper), held until the run's teardown.
    host: Option<OwnedFd>,
    /// Runs a slot fit since this one was prepared whose shape was another:
    /// at [`MAX_OTHER_SHAPES`] it is given up, so that the refill prepares
    /// for the shape runs have moved to (runs alternating between two
    /// shapes leave it alone).
    others: u32,
}

/// Runs of another shape after which a prepared slot is given up.
const MAX_OTHER_SHAPES: u32 = 2;

impl Readied {
    /// Whether everything the slot made for its own mounts is still what the
    /// run's plan describes: each destination on the mount the slot made
    /// there (a mount whose host dentry was unlinked or renamed over since
    /// is detached by the kernel, and a mask or carve-out gone would leave
    /// what it covered open), and each bind showing the object now at its
    /// host source (a directory renamed away and made again would still be
    /// the old one in the slot). Plain `statx` calls, through the sandbox's
    /// root: a destination resolved anywhere else (through a link) lies on
    /// a mount the slot did not make, so it fails the check too.
    fn still_fresh(&self) -> bool {
        self.own.len() == self.mounts.len()
            && self.own.iter().zip(&self.mounts).all(|(&i, &made)| {
                let Some(op) = self.shape.mounts.get(i) else { return false };
                let rel = op.dst().strip_prefix(b"/").unwrap_or(op.dst());
                let rel = if rel.is_empty() { &b"."[..] } else { rel };
                let Ok(rel) = std::ffi::CString::new(rel) else { return false };
                let Ok(now) = place_at(Some(self.root.as_fd()), &rel) else { return false };
                if now.mount != made {
                    return false;
                }
                match op {
                    MountOp::Bind { src, .. } => {
                        let Ok(src) = std::ffi::CString::new(src.as_slice()) else { return false };
                        place_at(None, &src).is_ok_and(|host| (host.dev, host.ino) == (now.dev, now.ino))
                    }
                    _ => true,
                }
            })
    }
}

fn same_net(a: Option<&Arc<Namespaces>>, b: Option<&Arc<Namespaces>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// The state of a pool, as [`Sandbox::pool_status`](super::Sandbox::pool_status) reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PoolStatus {
    /// How many slots it keeps.
    pub size: usize,
    /// Slots made and waiting.
    pub ready: usize,
    /// Of those, the slots prepared for the last run's shape.
    pub ready_prepared: usize,
    /// Runs that took a slot so far.
    pub taken: u64,
    /// Runs that found none fitting (or ready), and ran a fresh helper.
    pub missed: u64,
    /// Of the runs that took a slot, those that took one prepared for
    /// their shape (its own mounts, Landlock and seccomp made ahead).
    pub prepared: u64,
    /// Prepared slots given up at a request because something they made
    /// had changed on the host since (a source replaced, a mask detached).
    pub stale: u64,
    /// Runs that found no slot ready while one was being made and another
    /// run had just started: runs were coming faster than slots, and each
    /// paused the making of slots for a moment (the runs during the pause
    /// count as `missed` only: they go on in fresh helpers, which cost less
    /// CPU than a slot; the pool fills up again once they slow down).
    pub paused: u64,
    /// Why the pool is off, when it is.
    pub off: Option<String>,
}

#[derive(Default)]
struct State {
    key: Option<Key>,
    /// The workspace's network the slots join (for a spec that shares it).
    net: Option<Arc<Namespaces>>,
    slots: VecDeque<Slot>,
    making: usize,
    failures: u32,
    off: Option<String>,
    taken: u64,
    missed: u64,
    prepared: u64,
    stale: u64,
    paused: u64,
    closed: bool,
    /// The spec of the last run a slot fits: the shape slots are prepared for.
    shape: Option<Arc<SpawnSpec>>,
    /// Slots being made that will be prepared.
    preparing: usize,
    /// Until when runs come faster than slots are made ([`PRESSURE`]): no
    /// slot is started before then.
    pressure_until: Option<std::time::Instant>,
    /// A refill is queued for when the pressure ends.
    deferred: bool,
    /// The runs of the sandbox under way ([`Pool::enter`]): a token and
    /// when each started.
    runs: Vec<(u64, std::time::Instant)>,
    next_run: u64,
}

/// A pool of pre-made sandboxes (see the module's documentation).
pub struct Pool {
    size: usize,
    launcher: launch::Launcher,
    cgroup: Option<CgroupHost>,
    state: Mutex<State>,
    /// The queue of the pool's maker threads, once started.
    maker: Mutex<Option<std::sync::mpsc::Sender<Job>>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("size", &self.size).field("launcher", &self.launcher).finish_non_exhaustive()
    }
}

/// The part of `plan` a slot can make ahead: the system binds, `/tmp`,
/// `/proc`, `/dev`. `None` for what no slot runs (the landlock-only mode).
fn base_of(plan: &Plan) -> Option<Arc<SlotSpec>> {
    let spec = &plan.spec;
    if spec.mode != Mode::Full {
        return None;
    }
    let mounts = spec.mounts.iter().filter(|op| super::plan::made_ahead(op)).cloned().collect();
    Some(Arc::new(SlotSpec {
        version: SPEC_VERSION,
        identity: spec.identity,
        network: spec.network,
        netns: spec.netns,
        mounts,
        cgroup: spec.cgroup,
        test_switches: spec.test_switches,
    }))
}

impl Pool {
    /// A pool of `size` slots started by `launcher`, with leaves under `cgroup`.
    pub(super) fn new(size: usize, launcher: launch::Launcher, cgroup: Option<CgroupHost>) -> Pool {
        Pool { size, launcher, cgroup, state: Mutex::new(State::default()), maker: Mutex::new(None) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while the lock was held leaves plain counters and slots:
        // still consistent enough to hand out or drop.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pool's state.
    pub fn status(&self) -> PoolStatus {
        let mut st = self.lock();
        let ready: Vec<bool> = st
            .slots
            .iter_mut()
            .filter_map(|s| matches!(s.poll_ready(), Readiness::Ready).then_some(s.prepared.is_some()))
            .collect();
        PoolStatus {
            size: self.size,
            ready: ready.len(),
            ready_prepared: ready.iter().filter(|p| **p).count(),
            taken: st.taken,
            missed: st.missed,
            prepared: st.prepared,
            stale: st.stale,
            paused: st.paused,
            off: st.off.clone(),
        }
    }

    /// A ready slot for `plan`, if one fits (the pool now follows this
    /// plan's base). The caller calls [`Pool::refill_if_short`] once its run
    /// started and [`Pool::refill`] once it ended (or has the reaper call it
    /// after the teardown), so that making the next slot does not delay
    /// this one.
    pub(super) fn take(
        self: &Arc<Self>,
        plan: &Plan,
        stdin: &Stdin,
        net: Option<&Arc<Namespaces>>,
        me: &InFlight,
        mut mountinfo: Option<super::mounts::Snapshot>,
    ) -> Option<Slot> {
        let key = base_of(plan).map(|base| Key { base, cgroup: plan.containment.cgroup.clone() });
        let (slot, discard) = {
            let mut st = self.lock();
            if st.off.is_some() || st.closed || self.size == 0 {
                return None;
            }
            let Some(key) = key else {
                st.missed += 1;
                return None;
            };
            let mut discard = Vec::new();
            let moved = st.key.as_ref() != Some(&key) || !same_net(st.net.as_ref(), net);
            if moved {
                // A new base starts unpaused: its slots are all to make.
                st.pressure_until = None;
                discard.extend(st.slots.drain(..));
                st.key = Some(key.clone());
                st.net = net.cloned();
            }
            let fits = matches!(stdin, Stdin::Null) && key.base.admits(&plan.spec).is_ok();
            let mut slot = None;
            if fits {
                if preparable(&plan.spec) && !st.shape.as_ref().is_some_and(|s| s.same_shape(&plan.spec)) {
                    st.shape = Some(Arc::new(plan.spec.clone()));
                }
                // A slot prepared for this run's shape and still fresh
                // first, else a plain one. Slots prepared for another shape
                // are given up (runs have moved on; the refill prepares for
                // this one), as are stale ones.
                // The host's mount table now, read once if any slot is
                // ready to be judged against it; its unique ids looked up
                // only for a slot whose table is of another generation.
                let mut snap: Option<Option<super::mounts::Snapshot>> = None;
                let mut now: Option<Table> = None;
                let sources = bind_sources(&plan.spec);
                let mut chosen: Option<usize> = None;
                let mut building = st.making > 0;
                let mut i = 0;
                while i < st.slots.len() {
                    match st.slots[i].poll_ready() {
                        Readiness::Ready if same_net(st.slots[i].net.as_ref(), net) => {
                            // The caller read it after the plan, just before this take.
                            let snap =
                                snap.get_or_insert_with(|| mountinfo.take().or_else(|| super::mounts::now().ok()));
                            let changed = match (st.slots[i].table.as_deref(), snap.as_ref()) {
                                // No mount made, removed or changed since the slot's
                                // reading, and none moved (the same text).
                                (Some(then), Some(snap)) if then.same_as(snap) => false,
                                (Some(then), Some(snap)) => {
                                    let now = now.get_or_insert_with(|| {
                                        let want = |p: &[u8]| sources.iter().any(|s| related(p, s));
                                        Table::of(snap.clone(), want)
                                    });
                                    !then.unchanged_for(now, &sources)
                                }
                                _ => true,
                            };
                            let keep = match st.slots[i].prepared.as_deref_mut() {
                                _ if changed => {
                                    st.stale += 1;
                                    false
                                }
                                Some(r) if !r.shape.same_shape(&plan.spec) => {
                                    r.others += 1;
                                    r.others < MAX_OTHER_SHAPES
                                }
                                Some(r) if !r.still_fresh() => {
                                    st.stale += 1;
                                    false
                                }
                                Some(_) => {
                                    chosen = Some(i);
                                    true
                                }
                                None => {
                                    chosen = chosen.or(Some(i));
                                    true
                                }
                            };
                            if !keep {
                                discard.extend(st.slots.remove(i));
                                continue;
                            }
                        }
                        Readiness::Ready => {}
                        Readiness::Building => building = true,
                        Readiness::Failed(why) => {
                            st.failures += 1;
                            if st.failures >= MAX_FAILURES {
                                st.off = Some(why);
                            }
                            discard.extend(st.slots.remove(i));
                            continue;
                        }
                    }
                    i += 1;
                }
                slot = chosen.and_then(|c| st.slots.remove(c));
                // None ready for a run that could have taken one, while one
                // is being made and another run started lately: the runs
                // outpace the pool ([`PRESSURE`]).
                let now = std::time::Instant::now();
                let beside =
                    st.runs.iter().any(|(id, at)| *id != me.id && now.saturating_duration_since(*at) < PRESSURE);
                if slot.is_none() && !moved && building && beside {
                    st.pressure_until = Some(now + PRESSURE);
                    st.paused += 1;
                }
            }
            if slot.as_ref().is_some_and(|s| s.prepared.is_some()) {
                st.prepared += 1;
            }
            if slot.is_some() {
                // Failures count in a row: a slot handed out ends a run of them.
                st.failures = 0;
                st.taken += 1;
            } else {
                st.missed += 1;
            }
            (slot, discard)
        };
        drop(discard);
        slot
    }

    /// A run of the sandbox is under way until the value is dropped (the
    /// pool tells runs that outpace it from one caller's runs one after
    /// another by it: [`PRESSURE`]).
    pub(super) fn enter(self: &Arc<Self>) -> InFlight {
        let mut st = self.lock();
        let id = st.next_run;
        st.next_run += 1;
        st.runs.push((id, std::time::Instant::now()));
        InFlight { pool: Arc::clone(self), id }
    }

    /// Make slots for `plan`'s base now, before any run (a workspace
    /// primes its pool when it is built, so its first command finds one).
    pub(super) fn prime(self: &Arc<Self>, plan: &Plan, net: Option<&Arc<Namespaces>>) {
        let Some(base) = base_of(plan) else { return };
        {
            let mut st = self.lock();
            if st.key.is_some() {
                return;
            }
            st.key = Some(Key { base, cgroup: plan.containment.cgroup.clone() });
            st.net = net.cloned();
        }
        self.refill();
    }

    /// Right after a run took a slot: start making the next one now only if
    /// no other slot is ready for the run after it. While one is, the
    /// refill waits for [`Pool::refill`] at the end of the run, so that
    /// building a slot does not take the CPU from this run's own setup, on
    /// its critical path (the scheduler tends to put both on one core). A
    /// pool under pressure (back-to-back or concurrent runs) refills at
    /// once, unless runs outpace it ([`PRESSURE`]).
    pub(super) fn refill_if_short(self: &Arc<Self>) {
        let short = {
            let mut st = self.lock();
            !st.slots.iter_mut().any(|s| matches!(s.poll_ready(), Readiness::Ready))
        };
        if short {
            self.refill();
        }
    }

    /// Start making slots until `size` are made or being made; while runs
    /// outpace the pool ([`PRESSURE`]), none, and once that has passed.
    pub(super) fn refill(self: &Arc<Self>) {
        loop {
            let job = {
                let mut st = self.lock();
                if st.off.is_some() || st.closed || st.slots.len() + st.making >= self.size {
                    return;
                }
                if let Some(until) = st.pressure_until.filter(|t| *t > std::time::Instant::now()) {
                    if !st.deferred {
                        st.deferred = true;
                        drop(st);
                        if !self.hand_to_maker(Job::After(until)) {
                            self.lock().deferred = false;
                        }
                    }
                    return;
                }
                let Some(key) = st.key.clone() else { return };
                st.making += 1;
                // One slot fewer than the pool's size is prepared for the
                // last run's shape (none of a pool of one): one stays plain,
                // for a run of another shape.
                let prepared = st.slots.iter().filter(|s| s.prepared.is_some()).count() + st.preparing;
                let shape = match &st.shape {
                    Some(shape) if prepared + 1 < self.size => Some(Arc::clone(shape)),
                    _ => None,
                };
                st.preparing += usize::from(shape.is_some());
                Job::Make { key, net: st.net.clone(), shape }
            };
            if !self.hand_to_maker(job) {
                let mut st = self.lock();
                st.making -= 1;
                st.off = Some("no thread could be started to make pre-made sandboxes".into());
                return;
            }
        }
    }

    /// Queue `job` for the pool's maker threads, started with the first job:
    /// as many as the pool's size, up to the CPUs this process may use, for
    /// the pool's life (rather than a thread per slot: a thread's start and
    /// its stack's unmapping at its end cost CPU, and each unmap interrupts
    /// the other cores), so that back-to-back runs find slots made side by
    /// side. False when no thread could be started.
    fn hand_to_maker(self: &Arc<Self>, job: Job) -> bool {
        let mut maker = self.maker.lock().unwrap_or_else(|p| p.into_inner());
        let job = match maker.as_ref() {
            Some(tx) => match tx.send(job) {
                Ok(()) => return true,
                // The threads are gone (they cannot be, but new ones start).
                Err(std::sync::mpsc::SendError(job)) => job,
            },
            None => job,
        };
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        let mut started = 0;
        for _ in 0..self.size.min(cpus).max(1) {
            let (pool, rx) = (Arc::downgrade(self), Arc::clone(&rx));
            let spawned =
                std::thread::Builder::new().name("portcullis-pool".into()).spawn(move || make_slots(&pool, &rx));
            started += usize::from(spawned.is_ok());
        }
        if started == 0 || tx.send(job).is_err() {
            *maker = None;
            return false;
        }
        *maker = Some(tx);
        true
    }

    /// Drop every slot and make no more (`Workspace::dispose`).
    pub(super) fn close(&self) {
        let (slots, net) = {
            let mut st = self.lock();
            st.closed = true;
            (st.slots.drain(..).collect::<Vec<Slot>>(), st.net.take())
        };
        // The slots first (their helpers hold the workspace's network too),
        // then the pool's own hold on it.
        drop(slots);
        drop(net);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.close();
    }
}

/// A run under way ([`Pool::enter`]).
pub(super) struct InFlight {
    pool: Arc<Pool>,
    id: u64,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.pool.lock().runs.retain(|(id, _)| *id != self.id);
    }
}

enum Readiness {
    Ready,
    Building,
    Failed(String),
}

impl Slot {
    /// Whether the slot said its part is built (`k` on its socket), is still
    /// building, or died.
    fn poll_ready(&mut self) -> Readiness {
        if self.ready {
            return match self.child.exited() {
                true => Readiness::Failed("a pre-made sandbox's helper exited while it waited".into()),
                false => Readiness::Ready,
            };
        }
        match super::network::receive(&self.sock) {
            Ok((msg, fds)) if self.direct && msg == b"k" && fds.is_empty() => {
                self.ready = true;
                Readiness::Ready
            }
            Ok((msg, mut fds)) if !self.direct && msg.len() == 5 && msg.first() == Some(&b'k') && fds.len() <= 1 => {
                self.userns = fds.pop();
                self.pid1 = msg.get(1..5).and_then(|b| <[u8; 4]>::try_from(b).ok()).map(libc::pid_t::from_le_bytes);
                self.ready = true;
                Readiness::Ready
            }
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => Readiness::Building,
            _ => Readiness::Failed(self.failure()),
        }
    }

    /// What the helper reported when it failed.
    fn failure(&self) -> String {
        let mut rec = [0u8; portcullis_helper::report::RECORD_LEN];
        let _ = sys::set_nonblocking(&self.report_r);
        match nix::unistd::read(&self.report_r, &mut rec) {
            Ok(n) if n == rec.len() => match portcullis_helper::report::Record::decode(&rec) {
                Some(portcullis_helper::report::Record::Error {
                    step: Ok(Step::ReadSpec),
                    errno: libc::EINVAL,
                    ..
                }) => {
                    let e = SandboxError::HelperMismatch { source: io::Error::from_raw_os_error(libc::EINVAL) };
                    format!("a pre-made sandbox failed: {e}")
                }
                Some(portcullis_helper::report::Record::Error { step, errno, .. }) => {
                    let step = step.map(|s| s.describe()).unwrap_or("an unknown step");
                    format!("a pre-made sandbox failed while {step}: {}", io::Error::from_raw_os_error(errno))
                }
                _ => "a pre-made sandbox's helper exited while it was built".into(),
            },
            _ => "a pre-made sandbox's helper exited while it was built".into(),
        }
    }

    /// Hand the slot `plan`'s spec (and the observer's socket, and a root
    /// caller's idmapped trees): its command starts. The request goes
    /// straight to the slot's command process (`helper/src/slot.rs`).
    /// Returns what a fresh spawn returns.
    pub(super) fn launch(
        mut self,
        plan: &Plan,
        observing: &mut super::observe::Setup,
    ) -> Result<(run::Launched, run::Streams), SandboxError> {
        let io_err = |stage: &'static str| move |source: io::Error| SandboxError::Io { stage, source };
        // What is sent, made first; then the helper and its pipes are
        // registered with the runtime, and the request goes last. The
        // command's process, woken by it, is put on this CPU (a socket's
        // wake-up says the sender is about to sleep): work done here after
        // the send delayed the command by as much, while the other CPU
        // idled (a scheduler trace of `serve`: 80 µs).
        let outgoing = match self.prepared.take() {
            Some(readied) => {
                // Built whole for this run's shape: only the command, its
                // environment and its working directory go.
                let json = serde_json::to_vec(&plan.spec.request())
                    .map_err(|e| SandboxError::Io { stage: "encoding the request", source: io::Error::other(e) })?;
                Outgoing::Request(json, readied)
            }
            None => {
                let trees = self
                    .idmapped_trees(&plan.spec)
                    .map_err(|(step, errno, detail)| super::setup_error(plan, Ok(step), errno, detail))?;
                Outgoing::Spec(run::encode_spec(&for_slot(&plan.spec))?, trees)
            }
        };
        let Slot { sock, lifeline, report_r, child, pid1, .. } = self;
        let child = child.attach().map_err(io_err("waiting for a pre-made sandbox"))?;
        let (mut launched, streams) = run::launched(child, lifeline, report_r, pid1)?;
        match outgoing {
            Outgoing::Request(json, mut readied) => {
                send_request(&sock, &json)?;
                // The copy of the host's tree the slot sent back while it
                // was prepared: closed with the run's teardown.
                launched.held.extend(readied.host.take());
                drop(readied);
                drop(sock);
            }
            Outgoing::Spec(json, trees) => {
                send_spec(&sock, b'r', &json, trees, observing, "handing the spec to a pre-made sandbox")?;
                // A slot with no outer helper sends its copy of the host's
                // tree back on it: kept (queued, unread) until the run's
                // teardown.
                launched.held.push(sock);
            }
        }
        Ok((launched, streams))
    }

    /// The observer a prepared slot's run goes on with (started when the
    /// slot installed its filter); `None` for a plain slot.
    pub(super) fn take_observing(&mut self) -> Option<super::observe::Setup> {
        self.prepared.as_mut().and_then(|r| r.observing.take())
    }

    /// Wait until the slot is built (`k`), at most until `deadline`.
    fn await_built(&mut self, deadline: std::time::Instant, closed: &dyn Fn() -> bool) -> Result<(), SandboxError> {
        loop {
            match self.poll_ready() {
                Readiness::Ready => return Ok(()),
                Readiness::Failed(why) => return Err(SandboxError::invalid("pool", why)),
                Readiness::Building => await_readable(&self.sock, deadline, closed)
                    .map_err(|source| SandboxError::Io { stage: "waiting for a pre-made sandbox", source })?,
            }
        }
    }

    /// Build the slot whole for runs of `shape`'s shape (`p`, and its `d`):
    /// its own mounts, a root caller's idmapped trees, its observer, the
    /// command's confinement. Blocks the maker thread until done.
    fn prepare(&mut self, shape: &Arc<SpawnSpec>, json: &[u8], closed: &dyn Fn() -> bool) -> Result<(), SandboxError> {
        let io_err = |stage: &'static str| move |source: io::Error| SandboxError::Io { stage, source };
        let deadline = std::time::Instant::now() + BUILD_TIMEOUT;
        self.await_built(deadline, closed)?;
        let own = self.key.base.admits(shape).map_err(|m| SandboxError::invalid("pool", m.to_string()))?;
        let trees = self.idmapped_trees(shape).map_err(|(step, errno, _)| SandboxError::Io {
            stage: "preparing a pre-made sandbox",
            source: io::Error::other(format!("{}: {}", step.describe(), io::Error::from_raw_os_error(errno))),
        })?;
        let mut observing = super::observe::Setup::new(shape);
        send_spec(&self.sock, b'p', json, trees, &mut observing, "preparing a pre-made sandbox")?;
        // A slot with no outer helper sends its copy of the host's tree
        // (`h`) before it is done.
        let mut host = None;
        let (msg, mut fds) = loop {
            await_readable(&self.sock, deadline, closed)
                .map_err(io_err("waiting for a pre-made sandbox to be prepared"))?;
            let (msg, mut fds) = super::network::receive_up_to(&self.sock, 1 + 8 * MAX_PREPARED_MOUNTS)
                .map_err(io_err("waiting for a pre-made sandbox to be prepared"))?;
            match (msg.as_slice(), fds.len()) {
                (b"h", 1) if host.is_none() => host = fds.pop(),
                _ => break (msg, fds),
            }
        };
        let mounts: Vec<u64> = match msg.split_first() {
            Some((b'd', rest)) if rest.len() == 8 * own.len() && fds.len() == 1 => {
                rest.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())).collect()
            }
            _ => return Err(SandboxError::invalid("pool", self.failure())),
        };
        let root = fds.remove(0);
        self.prepared = Some(Box::new(Readied {
            shape: Arc::clone(shape),
            own,
            mounts,
            root,
            observing: Some(observing),
            others: 0,
            host,
        }));
        Ok(())
    }

    /// A root caller's idmapped trees of `spec`, made here through pid 1's
    /// user namespace as the helper makes them for a one-shot run: they go
    /// in one message with the spec's memfd ([`run::idmapped_trees`]).
    fn idmapped_trees(&self, spec: &SpawnSpec) -> Result<Vec<Option<OwnedFd>>, (Step, i32, u32)> {
        run::idmapped_trees(spec, self.userns.as_ref().map(AsFd::as_fd), 1)
    }

    /// The slot's cgroup leaf, for the run that took it (which kills and
    /// removes it as it does a fresh one).
    pub(super) fn take_cgroup(&mut self) -> Option<Cgroup> {
        self.cgroup.take()
    }
}

/// Work for the pool's maker threads.
enum Job {
    /// A slot to make.
    Make {
        key: Key,
        net: Option<Arc<Namespaces>>,
        /// The shape to prepare it for, if any.
        shape: Option<Arc<SpawnSpec>>,
    },
    /// Refill once the pressure has passed (this instant, or a later one if
    /// runs renewed it).
    After(std::time::Instant),
}

/// A maker thread's encodings of the last base and shape it sent: the
/// slots of one base (and those prepared for one shape) all get the same
/// JSON, so it is made once, not for every slot (about 30 µs of a maker
/// thread's CPU per slot). Known by the `Arc` they were made from: the
/// pool makes a new one whenever the base or the shape changes.
#[derive(Default)]
struct Encoded {
    base: Option<(Arc<SlotSpec>, Vec<u8>)>,
    shape: Option<(Arc<SpawnSpec>, Vec<u8>)>,
}

impl Encoded {
    fn base(&mut self, base: &Arc<SlotSpec>) -> Result<&[u8], SandboxError> {
        if !self.base.as_ref().is_some_and(|(b, _)| Arc::ptr_eq(b, base)) {
            let json = serde_json::to_vec(&**base)
                .map_err(|e| SandboxError::Io { stage: "encoding the slot's spec", source: io::Error::other(e) })?;
            self.base = Some((Arc::clone(base), json));
        }
        Ok(self.base.as_ref().map_or(&[][..], |(_, j)| j))
    }

    fn shape(&mut self, shape: &Arc<SpawnSpec>) -> Result<&[u8], SandboxError> {
        if !self.shape.as_ref().is_some_and(|(s, _)| Arc::ptr_eq(s, shape)) {
            let json = run::encode_spec(&for_slot(shape))?;
            self.shape = Some((Arc::clone(shape), json));
        }
        Ok(self.shape.as_ref().map_or(&[][..], |(_, j)| j))
    }
}

/// A maker thread of the pool: one slot per job it takes from the shared
/// queue, until the pool is dropped (its sender with it, so the queue ends)
/// or gone when a job comes.
fn make_slots(pool: &std::sync::Weak<Pool>, jobs: &Mutex<std::sync::mpsc::Receiver<Job>>) {
    let mut encoded = Encoded::default();
    let mut last_table: Option<Arc<Table>> = None;
    loop {
        // The lock is held while this thread waits; the others wait for it.
        let job = jobs.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let (key, net, shape) = match job {
            Ok(Job::Make { key, net, shape }) => (key, net, shape),
            Ok(Job::After(until)) => {
                // Asleep in steps, so that a pool closed meanwhile is not
                // held (nor refilled).
                loop {
                    let Some(pool) = pool.upgrade() else { return };
                    let (closed, until) = {
                        let st = pool.lock();
                        (st.closed, st.pressure_until.map_or(until, |t| t.max(until)))
                    };
                    let left = until.saturating_duration_since(std::time::Instant::now());
                    if closed || left.is_zero() {
                        pool.lock().deferred = false;
                        if !closed {
                            pool.refill();
                        }
                        break;
                    }
                    drop(pool);
                    std::thread::sleep(left.min(std::time::Duration::from_millis(10)));
                }
                continue;
            }
            Err(_) => return,
        };
        let Some(pool) = pool.upgrade() else { return };
        let preparing = usize::from(shape.is_some());
        {
            // A job queued for a base the pool has left since: not made.
            let mut st = pool.lock();
            if st.closed || st.key.as_ref() != Some(&key) {
                st.making -= 1;
                st.preparing -= preparing;
                continue;
            }
        }
        // Read before the slot copies the host's tree: a change in between
        // is in the copy and not here, so it gives the slot up needlessly,
        // never the other way. The last slot's table when no mount changed
        // or moved since (the same generation and text: the same mounts at
        // the same places, so the same ids).
        let table = match super::mounts::now() {
            Ok(snap) => match last_table.as_ref().filter(|t| t.same_as(&snap)) {
                Some(t) => Some(Arc::clone(t)),
                None => Some(Arc::new(Table::of(snap, |_| true))),
            },
            Err(_) => None,
        };
        last_table.clone_from(&table);
        let slot = encoded
            .base(&key.base)
            .and_then(|json| make_slot(&pool.launcher, &key, json, pool.cgroup.as_ref(), net, table))
            .and_then(|mut s| match &shape {
                Some(shape) => {
                    let json = encoded.shape(shape)?;
                    s.prepare(shape, json, &|| pool.lock().closed).map(|()| s)
                }
                None => Ok(s),
            });
        let mut st = pool.lock();
        st.making -= 1;
        st.preparing -= preparing;
        match slot {
            Ok(s) if !st.closed && st.key.as_ref() == Some(&s.key) && same_net(st.net.as_ref(), s.net.as_ref()) => {
                st.slots.push_back(s)
            }
            Ok(s) => {
                drop(st);
                drop(s);
            }
            Err(e) => {
                st.failures += 1;
                if st.failures >= MAX_FAILURES {
                    st.off = Some(format!("making a pre-made sandbox failed: {e}"));
                }
            }
        }
    }
}

/// The host paths `spec` binds (the slot's system binds and the run's own).
fn bind_sources(spec: &SpawnSpec) -> Vec<&[u8]> {
    spec.mounts
        .iter()
        .filter_map(|op| match op {
            MountOp::Bind { src, .. } => Some(src.as_slice()),
            _ => None,
        })
        .collect()
}

/// The host's mount table as the pool judges a slot by: each line of
/// `/proc/self/mountinfo` (whole: ids, options, propagation, source) with
/// its mount point and the unique id (`STATX_MNT_ID_UNIQUE`, Linux 6.8) of
/// the mount found at that point now, since the ids mountinfo shows are
/// handed out again (a bind unmounted and made again elsewhere shows the
/// same line).
#[derive(Debug)]
pub(super) struct Table {
    /// The reading's generation ([`super::mounts`]).
    gen: u64,
    /// The text read, which the lines index (one read, no string per line:
    /// the table is read on every run's path).
    text: Arc<str>,
    lines: Vec<Line>,
}

/// One line of a [`Table`]: where it lies in the text, its mount point
/// (unescaped, only when mountinfo escaped it; else the text's own bytes)
/// and the unique id of the mount found there.
#[derive(Debug)]
struct Line {
    span: std::ops::Range<usize>,
    point: PointOf,
    unique: Option<u64>,
}

#[derive(Debug)]
enum PointOf {
    Text(std::ops::Range<usize>),
    Unescaped(Vec<u8>),
}

impl Table {
    /// The table of `snap`, with the unique ids of the mount points `want`
    /// keeps. At the take `snap` is read at the take itself (or just before
    /// it by the run, which judges its aliases against the same text), not
    /// taken from the run's plan: the plan's walk of the writable areas can
    /// last long enough for the host to mount over a source in between (a
    /// review's reproduction: a read-only bind made during a 300 ms plan was
    /// missed when the plan's reading was used).
    fn of(snap: super::mounts::Snapshot, want: impl Fn(&[u8]) -> bool) -> Table {
        Table::parse(snap, |point| want(point).then(|| unique_mount_id(point)).flatten())
    }

    fn parse(snap: super::mounts::Snapshot, id: impl Fn(&[u8]) -> Option<u64>) -> Table {
        let super::mounts::Snapshot { gen, text } = snap;
        let mut lines = Vec::with_capacity(32);
        let mut start = 0;
        for l in text.split_inclusive('\n') {
            // As `str::lines` splits: without the `\n`, or a `\r\n`.
            let body = l.strip_suffix('\n').map_or(l, |b| b.strip_suffix('\r').unwrap_or(b));
            let span = start..start + body.len();
            start += l.len();
            // The fifth field, its offset within the line.
            let mut fields = l[..span.len()].split(' ');
            let before: usize = fields.by_ref().take(4).map(|f| f.len() + 1).sum();
            let raw = fields.next().unwrap_or_default();
            let at = span.start + before.min(span.len());
            let point = if raw.contains('\\') {
                PointOf::Unescaped(super::aliases::unescape_bytes(raw))
            } else {
                PointOf::Text(at..at + raw.len())
            };
            let mut line = Line { span, point, unique: None };
            line.unique = id(Table::point_in(&text, &line));
            lines.push(line);
        }
        Table { gen, text, lines }
    }

    /// Whether `snap` saw the same mounts at the same places as this
    /// table's reading (the same generation and text: see
    /// [`super::mounts`]): then the unique ids are the same too.
    fn same_as(&self, snap: &super::mounts::Snapshot) -> bool {
        self.gen == snap.gen && *self.text == *snap.text
    }

    fn point_in<'a>(text: &'a str, line: &'a Line) -> &'a [u8] {
        match &line.point {
            PointOf::Text(r) => text.as_bytes().get(r.clone()).unwrap_or_default(),
            PointOf::Unescaped(p) => p,
        }
    }

    /// Whether every line whose mount point is one of `sources`, lies
    /// beneath one, or holds one (any directory above it, `/` included) is
    /// in `now` unchanged, with the same mount at its point, and `now` has
    /// no other such line: the mounts a slot copied for those sources are
    /// still the host's. A line with no unique id on either side is judged
    /// by its text alone.
    fn unchanged_for(&self, now: &Table, sources: &[&[u8]]) -> bool {
        self.relevant(sources) == now.relevant(sources)
    }

    /// The lines `unchanged_for` compares, in order.
    fn relevant(&self, sources: &[&[u8]]) -> Vec<(&str, Option<u64>)> {
        let mut v: Vec<(&str, Option<u64>)> = self
            .lines
            .iter()
            .filter(|l| {
                let point = Table::point_in(&self.text, l);
                point.is_empty() || sources.iter().any(|s| related(point, s))
            })
            .map(|l| (self.text.get(l.span.clone()).unwrap_or_default(), l.unique))
            .collect();
        v.sort_unstable();
        v
    }
}

/// The unique id of the mount at `point` (`statx` `STATX_MNT_ID_UNIQUE`),
/// or `None` where the kernel has none (before 6.8) or the point cannot be
/// reached.
fn unique_mount_id(point: &[u8]) -> Option<u64> {
    let c = std::ffi::CString::new(point).ok()?;
    crate::sys::unique_mount_at(None, &c, libc::AT_SYMLINK_NOFOLLOW | libc::AT_NO_AUTOMOUNT).map(|(id, _)| id)
}

/// Whether this kernel gives mounts unique ids (`STATX_MNT_ID_UNIQUE`):
/// without them a slot is never prepared (a bind unmounted and made again
/// between preparation and request could not be told from the old one).
fn unique_ids() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| unique_mount_id(b"/").is_some())
}

/// Whether path `a` is `b`, lies beneath it, or holds it (byte paths, `/`
/// separated).
fn related(a: &[u8], b: &[u8]) -> bool {
    portcullis_helper::spec::beneath(a, b) || portcullis_helper::spec::beneath(b, a)
}

/// The spec a slot runs for `spec`: the same, but for `RLIMIT_NPROC`. The
/// plan counts, for an unprivileged caller's run with its own network, the
/// outer helper that joins the sandbox's user namespace to make that
/// network; a slot makes it in a short-lived child instead, so its outer
/// helper is not counted there, and the limit is one lower to allow the
/// command the same number of processes.
pub(super) fn for_slot(spec: &SpawnSpec) -> std::borrow::Cow<'_, SpawnSpec> {
    use portcullis_helper::spec::{Netns, Network, RlimitKind};
    let counted = spec.network == Network::None && spec.netns == Netns::Private && !nix::unistd::geteuid().is_root();
    if !counted || !spec.rlimits.iter().any(|r| r.resource == RlimitKind::Nproc) {
        return std::borrow::Cow::Borrowed(spec);
    }
    let mut slot = spec.clone();
    for r in slot.rlimits.iter_mut().filter(|r| r.resource == RlimitKind::Nproc) {
        r.value = r.value.saturating_sub(1);
    }
    std::borrow::Cow::Owned(slot)
}

/// Whether a run of `spec` may have slots prepared for its shape: one
/// whose grants were split into entries (Landlock rules on entries that
/// may come and go) is made at the request, as is one with more own
/// mounts than a message of the slot carries back.
fn preparable(spec: &SpawnSpec) -> bool {
    spec.landlock.writable_entries.is_empty() && spec.mounts.len() <= MAX_PREPARED_MOUNTS && unique_ids()
}

/// The most mounts a spec a slot is prepared for may have (the slot sends
/// 8 bytes per own mount back in one message).
const MAX_PREPARED_MOUNTS: usize = 256;

/// How long a maker waits for a slot to be built, or prepared.
const BUILD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Wait until `sock` is readable (or closed), at most until `deadline`,
/// and no longer than the pool is open (`closed`, asked every 10 ms: a
/// workspace disposed of does not wait for a slot it will not use).
fn await_readable(sock: &OwnedFd, deadline: std::time::Instant, closed: &dyn Fn() -> bool) -> io::Result<()> {
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || closed() {
            return Err(io::Error::from_raw_os_error(libc::ETIMEDOUT));
        }
        let ms = u16::try_from(left.as_millis().clamp(1, 10)).unwrap_or(10);
        let mut fds = [nix::poll::PollFd::new(sock.as_fd(), nix::poll::PollFlags::POLLIN)];
        match nix::poll::poll(&mut fds, ms) {
            Ok(0) | Err(nix::Error::EINTR) => continue,
            Ok(_) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}

fn send(sock: &OwnedFd, tag: u8, fds: &[RawFd]) -> io::Result<()> {
    send_with(sock, tag, &[], fds)
}

/// A prepared slot's request (`json`): inside the message (`X`) up to
/// [`portcullis_helper::spec::INLINE_REQUEST_MAX`] bytes, else in a memfd
/// (`x`). A socket buffer the message does not fit (`EMSGSIZE`: the host's
/// `net.core.wmem_default` set below the limit) sends nothing, and the
/// memfd goes instead.
fn send_request(sock: &OwnedFd, json: &[u8]) -> Result<(), SandboxError> {
    let stage = "handing the request to a pre-made sandbox";
    let io_err = |stage: &'static str| move |source: io::Error| SandboxError::Io { stage, source };
    if json.len() <= portcullis_helper::spec::INLINE_REQUEST_MAX {
        match send_with(sock, b'X', json, &[]) {
            Ok(()) => return Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMSGSIZE | libc::ENOBUFS)) => {}
            Err(e) => return Err(io_err(stage)(e)),
        }
    }
    let memfd = sys::memfd_with(c"portcullis-request", json).map_err(io_err("writing the request"))?;
    send(sock, b'x', &[memfd.as_raw_fd()]).map_err(io_err(stage))
}

/// What a run sends a slot's command process: the request alone (to a
/// slot prepared for its shape, kept until it is sent), or the whole spec
/// with a root caller's idmapped trees.
enum Outgoing {
    Request(Vec<u8>, Box<Readied>),
    Spec(Vec<u8>, Vec<Option<OwnedFd>>),
}

/// Send a spec to a slot's command process, encoded as a slot runs it
/// ([`for_slot`]), with `tag` (`r` to run it, `p` to prepare for it), a
/// root caller's idmapped `trees`, and before it the observer's socket
/// (`o`). Without a socket (the library's observer could not start) the
/// command installs no observer, as in a one-shot run without fd 7 (the
/// helper checks the spec asks for one).
fn send_spec(
    sock: &OwnedFd,
    tag: u8,
    json: &[u8],
    trees: Vec<Option<OwnedFd>>,
    observing: &mut super::observe::Setup,
    stage: &'static str,
) -> Result<(), SandboxError> {
    let io_err = |stage: &'static str| move |source: io::Error| SandboxError::Io { stage, source };
    let memfd = sys::memfd_with(c"portcullis-spec", json).map_err(io_err("writing the spec"))?;
    if let Some(o) = observing.helper_end() {
        send(sock, b'o', &[o]).map_err(io_err(stage))?;
    }
    let mut fds: Vec<RawFd> = vec![memfd.as_raw_fd()];
    fds.extend(trees.iter().flatten().map(|t| t.as_raw_fd()));
    send(sock, tag, &fds).map_err(io_err(stage))?;
    drop((memfd, trees));
    observing.spawned()
}

/// [`send`], with `payload` after the tag in the same message.
fn send_with(sock: &OwnedFd, tag: u8, payload: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let buf = [tag];
    let iov = [IoSlice::new(&buf), IoSlice::new(payload)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
    sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None).map_err(io::Error::from)?;
    Ok(())
}

/// Start one slot for `key`: its cgroup leaf, its pipes and socket, the
/// helper with `--slot`, and the slot's spec sent ahead.
fn make_slot(
    launcher: &launch::Launcher,
    key: &Key,
    json: &[u8],
    host: Option<&CgroupHost>,
    net: Option<Arc<Namespaces>>,
    table: Option<Arc<Table>>,
) -> Result<Slot, SandboxError> {
    let io_err = |stage: &'static str| move |source: io::Error| SandboxError::Io { stage, source };
    let cgroup = match (&key.cgroup, host) {
        (Some(want), Some(host)) => Some(host.create(want).map_err(|e| SandboxError::Cgroup {
            stage: e.stage,
            path: e.path,
            source: e.source,
        })?),
        (Some(want), None) => {
            return Err(SandboxError::Cgroup {
                stage: "create the per-command cgroup under",
                path: want.parent.clone(),
                source: io::Error::from_raw_os_error(libc::ENOENT),
            })
        }
        (None, _) => None,
    };
    let (sock, theirs) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)
        .map_err(|e| SandboxError::Io { stage: "making a pre-made sandbox's socket", source: e.into() })?;
    let theirs = {
        let t = sys::dup_above(&theirs, 10).map_err(io_err("making a pre-made sandbox's socket"))?;
        drop(theirs);
        t
    };
    let (report_r, report_w) = run::pipe_above("creating the report pipe", true)?;
    let (life_r, lifeline) = run::pipe_above("creating the lifeline", false)?;
    let memfd = sys::memfd_with(c"portcullis-slot", json).map_err(io_err("writing the slot's spec"))?;
    send(&sock, b's', &[memfd.as_raw_fd()]).map_err(io_err("sending the slot's spec"))?;
    drop(memfd);
    let cg_fd = match &cgroup {
        Some(c) => Some(sys::dup_above(&c.dir, 10).map_err(io_err("passing the cgroup"))?),
        None => None,
    };
    let mut pass = vec![
        (theirs.as_raw_fd(), portcullis_helper::SPEC_FD),
        (report_w.as_raw_fd(), portcullis_helper::REPORT_FD),
        (life_r.as_raw_fd(), portcullis_helper::LIFELINE_FD),
    ];
    if let Some(c) = &cg_fd {
        pass.push((c.as_raw_fd(), portcullis_helper::CGROUP_FD));
    }
    // The workspace's network, which the slot joins before its clone.
    let net_fds = match (&key.base.netns, net.as_deref()) {
        (portcullis_helper::spec::Netns::Private, _) => Vec::new(),
        (_, Some(n)) => n.pass().map_err(io_err("passing the workspace's network"))?,
        (_, None) => {
            return Err(SandboxError::invalid("pool", "a slot that joins the workspace's network, without it"))
        }
    };
    let net_pass: Vec<(RawFd, RawFd)> = net_fds.iter().map(|(fd, target)| (fd.as_raw_fd(), *target)).collect();
    // Cloned by the zygote, with no outer helper: its pid 1 is this
    // process's child (`launch::Launcher::clone_slot`). The network's
    // descriptors go to the zygote that joins it, not to the slot.
    let joined = match (&key.base.netns, net.as_deref()) {
        (portcullis_helper::spec::Netns::Private, _) => Some(None),
        (_, Some(n)) => Some(Some((n.zygote(), &net_pass[..]))),
        (_, None) => None,
    };
    let cloned = joined.and_then(|joined| {
        launcher.clone_slot(&key.base.identity, cg_fd.as_ref().map(AsRawFd::as_raw_fd), &pass[..3], joined)
    });
    let (child, pid1, userns, direct) = match cloned {
        Some(c) => (c.spawned, Some(c.pid1), c.userns, true),
        None => {
            pass.extend_from_slice(&net_pass);
            let child = launcher
                .spawn_detached(&["--slot"], &pass, None)
                .map_err(|source| SandboxError::Spawn { helper: launcher.helper().to_path_buf(), source })?;
            (child, None, None, false)
        }
    };
    drop((theirs, report_w, life_r, cg_fd, net_fds));
    Ok(Slot {
        sock,
        lifeline,
        report_r,
        child,
        cgroup,
        key: key.clone(),
        net,
        ready: false,
        userns,
        pid1,
        direct,
        prepared: None,
        table,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "22 27 0:21 / /proc rw,relatime - proc proc rw\n\
        27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
        30 27 0:30 / /var/tmp/other rw - tmpfs none rw\n";

    /// A request the socket's buffer cannot hold in one message goes in a
    /// memfd; one it can, inside the message.
    #[test]
    fn a_request_too_big_for_the_socket_buffer_goes_in_a_memfd() {
        use nix::sys::socket::{setsockopt, sockopt::SndBuf};
        let (a, b) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)
            .unwrap_or_else(|e| panic!("{e}"));
        setsockopt(&a, SndBuf, &4096).unwrap_or_else(|e| panic!("{e}"));
        for (len, tag) in [(1000, b'X'), (20_000, b'x')] {
            let json = vec![b'7'; len];
            send_request(&a, &json).unwrap_or_else(|e| panic!("{len}: {e}"));
            let (msg, fds) = super::super::network::receive_up_to(&b, 2048).unwrap_or_else(|e| panic!("{len}: {e}"));
            assert_eq!(msg.first(), Some(&tag), "{len}");
            match tag {
                b'X' => assert_eq!((msg.len() - 1, fds.len()), (len, 0)),
                _ => {
                    assert_eq!((msg.len(), fds.len()), (1, 1));
                    let mut got = Vec::new();
                    let mut f = std::fs::File::from(fds.into_iter().next().unwrap_or_else(|| panic!("no fd")));
                    io::Read::read_to_end(&mut f, &mut got).unwrap_or_else(|e| panic!("{e}"));
                    assert_eq!(got, json);
                }
            }
        }
    }

    fn snap(text: &str) -> super::super::mounts::Snapshot {
        super::super::mounts::Snapshot { gen: 0, text: Arc::from(text) }
    }

    fn table(text: &str) -> Table {
        Table::parse(snap(text), |_| None)
    }

    #[test]
    fn a_change_counts_only_at_above_or_beneath_a_source() {
        let ws: &[&[u8]] = &[b"/var/tmp/ws", b"/usr"];
        let then = table(TABLE);
        // Unrelated: a mount elsewhere comes and goes.
        let more = format!("{TABLE}31 27 0:31 / /var/tmp/wsx rw - tmpfs none rw\n");
        assert!(then.unchanged_for(&table(&more), ws));
        let fewer =
            "22 27 0:21 / /proc rw,relatime - proc proc rw\n27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n";
        assert!(then.unchanged_for(&table(fewer), ws));
        // Beneath a source, at one, above one (and `/` itself), each counts.
        for line in [
            "31 27 0:31 / /var/tmp/ws/sub ro - tmpfs none rw\n",
            "31 27 0:31 / /var/tmp/ws rw - tmpfs none rw\n",
            "31 27 0:31 / /var/tmp rw - tmpfs none rw\n",
            "31 27 0:31 / /usr/lib rw - tmpfs none rw\n",
        ] {
            assert!(!then.unchanged_for(&table(&format!("{TABLE}{line}")), ws), "{line}");
        }
        let remounted = TABLE.replace("/ / rw,relatime", "/ / ro,relatime");
        assert!(!then.unchanged_for(&table(&remounted), ws));
        // Escaped mount points are compared as the paths they are.
        let escaped = format!("{TABLE}31 27 0:31 / /var/tmp/ws/a\\040b rw - tmpfs none rw\n");
        assert!(!then.unchanged_for(&table(&escaped), ws));
        assert!(related(b"/var/tmp/ws/a b", b"/var/tmp/ws"));
        assert!(!related(b"/var/tmp/wsx", b"/var/tmp/ws"));
    }

    #[test]
    fn lines_and_points_are_those_str_lines_and_the_fifth_field_give() {
        let text = "1 2 3 4 /a\\040b rest\n1 2 3\n\n1 2 3 4 /c\r\n9 9 9 9 /d\u{e9} x y";
        let t = Table::parse(snap(text), |_| None);
        let old: Vec<(String, Vec<u8>)> = text
            .lines()
            .map(|l| {
                (l.to_string(), l.split(' ').nth(4).map(super::super::aliases::unescape_bytes).unwrap_or_default())
            })
            .collect();
        let new: Vec<(String, Vec<u8>)> = t
            .lines
            .iter()
            .map(|l| (t.text[l.span.clone()].to_string(), Table::point_in(&t.text, l).to_vec()))
            .collect();
        assert_eq!(new, old);
    }

    #[test]
    fn the_same_line_of_another_mount_counts() {
        // A bind unmounted and made again shows the same line (its id is
        // handed out again); the unique id of the mount at its point tells.
        let ws: &[&[u8]] = &[b"/var/tmp/ws"];
        let text = format!("{TABLE}31 27 0:31 / /var/tmp/ws/sub rw - tmpfs none rw\n");
        let then = Table::parse(snap(&text), |p| Some(if p == b"/var/tmp/ws/sub" { 100 } else { 1 }));
        let same = Table::parse(snap(&text), |p| Some(if p == b"/var/tmp/ws/sub" { 100 } else { 1 }));
        let again = Table::parse(snap(&text), |p| Some(if p == b"/var/tmp/ws/sub" { 101 } else { 1 }));
        assert!(then.unchanged_for(&same, ws));
        assert!(!then.unchanged_for(&again, ws));
        // Elsewhere, another mount does not count.
        let other = Table::parse(snap(&text), |p| {
            Some(if p == b"/var/tmp/other" {
                7
            } else if p == b"/var/tmp/ws/sub" {
                100
            } else {
                1
            })
        });
        assert!(then.unchanged_for(&other, ws));
    }
}
