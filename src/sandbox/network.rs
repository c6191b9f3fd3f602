//! The network one workspace's commands share (issue 12).
//!
//! With `network = "none"` in the full mode, a [`Sandbox`](super::Sandbox)
//! made [`with_shared_network`](super::Sandbox::with_shared_network) (a
//! `Workspace`'s, and so `portcullis serve`'s) runs every command in one
//! network namespace with only loopback up, made on the first run that needs
//! it by `portcullis-helper --make-network`
//! (`portcullis_helper::network`). This module holds its descriptors: an
//! unprivileged caller's gets a user namespace W that owns the network N
//! (mapping the caller's ids to themselves, as the sandboxes' own do); a root
//! caller's N is owned by the initial user namespace. No process stays in
//! them between runs: the descriptors held here, and those of the runs going
//! on, are all that keep them alive, so they go when the workspace is
//! disposed or dropped, or its process dies.
//!
//! A run's spec says [`Netns::Shared`]; [`Namespaces::pass`] gives the
//! helper the fds on `USERNS_FD` and `NETNS_FD`, and the outer helper joins
//! them before its clone; or, for a run the zygote clones, the network's
//! own zygote ([`Namespaces::zygote`]) joined them at its start and its
//! pid 1s are born in them. This is the one place that decides which network
//! a run joins; a later egress mode (a namespace with a filtering proxy) is
//! another kind of [`Namespaces`].

use std::io::{self, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

use nix::sys::socket::{recvmsg, socketpair, AddressFamily, ControlMessageOwned, MsgFlags, SockFlag, SockType};
use portcullis_helper::network::{decode_failure, MakeStep, MAKE_NETWORK_ARG, OK, SOCK_FD};
use portcullis_helper::spec::{Mode, Netns, Network, SpawnSpec};

use super::{blocked, launch, SandboxError};
use crate::sys;

/// The namespaces a workspace's runs join.
#[derive(Debug)]
pub(super) struct Namespaces {
    /// W, for an unprivileged caller.
    userns: Option<OwnedFd>,
    /// N.
    netns: OwnedFd,
    /// Its zygote, once started: it is in N (and W), and goes with them.
    zygote: launch::NetZygote,
}

impl Namespaces {
    /// Copies of the fds above 10 (so the helper's dup2 onto 8 and 9
    /// clobbers none), with their target numbers.
    pub(super) fn pass(&self) -> io::Result<Vec<(OwnedFd, RawFd)>> {
        let mut out = vec![(sys::dup_above(&self.netns, 10)?, portcullis_helper::NETNS_FD)];
        if let Some(u) = &self.userns {
            out.push((sys::dup_above(u, 10)?, portcullis_helper::USERNS_FD));
        }
        Ok(out)
    }

    /// The zygote that joins this network and clones the slots that run
    /// in it (`launch::Launcher::clone_slot`), started with the first.
    pub(super) fn zygote(&self) -> &launch::NetZygote {
        &self.zygote
    }

    /// The [`Netns`] a spec names for these.
    pub(super) fn spec(uid: u32) -> Netns {
        Netns::Shared { userns: uid != 0 }
    }
}

/// Decide the network namespace of a run: with `shared` (the sandbox has a
/// shared network), a `network = "none"` run of the full mode joins it.
pub(super) fn choose(spec: &mut SpawnSpec, shared: bool, uid: u32) {
    spec.netns = if joins(shared, spec.network, spec.mode) { Namespaces::spec(uid) } else { Netns::Private };
}

/// Whether a run with `network` in `mode` joins the shared network (when
/// the sandbox has one: `shared`).
pub(super) fn joins(shared: bool, network: Network, mode: Mode) -> bool {
    shared && network == Network::None && mode == Mode::Full
}

enum State {
    Unmade,
    Made(Arc<Namespaces>),
    Released,
}

/// A workspace's network: made on first use, released by
/// [`SharedNetwork::release`] (or with the sandbox).
pub(super) struct SharedNetwork {
    state: Mutex<State>,
    /// Held while one run makes the namespaces, so two first runs make one.
    making: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for SharedNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedNetwork")
    }
}

impl SharedNetwork {
    pub(super) fn new() -> SharedNetwork {
        SharedNetwork { state: Mutex::new(State::Unmade), making: tokio::sync::Mutex::new(()) }
    }

