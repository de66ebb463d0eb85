//! The string conventions of the ABI.
//!
//! In: NUL-terminated UTF-8 (`const char *`), read up to a per-argument limit: NULL where one
//! is required is `PIW_STATUS_NULL_ARGUMENT`, bytes that are not UTF-8 `PIW_STATUS_INVALID_UTF8`,
//! a string longer than its limit `PIW_STATUS_TOO_LARGE` (the bytes past the limit are never
//! read). Out: owned NUL-terminated UTF-8 (`char *`) written through a `char **` the caller
//! passes; the caller frees it with `piw_string_free`. On failure the out pointer is set to
//! NULL.

use std::ffi::{c_char, CStr};

use serde_json::Value;

use crate::error::{c_string, Error, PiwRejectionCode, PiwStatus};

/// Longest identifier, kind, path or short text argument, in bytes.
pub const PIW_MAX_TEXT_BYTES: usize = 64 * 1024;

/// Longest JSON argument, in bytes: the protocol's payload limit (a request's whole JSON is
/// checked against the protocol's limits again before it is sent).
pub const PIW_MAX_JSON_BYTES: usize = 256 * 1024;

/// Longest JSON argument that carries a node's output or a run's result (`outcome_json`,
/// `result_json` of the worker's steps), in bytes: the largest value (64 MiB of canonical JSON,
/// sent in chunks) and room for what surrounds it. A value within this but over 64 MiB once
/// canonical is refused by the worker as `value_too_large` (`PIW_STATUS_INVALID_ARGUMENT`),
/// before anything is sent; a longer argument is not read (`PIW_STATUS_TOO_LARGE`).
pub const PIW_MAX_VALUE_JSON_BYTES: usize = 64 * 1024 * 1024 + 256 * 1024;

/// [`PIW_MAX_JSON_BYTES`], which must equal the protocol's payload limit (a unit test checks).
pub fn max_json_bytes() -> usize {
    PIW_MAX_JSON_BYTES
}

/// Reads a required string argument.
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string readable up to its NUL or `max` bytes.
pub unsafe fn text<'a>(ptr: *const c_char, what: &str, max: usize) -> Result<&'a str, Error> {
    // SAFETY: forwarded from the caller.
    unsafe { opt_text(ptr, what, max) }?.ok_or_else(|| Error::null(what))
}

/// Reads an optional string argument (NULL is `None`).
///
/// # Safety
/// As [`text`].
pub unsafe fn opt_text<'a>(
    ptr: *const c_char,
    what: &str,
    max: usize,
) -> Result<Option<&'a str>, Error> {
    if ptr.is_null() {
        return Ok(None);
    }
    // Never reads past `max + 1` bytes: a huge or unterminated buffer is refused, not scanned.
    // SAFETY: the caller guarantees the bytes up to the NUL or the bound are readable.
    let len = unsafe { libc::strnlen(ptr, max + 1) };
    if len > max {
        let mut e = Error::new(
            PiwStatus::TooLarge,
            "payload_too_large",
            format!("{what} is longer than its limit of {max} bytes"),
        );
        e.rejection = PiwRejectionCode::PayloadTooLarge;
        return Err(e);
    }
    // SAFETY: `len` bytes followed by a NUL are readable (strnlen found the NUL at `len`).
    let bytes = unsafe { CStr::from_ptr(ptr) }.to_bytes();
    std::str::from_utf8(bytes).map(Some).map_err(|e| {
        Error::new(
            PiwStatus::InvalidUtf8,
            "invalid_utf8",
            format!("{what} is not valid UTF-8: {e}"),
        )
    })
}

/// Reads an optional JSON argument (NULL is `null`).
///
/// # Safety
/// As [`text`].
pub unsafe fn opt_json(ptr: *const c_char, what: &str) -> Result<Value, Error> {
    // SAFETY: forwarded from the caller.
    match unsafe { opt_text(ptr, what, max_json_bytes()) }? {
        None => Ok(Value::Null),
        Some(text) => serde_json::from_str(text)
            .map_err(|e| Error::invalid(format!("{what} is not valid JSON: {e}"))),
    }
}

/// Reads a JSON argument that carries a value (NULL is `null`), up to
/// [`PIW_MAX_VALUE_JSON_BYTES`].
///
/// # Safety
/// As [`text`].
pub unsafe fn opt_value_json(ptr: *const c_char, what: &str) -> Result<Value, Error> {
    // SAFETY: forwarded from the caller.
    match unsafe { opt_text(ptr, what, PIW_MAX_VALUE_JSON_BYTES) }? {
        None => Ok(Value::Null),
        Some(text) => serde_json::from_str(text)
            .map_err(|e| Error::invalid(format!("{what} is not valid JSON: {e}"))),
    }
}

/// Reads a required JSON argument that carries a value, as [`opt_value_json`].
///
/// # Safety
/// As [`text`].
pub unsafe fn value_json(ptr: *const c_char, what: &str) -> Result<Value, Error> {
    if ptr.is_null() {
        return Err(Error::null(what));
    }
    // SAFETY: forwarded from the caller.
    unsafe { opt_value_json(ptr, what) }
}

/// Reads a required JSON argument.
///
/// # Safety
/// As [`text`].
pub unsafe fn json(ptr: *const c_char, what: &str) -> Result<Value, Error> {
    if ptr.is_null() {
        return Err(Error::null(what));
    }
    // SAFETY: forwarded from the caller.
    unsafe { opt_json(ptr, what) }
}

/// Checks an out pointer and clears what it points to, so a failure leaves NULL there.
///
/// # Safety
/// `out` is NULL or valid for a write of a pointer.
pub unsafe fn out_ptr<'a, T>(out: *mut *mut T, what: &str) -> Result<&'a mut *mut T, Error> {
    if out.is_null() {
        return Err(Error::null(what));
    }
    // SAFETY: non-null and valid for writes, per the caller.
    let slot = unsafe { &mut *out };
    *slot = std::ptr::null_mut();
    Ok(slot)
}

/// Hands `text` to the caller as an owned C string (freed by `piw_string_free`).
pub fn give(slot: &mut *mut c_char, text: &str) {
    *slot = c_string(text).into_raw();
}

/// Checks that `out` is usable before any work is done.
///
/// # Safety
/// As [`out_ptr`].
pub unsafe fn out_string<'a>(
    out: *mut *mut c_char,
    what: &str,
) -> Result<&'a mut *mut c_char, Error> {
    // SAFETY: forwarded from the caller.
    unsafe { out_ptr(out, what) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_value_json_limit_holds_the_largest_value_and_its_frame() {
        assert_eq!(
            super::PIW_MAX_VALUE_JSON_BYTES as u64,
            piw_client::protocol::value::MAX_VALUE_BYTES + super::PIW_MAX_JSON_BYTES as u64
        );
    }

    #[test]
    fn the_json_limit_is_the_protocols_payload_limit() {
        assert_eq!(
            super::PIW_MAX_JSON_BYTES,
            piw_client::protocol::Limits::default().max_payload_bytes
        );
    }
}
