//! Helpers shared by the host's process-level test suites.

use std::process::Child;

/// A host process that is killed if a test fails before stopping it, so failures leave no
/// stray hosts behind.
pub struct HostProc(pub Child);

impl std::ops::Deref for HostProc {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for HostProc {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for HostProc {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}