    fn current(&self) -> Result<Option<Arc<Namespaces>>, SandboxError> {
        match &*self.state.lock().unwrap_or_else(|p| p.into_inner()) {
            State::Unmade => Ok(None),
            State::Made(n) => Ok(Some(Arc::clone(n))),
            State::Released => Err(SandboxError::NetworkReleased),
        }
    }

    /// The namespaces, made now by a helper of `launcher` when this is the first run.
    pub(super) async fn get(&self, launcher: &launch::Launcher, uid: u32) -> Result<Arc<Namespaces>, SandboxError> {
        if let Some(n) = self.current()? {
            return Ok(n);
        }
        let _making = self.making.lock().await;
        if let Some(n) = self.current()? {
            return Ok(n);
        }
        let made = Arc::new(make(launcher, uid).await?);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match &*state {
            State::Released => Err(SandboxError::NetworkReleased),
            _ => {
                *state = State::Made(Arc::clone(&made));
                Ok(made)
            }
        }
    }

    /// Close the descriptors: once the runs going on end, the namespaces are
    /// gone. Later runs fail with [`SandboxError::NetworkReleased`].
    pub(super) fn release(&self) {
        let old = std::mem::replace(&mut *self.state.lock().unwrap_or_else(|p| p.into_inner()), State::Released);
        drop(old);
    }
}

fn failed(stage: &'static str) -> impl Fn(io::Error) -> SandboxError {
    move |source| SandboxError::Network { stage, source }
}

/// Start `portcullis-helper --make-network` and take the namespaces it sends.
async fn make(launcher: &launch::Launcher, uid: u32) -> Result<Namespaces, SandboxError> {
    let helper = launcher.helper();
    let (ours, theirs) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)
        .map_err(|e| failed("making the socket pair for the helper")(e.into()))?;
    let theirs_high = sys::dup_above(&theirs, 10).map_err(failed("making the socket pair for the helper"))?;
    drop(theirs);
    let mut child = launcher
        .spawn(&[MAKE_NETWORK_ARG], &[(theirs_high.as_raw_fd(), SOCK_FD)], None)
        .map_err(|source| SandboxError::Spawn { helper: helper.to_path_buf(), source })?;
    drop(theirs_high);
    let exit = child.wait().await.map_err(failed("waiting for the helper"))?;
    // The helper has exited: its message is queued, or there is none (EOF).
    let (msg, fds) = receive(&ours).map_err(failed("receiving the namespaces from the helper"))?;
    if msg.first() == Some(&OK) {
        let want = if uid == 0 { 1 } else { 2 };
        if fds.len() != want {
            return Err(failed("receiving the namespaces from the helper")(io::Error::other(format!(
                "the helper sent {} descriptors, {want} were expected (a helper of another version?)",
                fds.len()
            ))));
        }
        let mut fds = fds.into_iter();
        let userns = if uid == 0 { None } else { fds.next() };
        let netns = fds.next().ok_or_else(|| failed("receiving the namespaces")(io::Error::other("none sent")))?;
        return Ok(Namespaces { userns, netns, zygote: launch::NetZygote::default() });
    }
    match decode_failure(&msg) {
        Some((step, errno)) => {
            if let Some(b) = blocked::diagnose_network(step, errno) {
                return Err(SandboxError::NamespacesBlocked(b));
            }
            Err(SandboxError::Network {
                stage: step.map_or("in a step this library does not know", MakeStep::describe),
                source: io::Error::from_raw_os_error(errno),
            })
        }
        None => Err(failed("making the workspace's network")(io::Error::other(format!(
            "the helper sent no answer ({exit})"
        )))),
    }
}

/// One message and its fds (close-on-exec); an empty message at EOF.
pub(super) fn receive(sock: &OwnedFd) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    receive_up_to(sock, 16)
}

/// One message of at most `max` bytes and 4 descriptors, without waiting;
/// `EMSGSIZE` for a longer one (or one with more descriptors).
pub(super) fn receive_up_to(sock: &OwnedFd, max: usize) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut buf = vec![0u8; max];
    let mut iov = [IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([RawFd; 4]);
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT,
    )
    .map_err(io::Error::from)?;
    let mut fds = Vec::new();
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            for fd in raw {
                // SAFETY: SCM_RIGHTS just installed this fd in our table.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    if msg.flags.intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC) {
        return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
    }
    let n = msg.bytes;
    buf.truncate(n);
    Ok((buf, fds))
}
