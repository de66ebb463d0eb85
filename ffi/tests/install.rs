//! libpiw as a system library: its SONAME, `scripts/install-libpiw` (versioned names, the
//! header, a `piw.pc` for the prefix, the host binaries), the in-place `target/<profile>/piw.pc`
//! from the build, and a program that connects without being told where the host binary is.

mod common;

use std::path::Path;
use std::process::Command;

use common::{build_dir, repo_root, text, Install};

/// A program that connects with default options (starting a host when none runs) and asks the
/// host's status; prints `connected` or the error.
const CONNECT_C: &str = r#"#include <stdio.h>
#include "piw.h"
int main(void) {
    piw_client *client = NULL;
    piw_status st = piw_connect(NULL, &client);
    if (st != PIW_STATUS_OK) { printf("error %s: %s\n", piw_last_error_code(), piw_last_error_message()); return 1; }
    char *reply = NULL;
    st = piw_client_call(client, "host.status", NULL, NULL, 30000, &reply);
    if (st != PIW_STATUS_OK) { printf("error %s\n", piw_last_error_message()); return 1; }
    printf("connected\n");
    piw_string_free(reply);
    piw_client_close(client);
    piw_shutdown();
    return 0;
}
"#;

fn pkg_config(pc_dir: &Path, args: &[&str]) -> Vec<String> {
    let out = Command::new("pkg-config")
        .args(args)
        .args(["--cflags", "--libs", "piw"])
        .env("PKG_CONFIG_PATH", pc_dir)
        .output()
        .expect("pkg-config runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn cc(src: &Path, flags: &[String], out: &Path) {
    let status = Command::new("cc")
        .arg(src)
        .args(flags)
        .arg("-o")
        .arg(out)
        .status()
        .unwrap();
    assert!(status.success(), "cc {flags:?}");
}

/// include/README.md's `cc` line for a build used in place (`in_place`) or for an installed
/// libpiw.
fn documented_cc_line(in_place: bool) -> String {
    common::doc_lines("include/README.md", "## Build and link (no make)")
        .into_iter()
        .find(|l| l.starts_with("cc ") && l.contains("PKG_CONFIG_PATH=target/release") == in_place)
        .expect("include/README.md shows how to link")
}

fn readelf_dynamic(file: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-d")
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success());
    text(&out.stdout)
}

/// An environment in which the program can find the host only by the library's own lookup:
/// no PIW_HOST_BIN, and a PATH without any `piw`.
fn run_without_host_hint(install: &Install, program: &Path, extra: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(program);
    cmd.env_remove("PIW_HOST_BIN");
    let mut env: Vec<(String, String)> = install
        .env()
        .into_iter()
        .filter(|(k, _)| k != "PIW_HOST_BIN")
        .collect();
    env.push(("PATH".into(), "/usr/bin:/bin".into()));
    cmd.env_clear()
        .envs(env)
        .envs(extra.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let out = common::run_bounded(&mut cmd, std::time::Duration::from_secs(60));
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{}: {stdout}{}",
        out.status,
        text(&out.stderr)
    );
    stdout
}

#[test]
fn the_build_has_a_soname_and_a_pkg_config_file_that_works_in_place() {
    let lib = build_dir().join("libpiw.so");
    let dynamic = readelf_dynamic(&lib);
    assert!(
        dynamic.contains("Library soname: [libpiw.so.0.1]"),
        "{dynamic}"
    );
    let install = Install::new();
    // include/README.md's line, as written, in a directory whose `target/release` is this
    // build.
    let dir = install.path().join("project");
    std::fs::create_dir_all(dir.join("target")).unwrap();
    std::os::unix::fs::symlink(build_dir(), dir.join("target/release")).unwrap();
    std::fs::write(dir.join("my_program.c"), CONNECT_C).unwrap();
    let line = documented_cc_line(true);
    let o = common::run_doc_line(&line, &dir, &common::env_without_host_hint(&install));
    assert!(o.status.success(), "{line}: {}", text(&o.stderr));
    let program = dir.join("my_program");
    assert!(readelf_dynamic(&program).contains("Shared library: [libpiw.so.0.1]"));
    // No LD_LIBRARY_PATH: the in-place flags carry the rpath; the host is the `piw` of the
    // same build directory.
    assert_eq!(
        run_without_host_hint(&install, &program, &[]),
        "connected\n"
    );
}

#[test]
fn an_installed_libpiw_links_by_pkg_config_and_starts_its_own_host() {
    let install = Install::new();
    let prefix = install.path().join("prefix");
    let status = Command::new(repo_root().join("scripts/install-libpiw"))
        .arg("--prefix")
        .arg(&prefix)
        .arg("--from")
        .arg(build_dir())
        .status()
        .unwrap();
    assert!(status.success());
    let lib = prefix.join("lib");
    for name in ["libpiw.so", "libpiw.so.0.1", "libpiw.so.0.1.0", "libpiw.a"] {
        assert!(lib.join(name).exists(), "{name}");
    }
    assert_eq!(
        std::fs::read_link(lib.join("libpiw.so.0.1")).unwrap(),
        Path::new("libpiw.so.0.1.0")
    );
    assert!(prefix.join("include/piw.h").is_file());
    assert!(prefix.join("bin/piw").is_file() && prefix.join("bin/piw-json-worker").is_file());
    let pc = std::fs::read_to_string(lib.join("pkgconfig/piw.pc")).unwrap();
    assert!(
        pc.lines()
            .any(|l| l == format!("prefix={}", prefix.display())),
        "{pc}"
    );
    assert!(
        pc.lines()
            .any(|l| l == format!("Version: {}", env!("CARGO_PKG_VERSION"))),
        "{pc}"
    );

    let src = install.path().join("connect.c");
    std::fs::write(&src, CONNECT_C).unwrap();
    let pc_dir = lib.join("pkgconfig");
    // include/README.md's line, as written, with the prefix's pkg-config file.
    let dir = install.path().join("project");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("my_program.c"), CONNECT_C).unwrap();
    let line = documented_cc_line(false);
    let mut env = common::env_without_host_hint(&install);
    env.push(("PKG_CONFIG_PATH".into(), pc_dir.display().to_string()));
    let o = common::run_doc_line(&line, &dir, &env);
    assert!(o.status.success(), "{line}: {}", text(&o.stderr));
    let shared = dir.join("my_program");
    assert!(readelf_dynamic(&shared).contains("Shared library: [libpiw.so.0.1]"));
    // The library found through its SONAME in the prefix; the host it starts is the prefix's
    // bin/piw (nothing else names one).
    let ld = lib.display().to_string();
    assert_eq!(
        run_without_host_hint(&install, &shared, &[("LD_LIBRARY_PATH", &ld)]),
        "connected\n"
    );
    let stopped = Command::new(prefix.join("bin/piw"))
        .args(["host", "stop"])
        .envs(install.env())
        .output()
        .unwrap();
    assert!(stopped.status.success(), "{}", text(&stopped.stderr));

    // Statically: the archive and the private libraries pkg-config names.
    let mut flags = pkg_config(&pc_dir, &["--static"]);
    flags.retain(|f| f != "-lpiw");
    flags.insert(0, lib.join("libpiw.a").display().to_string());
    let fixed = install.path().join("bin/connect-static");
    cc(&src, &flags, &fixed);
    assert!(!readelf_dynamic(&fixed).contains("libpiw"));
}
