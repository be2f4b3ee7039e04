//! DPDK's Environment Abstraction Layer: [`Eal::builder`]`().args([...]).init()` runs
//! `rte_eal_init` and returns an [`Eal`] handle; `rte_eal_cleanup` runs when the last
//! handle (and every object holding one: mempools, ports, thash contexts) is gone.
//!
//! Contract:
//! - `rte_eal_init` runs at most once per process; a second [`EalBuilder::init`] returns
//!   [`Error::EalAlreadyInitialised`], even after the first `Eal` was dropped or failed
//!   (DPDK cannot be initialised again after `rte_eal_cleanup`).
//! - The thread calling `init` becomes the main lcore and is pinned to its CPU (`-l`,
//!   `--lcores`, `--main-lcore` choose which); threads it spawns afterwards inherit that
//!   affinity. Other threads have no lcore id, and so no mempool cache, until they call
//!   [`Eal::register_thread`].
//! - Arguments are EAL's command line without the program name (this crate supplies
//!   `argv[0]`). Useful ones: `-l 0` or `--lcores`, `--no-huge -m 256 --no-shconf`
//!   (no hugepages; `--in-memory` conflicts with `--no-huge`), `--file-prefix NAME`
//!   (unique per process when several run), `--vdev net_null0`, `--no-pci`,
//!   `--log-level=*:warning`, `--no-telemetry`.

use std::ffi::{c_char, c_int, CStr, CString};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{self, Error, Result};
use crate::ffi;

/// Set by the first [`EalBuilder::init`] of the process, never cleared.
static INITIALISED: AtomicBool = AtomicBool::new(false);

/// The program name passed to EAL as `argv[0]`.
const PROGRAM: &str = "torii";

/// EAL command-line arguments, collected before [`init`](EalBuilder::init).
#[derive(Debug, Clone, Default)]
pub struct EalBuilder {
    args: Vec<String>,
}

impl EalBuilder {
    /// Appends one argument (e.g. `"--no-huge"`, `"-m"`, `"256"`).
    #[must_use]
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends several arguments.
    #[must_use]
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Runs `rte_eal_init` with the collected arguments.
    ///
    /// # Errors
    /// [`Error::EalAlreadyInitialised`] on any call after the first in this process;
    /// [`Error::InvalidArgument`] for an argument containing NUL; [`Error::Dpdk`] when
    /// EAL refuses (bad arguments, no memory, no usable lcore; EAL logs the details).
    pub fn init(self) -> Result<Eal> {
        let mut owned = Vec::with_capacity(self.args.len() + 1);
        for a in std::iter::once(PROGRAM).chain(self.args.iter().map(String::as_str)) {
            owned
                .push(CString::new(a).map_err(|_| Error::InvalidArgument(format!("EAL argument {a:?} contains NUL")))?);
        }
        if INITIALISED.swap(true, Ordering::SeqCst) {
            return Err(Error::EalAlreadyInitialised);
        }
        // getopt may permute the pointer array; the strings themselves are only read and
        // stay owned by `owned`. argv[argc] is NULL as C requires.
        let mut argv: Vec<*mut c_char> = owned.iter().map(|s| s.as_ptr().cast_mut()).collect();
        argv.push(std::ptr::null_mut());
        let argc = c_int::try_from(owned.len()).map_err(|_| Error::InvalidArgument("too many EAL arguments".into()))?;
        // SAFETY: argv holds argc valid NUL-terminated strings followed by NULL, all alive
        // for the duration of the call; EAL takes no ownership of them. INITIALISED
        // guarantees this is the only call in the process.
        let ret = unsafe { ffi::rte_eal_init(argc, argv.as_mut_ptr()) };
        if ret < 0 {
            return Err(error::last(format!("rte_eal_init({})", self.args.join(" "))));
        }
        Ok(Eal { inner: Arc::new(EalInner { args: self.args }) })
    }
}

/// A handle on the initialised EAL (cheap to clone). `rte_eal_cleanup` runs when the last
/// handle is dropped; mempools, ports and thash contexts hold one, so EAL outlives them.
#[derive(Clone)]
pub struct Eal {
    inner: Arc<EalInner>,
}

struct EalInner {
    args: Vec<String>,
}

impl Drop for EalInner {
    fn drop(&mut self) {
        // SAFETY: EAL was initialised (an EalInner exists only after a successful
        // rte_eal_init) and this is the last handle: every object of this crate that
        // uses DPDK memory holds a handle, so none is left.
        unsafe {
            ffi::rte_eal_cleanup();
        }
    }
}

impl std::fmt::Debug for Eal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Eal").field("args", &self.inner.args).finish()
    }
}

impl Eal {
    /// A builder over EAL's arguments.
    pub fn builder() -> EalBuilder {
        EalBuilder::default()
    }

    /// The arguments EAL was initialised with (without `argv[0]`).
    pub fn args(&self) -> &[String] {
        &self.inner.args
    }

