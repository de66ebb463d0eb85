//! The driver's half of `run.start`: reading the workflow file the request names, on the
//! connection's blocking thread, before the store thread decides anything. The deciding code
//! (`dispatch`) gets the run record this builds ([`PreparedStart`]) and touches no file. The
//! same for `run.retry` with `accept_source`: the run's workflow file hashed again
//! ([`hash_accepted_source`], an [`AcceptedSource`]).

use serde_json::json;

use crate::engine::handlers::run::{AcceptedSource, PreparedStart};
use crate::protocol::{payload, Rejection, RejectionCode};
use crate::store::{ExecutionMode, NewRun};

/// Builds the run record for `run.start`: reads the workflow file to hash it (never runs it).
///
/// Blocking file I/O: the connection task runs it on a blocking thread (`spawn_blocking`), so
/// a slow file system costs only the connection that asked.
///
/// Paths never depend on the host's own working directory (wherever it happened to start): a
/// relative `workflow_file` is resolved against `project_dir`, which must then be given, and a
/// `project_dir` must be an absolute path to an existing directory. A path that breaks the
/// first rules is `malformed`, one that does not exist `not_found`, each naming the path.
pub fn prepare_start(start: &payload::RunStart) -> Result<PreparedStart, Rejection> {
    let project_dir = match start.project_dir.as_deref() {
        Some(dir) => Some(checked_project_dir(dir)?),
        None => None,
    };
    let workflow_file = std::path::Path::new(&start.workflow_file);
    let path = match &project_dir {
        _ if workflow_file.is_absolute() => workflow_file.to_path_buf(),
        Some(dir) => dir.join(workflow_file),
        None => {
            return Err(Rejection::new(
                RejectionCode::Malformed,
                format!(
                    "workflow_file `{}` is relative and run.start has no project_dir to resolve it against: send an absolute path, or the caller's directory as project_dir",
                    start.workflow_file
                ),
            ))
        }
    };
    let path = path.as_path();
    let canonical = std::fs::canonicalize(path)
        .map_err(|e| unreadable(format!("workflow file {}", path.display()), &e))?;
    let source_hash = hash_workflow_file(&canonical)
        .map_err(|e| unreadable(format!("workflow file {}", canonical.display()), &e))?;
    let file_name = canonical
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("workflow");
    let workflow_name = file_name.split('.').next().unwrap_or(file_name).to_owned();
    // Without one, the run works in the directory of its workflow file.
    let project_dir = project_dir
        .or_else(|| canonical.parent().map(std::path::Path::to_path_buf))
        .unwrap_or_else(|| std::path::PathBuf::from("/"))
        .display()
        .to_string();
    Ok(PreparedStart {
        new_run: NewRun {
            workflow_name,
            source_root: canonical.display().to_string(),
            source_hash,
            mounted_sources: json!({}),
            definition: None,
            input: start.input.clone(),
            origin_session: start.session_id.clone(),
            execution_mode: match start.execution_mode {
                Some(ExecutionMode::Detached) => ExecutionMode::Detached,
                _ if start.session_id.is_none() => ExecutionMode::Detached,
                _ => ExecutionMode::Interactive,
            },
            project_dir,
        },
    })
}

/// Hashes a run's workflow file (`source_root`, as the run recorded it) as it is now, for a
/// person's `run.retry` with `accept_source`. Blocking file I/O, like [`prepare_start`]. A file
/// that is gone or unreadable is `not_found`, naming it: there is nothing to accept.
pub fn hash_accepted_source(source_root: &str) -> Result<AcceptedSource, Rejection> {
    let what = || format!("workflow file {source_root} (the run's source, to accept as it is now)");
    let source_hash = hash_workflow_file(std::path::Path::new(source_root))
        .map_err(|e| unreadable(what(), &e))?;
    Ok(AcceptedSource {
        source_root: source_root.to_owned(),
        source_hash,
    })
}

/// `run.start`'s `project_dir`: an absolute path to a directory that exists (its children
/// start there; a path that is not one would fail every launch instead of the start).
fn checked_project_dir(dir: &str) -> Result<std::path::PathBuf, Rejection> {
    let path = std::path::Path::new(dir);
    if !path.is_absolute() {
        return Err(Rejection::new(
            RejectionCode::Malformed,
            format!("project_dir `{dir}` is not an absolute path: send the caller's directory as an absolute path"),
        ));
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(path.to_path_buf()),
        Ok(_) => Err(Rejection::new(
            RejectionCode::NotFound,
            format!("project_dir {dir}: not a directory"),
        )),
        Err(e) => Err(unreadable(format!("project_dir {dir}"), &e)),
    }
}

/// A file `what` the host could not read: `not_found`, unless the host itself ran out of
/// something (descriptors, memory), which is its own failure (`internal`, worth retrying) and
/// says what ran out.
fn unreadable(what: String, e: &std::io::Error) -> Rejection {
    match crate::supervise::exhausted_resource(e) {
        Some(resource) => Rejection::new(
            RejectionCode::Internal,
            format!("the host ran out of {resource} while reading {what} ({e}); nothing was started, try again"),
        ),
        None => Rejection::new(RejectionCode::NotFound, format!("{what}: {e}")),
    }
}

/// The SHA-256 (hex) of a workflow file, which must be a regular file.
///
/// Opened non-blocking and checked on the open handle: opening a FIFO named like a workflow
/// would otherwise wait for a writer, and a link to a device such as `/dev/zero` would never
/// end. Hashed in chunks, so a large file does not have to fit in memory.
fn hash_workflow_file(path: &std::path::Path) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut hasher = Sha256::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => hasher.update(chunk.get(..n).unwrap_or_default()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_the_host_could_not_read_for_lack_of_descriptors_is_not_missing() {
        let r = unreadable(
            "workflow file /w.workflow.json".into(),
            &std::io::Error::from_raw_os_error(libc::EMFILE),
        );
        assert_eq!(r.code, RejectionCode::Internal);
        assert!(
            r.message
                .starts_with("the host ran out of file descriptors"),
            "{}",
            r.message
        );
        let r = unreadable(
            "workflow file /w.workflow.json".into(),
            &std::io::Error::from(std::io::ErrorKind::NotFound),
        );
        assert_eq!(r.code, RejectionCode::NotFound);
    }
}
