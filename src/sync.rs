//! Locking that survives a panicked holder.
//!
//! Every mutex in this crate guards data that stays consistent between statements (a
//! cache, a bucket, a counter map), so a thread that panicked while holding one leaves
//! nothing half-written; the next caller takes the data as it is instead of spreading
//! the panic to every thread.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, ignoring poisoning (see the module documentation).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
