//! libpiw's shared library gets a SONAME, and the build directory gets what linking in place
//! needs: the SONAME's file name beside `libpiw.so` (a symlink), and a pkg-config file,
//! `target/<profile>/piw.pc`, whose flags compile and run a program against this build
//! (`PKG_CONFIG_PATH=target/release pkg-config --cflags --libs piw`). Both are written next to
//! the build's own outputs because a program linked with `-lpiw` records the SONAME and looks
//! for that name at run time; cargo makes only `libpiw.so`. `scripts/install-libpiw` installs
//! the library under its versioned names with a `piw.pc` for the chosen prefix.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=piw.pc");
    let major: u32 = env("CARGO_PKG_VERSION_MAJOR").parse().unwrap_or(0);
    let minor: u32 = env("CARGO_PKG_VERSION_MINOR").parse().unwrap_or(0);
    // Before 1.0 a minor version may break the ABI (Cargo's rule), so it is part of the name.
    let soversion = if major == 0 {
        format!("0.{minor}")
    } else {
        major.to_string()
    };
    let soname = format!("libpiw.so.{soversion}");
    if env("CARGO_CFG_TARGET_OS") == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    }
    // OUT_DIR is <target>/[<triple>/]<profile>/build/piw-ffi-<hash>/out.
    let out = PathBuf::from(env("OUT_DIR"));
    let Some(profile_dir) = out.ancestors().nth(3) else {
        return;
    };
    let link = profile_dir.join(&soname);
    if std::fs::symlink_metadata(&link).is_err() {
        // Dangling until the library is linked, a moment later.
        if let Err(e) = std::os::unix::fs::symlink("libpiw.so", &link) {
            println!("cargo:warning=cannot create {}: {e}", link.display());
        }
    }
    let include = PathBuf::from(env("CARGO_MANIFEST_DIR")).join("../include");
    let include = include.canonicalize().unwrap_or(include);
    if let Err(e) = write_in_place_pc(profile_dir, &include) {
        println!(
            "cargo:warning=cannot write {}/piw.pc: {e}",
            profile_dir.display()
        );
    }
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

/// `ffi/piw.pc` with the build directory as libdir and the checkout's include/ as includedir,
/// plus an rpath, so a program built with its flags runs without an install.
fn write_in_place_pc(profile_dir: &Path, include: &Path) -> std::io::Result<()> {
    let template = std::fs::read_to_string("piw.pc")?;
    let mut text = String::new();
    for line in template.lines() {
        let line = if line.starts_with("prefix=") {
            format!("prefix={}", profile_dir.display())
        } else if line.starts_with("libdir=") {
            "libdir=${prefix}".to_owned()
        } else if line.starts_with("includedir=") {
            format!("includedir={}", include.display())
        } else if line.starts_with("Libs:") {
            "Libs: -L${libdir} -Wl,-rpath,${libdir} -lpiw".to_owned()
        } else if line.starts_with('#') {
            continue;
        } else {
            line.to_owned()
        };
        text.push_str(&line);
        text.push('\n');
    }
    let pc = profile_dir.join("piw.pc");
    if std::fs::read_to_string(&pc).ok().as_deref() != Some(text.as_str()) {
        std::fs::write(pc, text)?;
    }
    Ok(())
}
