// Links libds4tp.so. DS4TP_LIB_DIR names the directory holding it (ctest
// sets it to the build tree); without it, a build tree of this repository
// (../../build*/lib) is used if there is one, else the system's.
// An rpath to that directory lets tests and examples run in place.
use std::env;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=DS4TP_LIB_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    let dir = env::var_os("DS4TP_LIB_DIR").map(PathBuf::from).or_else(repo_build_dir);
    if let Some(dir) = dir {
        println!("cargo:rustc-link-search=native={}", dir.display());
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    }
    println!("cargo:rustc-link-lib=dylib=ds4tp");
}

fn repo_build_dir() -> Option<PathBuf> {
    let manifest = env::var_os("CARGO_MANIFEST_DIR")?;
    let root = Path::new(&manifest).parent()?.parent()?.to_path_buf();
    let preferred = root.join("build").join("lib");
    if preferred.join("libds4tp.so").exists() {
        return Some(preferred);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(&root)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().map_or(false, |n| n.to_string_lossy().starts_with("build"))
                && p.join("lib").join("libds4tp.so").exists()
        })
        .map(|p| p.join("lib"))
        .collect();
    found.sort();
    found.into_iter().next()
}
