//! What the engine asks of a process: the program, its environment and limits, where its
//! output goes and what of that output may be shown. Data only: `piw_host::supervise` starts
//! and watches the processes.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

/// Default size of each of the stdout and stderr tails: 64 KiB.
pub const DEFAULT_TAIL_BYTES: usize = 64 * 1024;

/// The most output of one child kept in its log file (`piw logs`): 16 MiB, then a line says
/// the rest was not kept.
pub const CHILD_LOG_BYTES: u64 = 16 * 1024 * 1024;

/// The environment a workflow's child gets besides what the supervisor always passes on:
/// `base` (the host's own environment, taken once at start by `ChildConfig::workflow_env`'s
/// caller) and `extra`.
pub(crate) fn workflow_environment(
    base: &[(std::ffi::OsString, std::ffi::OsString)],
    extra: Option<(&str, &str)>,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut env = base.to_vec();
    if let Some((key, value)) = extra {
        env.push((key.into(), value.into()));
    }
    env
}

/// `text` with every run of 32 or more hex digits replaced by `<hex>`: what a child printed
/// reaches status and reasons, and nothing shaped like a token may.
pub fn mask_hex_runs(text: &str) -> String {
    const HEX_RUN: usize = 32;
    let mut out = String::with_capacity(text.len());
    let mut hex = String::new();
    let flush = |out: &mut String, hex: &mut String| {
        if hex.len() >= HEX_RUN {
            out.push_str("<hex>");
        } else {
            out.push_str(hex);
        }
        hex.clear();
    };
    for c in text.chars() {
        if c.is_ascii_hexdigit() {
            hex.push(c);
        } else {
            flush(&mut out, &mut hex);
            out.push(c);
        }
    }
    flush(&mut out, &mut hex);
    out
}

/// Where one child's output goes, and how much of it at most.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputLog {
    /// The file (created with mode 0600, its directory with 0700; appended to).
    pub path: PathBuf,
    /// The most bytes of output written to it; the line `cut_line` follows them.
    pub cap_bytes: u64,
}

/// Resource limits applied in the child (with `setrlimit`) before it executes the program.
/// Core dumps are always disabled (`RLIMIT_CORE` = 0).
///
/// A limit above the host's own hard limit is lowered to it (an unprivileged process cannot
/// raise a hard limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChildLimits {
    /// CPU time in seconds (`RLIMIT_CPU`). At the limit the child gets SIGXCPU, one second
    /// later SIGKILL.
    pub cpu_seconds: Option<u64>,
    /// Address-space size in bytes (`RLIMIT_AS`): allocations beyond it fail.
    pub memory_bytes: Option<u64>,
}

/// Everything needed to start one child.
#[derive(Clone)]
pub struct SpawnSpec {
    /// The program to execute. A bare name is looked up in the child's `PATH`.
    pub program: PathBuf,
    /// Arguments after the program name.
    pub args: Vec<OsString>,
    /// Variables added to the child's environment, which otherwise holds only
    /// `supervise::INHERITED_ENV`. These win over inherited values.
    pub env: Vec<(OsString, OsString)>,
    /// The child's working directory; it must exist.
    pub cwd: PathBuf,
    /// Written to the child's stdin, which is then closed. The launch envelope travels this way.
    pub stdin_payload: Vec<u8>,
    /// Resource limits.
    pub limits: ChildLimits,
    /// How much lower than the host's the child's CPU priority is (its nice value is raised by
    /// this much; 0 leaves it as the host's). Set from the host right after the spawn.
    pub nice: i32,
    /// How many trailing bytes of stdout and of stderr to keep (each).
    pub tail_bytes: usize,
    /// Whose child this is (the host passes a digest of its installation): the first part of
    /// the child's `supervise::MARKER_VAR` value, so that `supervise::kill_marked_leftovers` of one installation
    /// never touches another's children. May be empty.
    pub scope: String,
    /// Where the child's whole output goes (see [`OutputLog`]); `None`: only the tails, or a
    /// file given later with `Supervised::log_output_to`. Boxed: a spec travels in
    /// messages that should stay small.
    pub output_log: Option<Box<OutputLog>>,
}

impl SpawnSpec {
    /// A spec running `program` with no arguments in `cwd`, an empty stdin, no limits beyond
    /// the core-dump ban, and [`DEFAULT_TAIL_BYTES`] tails.
    pub fn new(program: impl Into<PathBuf>, cwd: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: cwd.into(),
            stdin_payload: Vec::new(),
            limits: ChildLimits::default(),
            nice: 0,
            tail_bytes: DEFAULT_TAIL_BYTES,
            scope: String::new(),
            output_log: None,
        }
    }

    /// Writes the child's whole output to `log`.
    pub fn output_log(mut self, log: OutputLog) -> Self {
        self.output_log = Some(Box::new(log));
        self
    }

    /// Sets the scope of the child's `supervise::MARKER_VAR` value.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = scope.into();
        self
    }

    /// Lowers the child's CPU priority by `nice` (see [`SpawnSpec::nice`]).
    pub fn nice(mut self, nice: i32) -> Self {
        self.nice = nice;
        self
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Adds one environment variable.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Sets the stdin payload.
    pub fn stdin_payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.stdin_payload = payload.into();
        self
    }

    /// Sets the resource limits.
    pub fn limits(mut self, limits: ChildLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the size of each output tail.
    pub fn tail_bytes(mut self, tail_bytes: usize) -> Self {
        self.tail_bytes = tail_bytes;
        self
    }
}

/// Redacted: the stdin payload carries the one-time child token and environment values may be
/// secrets, so only sizes and variable names are shown.
impl fmt::Debug for SpawnSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpawnSpec")
            .field("program", &self.program)
            .field("args", &self.args)
            .field(
                "env_names",
                &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("cwd", &self.cwd)
            .field("stdin_payload_len", &self.stdin_payload.len())
            .field("limits", &self.limits)
            .field("tail_bytes", &self.tail_bytes)
            .field("output_log", &self.output_log)
            .finish()
    }
}
