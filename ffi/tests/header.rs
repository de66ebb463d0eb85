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

/// ffi/piw.pc carries the crate's version, and a program built with the flags pkg-config
/// gives from it links against libpiw (statically too) and runs.
#[test]
fn the_pkg_config_file_builds_a_program() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let pc = std::fs::read_to_string(crate_dir.join("piw.pc")).unwrap();
    assert!(
        pc.lines()
            .any(|l| l == format!("Version: {}", env!("CARGO_PKG_VERSION"))),
        "ffi/piw.pc names another version than the crate's"
    );
    // target/<profile>/deps/<this test> → target/<profile>, where libpiw is.
    let exe = std::env::current_exe().unwrap();
    let lib_dir = exe.parent().unwrap().parent().unwrap().to_owned();
    let include_dir = crate_dir.join("../include");
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("v.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <string.h>\n#include \"piw.h\"\n\
         int main(void) { printf(\"%s %d\\n\", piw_version(), PIW_VERSION_MINOR); \
         return strcmp(piw_status_name(PIW_STATUS_REJECTED), \"rejected\") != 0; }\n",
    )
    .unwrap();
    for (static_link, name) in [(false, "v-shared"), (true, "v-static")] {
        let mut args = vec!["--define-variable=libdir=".to_owned() + lib_dir.to_str().unwrap()];
        args.push("--define-variable=includedir=".to_owned() + include_dir.to_str().unwrap());
        if static_link {
            args.push("--static".into());
        }
        args.extend(["--cflags".into(), "--libs".into(), "piw".into()]);
        let flags = std::process::Command::new("pkg-config")
            .args(&args)
            .env("PKG_CONFIG_PATH", &crate_dir)
            .output()
            .expect("pkg-config runs");
        assert!(
            flags.status.success(),
            "{}",
            String::from_utf8_lossy(&flags.stderr)
        );
        let mut flags: Vec<String> = String::from_utf8(flags.stdout)
            .unwrap()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        if static_link {
            // -lpiw would pick libpiw.so beside libpiw.a: name the archive.
            flags.retain(|f| f != "-lpiw");
            flags.insert(0, lib_dir.join("libpiw.a").display().to_string());
        }
        let out = dir.path().join(name);
        let status = std::process::Command::new("cc")
            .arg(&src)
            .args(&flags)
            .arg("-o")
            .arg(&out)
            .status()
            .unwrap();
        assert!(status.success(), "cc {flags:?}");
        let run = std::process::Command::new(&out)
            .env("LD_LIBRARY_PATH", &lib_dir)
            .output()
            .unwrap();
        assert!(run.status.success());
        assert_eq!(
            String::from_utf8(run.stdout).unwrap().trim(),
            format!("{} {}", env!("CARGO_PKG_VERSION"), piw::PIW_VERSION_MINOR)
        );
    }
}
