//! Opaque handles. A handle the caller holds is a number, not an address: the library keeps
//! the object in a table and looks it up on every call. A closed handle is gone from the table,
//! so a call with it fails with `PIW_STATUS_CLOSED` instead of touching freed memory, and a
//! handle of one type passed where another is expected is not found either. Numbers are never
//! reused within a process.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{catch, Error, ErrorSlot};

/// Every handle number ever given out; shared by all types so none is ever valid for two.
/// Starts high so that small integers passed by mistake are never a handle.
static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(0x10_0000);

/// An object behind a handle, with the last failure of calls on it.
pub trait HasErrorSlot {
    fn error_slot(&self) -> &ErrorSlot;
}

pub struct Table<T> {
    what: &'static str,
    objects: Mutex<Option<HashMap<usize, Arc<T>>>>,
}

impl<T: HasErrorSlot> Table<T> {
    pub const fn new(what: &'static str) -> Self {
        Table {
            what,
            objects: Mutex::new(None),
        }
    }

    fn objects(&self) -> std::sync::MutexGuard<'_, Option<HashMap<usize, Arc<T>>>> {
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `object`; returns its handle number.
    pub fn insert(&self, object: T) -> usize {
        let id = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
        self.objects()
            .get_or_insert_with(HashMap::new)
            .insert(id, Arc::new(object));
        id
    }

    /// The object of a live handle.
    pub fn get<P>(&self, handle: *const P) -> Result<Arc<T>, Error> {
        if handle.is_null() {
            return Err(Error::null(self.what));
        }
        self.objects()
            .as_ref()
            .and_then(|m| m.get(&(handle as usize)).cloned())
            .ok_or_else(|| Error::closed(self.what))
    }

    /// Takes the object of a handle out of the table: later calls with it fail as closed.
    pub fn remove<P>(&self, handle: *const P) -> Result<Arc<T>, Error> {
        if handle.is_null() {
            return Err(Error::null(self.what));
        }
        self.objects()
            .as_mut()
            .and_then(|m| m.remove(&(handle as usize)))
            .ok_or_else(|| Error::closed(self.what))
    }

    /// Takes every object out of the table: every handle of this type is closed.
    pub fn drain(&self) -> Vec<Arc<T>> {
        self.objects()
            .take()
            .map(|m| m.into_values().collect())
            .unwrap_or_default()
    }

    /// Runs `f` on the object of a live handle, recording a failure (a panic too) on the
    /// handle as well as in the thread's last error.
    pub fn with<P, R>(
        &self,
        handle: *const P,
        f: impl FnOnce(&T) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let object = self.get(handle)?;
        let result = catch(|| f(&object));
        if let Err(e) = &result {
            if e.status != crate::error::PiwStatus::End {
                object.error_slot().set(e);
            }
        }
        result
    }
}