    /// DPDK's version string, e.g. `DPDK 22.11.11`.
    pub fn version() -> String {
        // SAFETY: rte_version returns a pointer to a static NUL-terminated string and
        // needs no EAL.
        unsafe { CStr::from_ptr(ffi::rte_version()) }.to_string_lossy().into_owned()
    }

    /// EAL's runtime directory (`/var/run/dpdk/<file-prefix>` for root), where it keeps
    /// its sockets and shared configuration.
    pub fn runtime_dir(&self) -> std::path::PathBuf {
        // SAFETY: EAL is initialised; the function returns a pointer to EAL's static,
        // NUL-terminated path buffer.
        let dir = unsafe { CStr::from_ptr(ffi::rte_eal_get_runtime_dir()) };
        std::path::PathBuf::from(dir.to_string_lossy().into_owned())
    }

    /// The calling thread's lcore id: `Some` on the main lcore, on EAL worker lcores and
    /// on registered threads ([`Eal::register_thread`]); `None` elsewhere.
    pub fn lcore_id() -> Option<u32> {
        // SAFETY: rte_lcore_id reads a thread-local variable (through the generated C
        // wrapper); no preconditions.
        let id = unsafe { ffi::rte_lcore_id() };
        (id < ffi::RTE_MAX_LCORE).then_some(id)
    }

    /// The NUMA socket of the calling thread's lcore (0 on single-socket machines).
    pub fn socket_id() -> u32 {
        // SAFETY: reads thread-local state; no preconditions.
        unsafe { ffi::rte_socket_id() }
    }

    /// Registers the calling (non-EAL) thread with EAL, giving it an lcore id so mempool
    /// per-lcore caches work for it. Unregisters when the guard drops (on this thread:
    /// the guard is not `Send`).
    ///
    /// # Errors
    /// [`Error::Dpdk`] when no lcore id is free (`RTE_MAX_LCORE`) or the thread's
    /// affinity is not usable by EAL.
    pub fn register_thread(&self) -> Result<ThreadRegistration> {
        if Self::lcore_id().is_some() {
            return Err(Error::Busy("this thread already has an lcore id".into()));
        }
        // SAFETY: EAL is initialised (self exists); registers the calling thread.
        let ret = unsafe { ffi::rte_thread_register() };
        if ret < 0 {
            return Err(error::last("rte_thread_register"));
        }
        Ok(ThreadRegistration { _eal: self.clone(), _not_send: PhantomData })
    }
}

/// A thread registered with EAL by [`Eal::register_thread`]; unregisters on drop.
#[must_use = "the thread is unregistered when this guard drops"]
pub struct ThreadRegistration {
    _eal: Eal,
    /// `rte_thread_unregister` must run on the registered thread.
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for ThreadRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadRegistration").field("lcore_id", &Eal::lcore_id()).finish()
    }
}

impl Drop for ThreadRegistration {
    fn drop(&mut self) {
        // SAFETY: this guard is !Send, so we are on the thread rte_thread_register ran on,
        // and EAL is alive (we hold a handle).
        unsafe { ffi::rte_thread_unregister() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    #[test]
    fn a_second_init_is_refused() {
        let eal = testing::eal();
        assert!(eal.args().iter().any(|a| a == "--no-huge"));
        let err = Eal::builder().args(["--no-huge"]).init().unwrap_err();
        assert!(matches!(err, Error::EalAlreadyInitialised), "{err}");
        assert!(err.to_string().contains("nextest"), "{err}");
    }

    #[test]
    fn version_is_22_11() {
        let _ = testing::eal();
        let v = Eal::version();
        assert!(v.starts_with("DPDK 22.11"), "{v}");
    }

    #[test]
    fn rte_errno_is_read_through_the_shim_per_thread() {
        let _ = testing::eal();
        // SAFETY: writes the calling thread's rte_errno; no other precondition.
        unsafe { ffi::torii_set_rte_errno(ffi::EEXIST as i32) };
        assert_eq!(error::rte_errno(), ffi::EEXIST as i32);
        std::thread::spawn(|| assert_eq!(error::rte_errno(), 0)).join().unwrap();
        let e = error::last("probe");
        assert_eq!(e.to_string(), "probe: File exists (errno 17)");
    }

    #[test]
    fn a_registered_thread_gets_an_lcore_id_until_the_guard_drops() {
        let eal = testing::eal();
        std::thread::spawn(move || {
            assert_eq!(Eal::lcore_id(), None);
            let reg = eal.register_thread().expect("register");
            let id = Eal::lcore_id().expect("an lcore id after registering");
            assert_ne!(id, 0, "lcore 0 is the main lcore");
            assert!(eal.register_thread().is_err(), "registering twice");
            drop(reg);
            assert_eq!(Eal::lcore_id(), None);
        })
        .join()
        .unwrap();
    }
}
