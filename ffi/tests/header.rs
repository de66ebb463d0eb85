//! The header drift check: `include/piw.h` must be exactly what cbindgen makes of `ffi/` with
//! `ffi/cbindgen.toml`.

use std::path::PathBuf;

#[test]
fn header_matches_the_code() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let header = crate_dir.join("../include/piw.h");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).unwrap();
    let mut fresh = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .unwrap()
        .write(&mut fresh);
    let fresh = String::from_utf8(fresh).unwrap();
    if std::env::var_os("PIW_UPDATE_HEADER").is_some() {
        std::fs::write(&header, &fresh).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&header).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/piw.h differs from what ffi/ generates. Regenerate it with\n  \
         PIW_UPDATE_HEADER=1 cargo test -p piw-ffi --test header\nand commit it."
    );
}

/// The version macros in the header and the version function agree with the crate's version.
#[test]
fn version_macros_match_the_crate() {
    let v = format!(
        "{}.{}.{}",
        piw::PIW_VERSION_MAJOR,
        piw::PIW_VERSION_MINOR,
        piw::PIW_VERSION_PATCH
    );
    assert_eq!(v, env!("CARGO_PKG_VERSION"));
    let lib = unsafe { std::ffi::CStr::from_ptr(piw::piw_version()) };
    assert_eq!(lib.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
}
