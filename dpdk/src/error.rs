//! Errors of the safe API. A failing DPDK call becomes [`Error::Dpdk`], which names the
//! call and carries DPDK's own text for the error code (`rte_strerror`), so a log line
//! reads `rte_eth_dev_configure(port 0): Invalid argument (errno 22)`.

use std::ffi::CStr;

use crate::ffi;

/// What went wrong in a call of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A DPDK function failed.
    #[error("{call}: {text} (errno {errno})")]
    Dpdk {
        /// The DPDK function and the object it was called for, e.g. `rte_eth_dev_start(port 1)`.
        call: String,
        /// The positive error number (`rte_errno` or the negated return value).
        errno: i32,
        /// `rte_strerror(errno)`.
        text: String,
    },
    /// `rte_eal_init` already ran in this process (successfully or not); DPDK's EAL is
    /// initialised once per process.
    #[error(
        "DPDK's EAL was already initialised in this process: keep the first `Eal` (it is Clone), \
         or run each EAL user in its own process (cargo nextest runs each test in its own process)"
    )]
    EalAlreadyInitialised,
    /// An argument was rejected before calling DPDK.
    #[error("{0}")]
    InvalidArgument(String),
    /// No ethdev port by that name or id.
    #[error("no DPDK port {0} (is the device probed? for a virtual device pass `--vdev NAME` to EAL)")]
    NoSuchPort(String),
    /// The object is in use: a port already owned by another `Port`, a queue already
    /// handed out, or a reconfiguration while queue handles are alive.
    #[error("{0}")]
    Busy(String),
}

/// Results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// DPDK's text for error number `errno` (`rte_strerror`).
pub fn strerror(errno: i32) -> String {
    // SAFETY: rte_strerror accepts any value and returns a pointer to a NUL-terminated
    // string, either static or in a thread-local buffer of the calling thread; it is
    // copied before anything else can run on this thread.
    let text = unsafe { CStr::from_ptr(ffi::rte_strerror(errno)) };
    text.to_string_lossy().into_owned()
}

/// The calling thread's `rte_errno`.
pub fn rte_errno() -> i32 {
    // SAFETY: the shim reads a thread-local int of librte_eal; no preconditions.
    unsafe { ffi::torii_rte_errno() }
}

/// [`Error::Dpdk`] for `errno` (positive or negative: the sign is dropped).
pub(crate) fn dpdk(call: impl Into<String>, errno: i32) -> Error {
    let errno = errno.checked_abs().unwrap_or(i32::MAX);
    Error::Dpdk { call: call.into(), errno, text: strerror(errno) }
}

/// [`Error::Dpdk`] from the calling thread's `rte_errno` (for calls that return NULL).
pub(crate) fn last(call: impl Into<String>) -> Error {
    dpdk(call, rte_errno())
}

/// Turns DPDK's "negative errno on failure" convention into a `Result`.
pub(crate) fn check(ret: i32, call: impl FnOnce() -> String) -> Result<i32> {
    if ret < 0 {
        Err(dpdk(call(), ret))
    } else {
        Ok(ret)
    }
}
