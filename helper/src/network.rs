//! `portcullis-helper --make-network`: the network namespace one workspace's
//! commands share (`crate::spec::Netns::Shared`).
//!
//! The library starts the helper with this single argument and one end of a
//! `SOCK_SEQPACKET` pair on [`SOCK_FD`]. The helper, single-threaded:
//!
//! * for an unprivileged caller, `unshare(CLONE_NEWUSER)` makes the
//!   workspace's user namespace W, mapping the caller's uid and gid to
//!   themselves (one id each, `setgroups` denied), as the sandboxes' own
//!   namespaces do; a root caller makes none (its namespace is owned by the
//!   initial one, so the outer helper can join it and stay host root);
//! * `unshare(CLONE_NEWNET)` makes the network namespace N, owned by W (or
//!   the initial user namespace), and brings `lo` up;
//! * sends one message, [`OK`] with the fds of W (when made) and N, or
//!   [`FAILED`], the [`MakeStep`] and the errno; and exits.
//!
//! The library holds the two fds: nothing else keeps the namespaces alive
//! (no process stays in them between runs), so they go when the workspace
//! closes them or its process dies.

/// The argument that selects this mode.
pub const MAKE_NETWORK_ARG: &str = "--make-network";
/// The fd of the socket the result is sent on.
pub const SOCK_FD: i32 = 3;
/// First byte of a successful answer (its fds: W, when made, then N).
pub const OK: u8 = b'n';
/// First byte of a failure: then the step (one byte) and the errno (four
/// bytes, little-endian).
pub const FAILED: u8 = b'e';

/// What `--make-network` does, in order; a failure names one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum MakeStep {
    /// Close every inherited fd but the socket.
    Sanitize = 1,
    /// `unshare(CLONE_NEWUSER)` (unprivileged callers).
    UserNamespace = 2,
    /// Write `uid_map` (the caller's uid to itself).
    MapUid = 3,
    /// Write `deny` to `setgroups`.
    DenySetgroups = 4,
    /// Write `gid_map` (the caller's gid to itself).
    MapGid = 5,
    /// `unshare(CLONE_NEWNET)`.
    NetNamespace = 6,
    /// Bring `lo` up.
    LoopbackUp = 7,
    /// Open the namespaces (`/proc/thread-self/ns/…`).
    OpenNamespaces = 8,
    /// Send them to the library.
    Send = 9,
}

impl MakeStep {
    const ALL: &'static [MakeStep] = &[
        MakeStep::Sanitize,
        MakeStep::UserNamespace,
        MakeStep::MapUid,
        MakeStep::DenySetgroups,
        MakeStep::MapGid,
        MakeStep::NetNamespace,
        MakeStep::LoopbackUp,
        MakeStep::OpenNamespaces,
        MakeStep::Send,
    ];

    /// The step with this number.
    pub fn from_u8(n: u8) -> Option<MakeStep> {
        MakeStep::ALL.iter().copied().find(|s| *s as u8 == n)
    }

    /// What the step does, for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            MakeStep::Sanitize => "sanitizing inherited file descriptors",
            MakeStep::UserNamespace => "making the workspace's user namespace (unshare CLONE_NEWUSER)",
            MakeStep::MapUid => "writing the workspace's uid_map",
            MakeStep::DenySetgroups => "denying setgroups in the workspace's user namespace",
            MakeStep::MapGid => "writing the workspace's gid_map",
            MakeStep::NetNamespace => "making the workspace's network namespace (unshare CLONE_NEWNET)",
            MakeStep::LoopbackUp => "bringing loopback up in the workspace's network namespace",
            MakeStep::OpenNamespaces => "opening the workspace's namespaces",
            MakeStep::Send => "handing the workspace's namespaces to the library",
        }
    }
}

/// The failure message: [`FAILED`], the step, the errno.
pub fn encode_failure(step: MakeStep, errno: i32) -> [u8; 6] {
    let e = errno.to_le_bytes();
    [FAILED, step as u8, e[0], e[1], e[2], e[3]]
}

/// The step and errno of a failure message.
pub fn decode_failure(msg: &[u8]) -> Option<(Option<MakeStep>, i32)> {
    match msg {
        [FAILED, step, a, b, c, d] => Some((MakeStep::from_u8(*step), i32::from_le_bytes([*a, *b, *c, *d]))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_round_trip() {
        for s in MakeStep::ALL {
            assert_eq!(decode_failure(&encode_failure(*s, libc::EPERM)), Some((Some(*s), libc::EPERM)));
        }
        assert_eq!(decode_failure(b"n"), None);
    }
}
