// Finds libds4tp and tells rustc how to link it. In order:
//   DS4TP_LIB_DIR  a directory holding libds4tp.so / .dylib / .a (a build
//                  tree's lib/, an install prefix's lib/); no pkg-config
//   pkg-config     the `pkg-config` program ($PKG_CONFIG overrides it) on
//                  ds4tp.pc, found through PKG_CONFIG_PATH as usual
// Static linking (libds4tp.a plus its private libraries from
// `pkg-config --static`): the `static` feature, or DS4TP_STATIC=1
// (DS4TP_STATIC=0 forces the shared library even with the feature).
//
// No rpath is set unless asked: a binary linked against the shared library
// finds it through the system loader (ldconfig, LD_LIBRARY_PATH,
// DYLD_LIBRARY_PATH) or through an rpath its own build chooses; for a
// library outside the loader's default directories the build prints (as a
// cargo warning) the exact LD_LIBRARY_PATH line and link argument to use.
// DS4TP_RPATH=1 adds `-Wl,-rpath,<libdir>` to the link itself. Dependents
// read the directory and the header path as DEP_DS4TP_LIB_DIR and
// DEP_DS4TP_INCLUDE.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

// What libds4tp.a needs when no ds4tp.pc is there to say (Linux build
// with libcrypto; a Mac's CommonCrypto is in libSystem).
const FALLBACK_PRIVATE_LIBS: &[&str] = &["uv", "fmt", "crypto", "stdc++", "m", "dl", "pthread"];

fn main() {
    for var in ["DS4TP_LIB_DIR", "DS4TP_STATIC", "DS4TP_RPATH", "PKG_CONFIG", "PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR", "PKG_CONFIG_SYSROOT_DIR"] {
        println!("cargo:rerun-if-env-changed={}", var);
    }
    println!("cargo:rerun-if-changed=build.rs");
    let want_static = match env::var("DS4TP_STATIC").ok().as_deref() {
        Some("1") | Some("ON") | Some("on") | Some("yes") | Some("true") => true,
        Some("0") | Some("OFF") | Some("off") | Some("no") | Some("false") => false,
        _ => env::var_os("CARGO_FEATURE_STATIC").is_some(),
    };
    let link = match env::var_os("DS4TP_LIB_DIR") {
        Some(dir) => from_dir(Path::new(&dir), want_static),
        None => from_pkg_config(want_static),
    };
    match link {
        Ok(mut link) => {
            link.rpath(want_static);
            link.emit()
        }
        Err(tried) => {
            eprintln!("ds4tp-sys: cannot find libds4tp.\n{}", tried);
            eprintln!(
                "Install libds4tp (cmake --install, or the libds4tp-dev package) and either point \
                 PKG_CONFIG_PATH at its lib/pkgconfig or set DS4TP_LIB_DIR to its lib directory."
            );
            std::process::exit(1);
        }
    }
}

#[derive(Default)]
struct Link {
    search: Vec<PathBuf>,
    // (kind, name): "static" / "dylib" / "" (let rustc pick).
    libs: Vec<(&'static str, String)>,
    link_args: Vec<String>,
    lib_dir: Option<PathBuf>,
    include: Option<PathBuf>,
}

// Directories the loader searches without being told (no warning there).
fn loader_default(dir: &Path) -> bool {
    let d = dir.to_string_lossy();
    let d = d.trim_end_matches('/');
    ["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib"].contains(&d)
        || d.starts_with("/usr/lib/") && !d["/usr/lib/".len()..].contains('/')
        || d.starts_with("/lib/") && !d["/lib/".len()..].contains('/')
}

fn on(var: &str) -> bool {
    matches!(env::var(var).ok().as_deref(), Some("1") | Some("ON") | Some("on") | Some("yes") | Some("true"))
}

impl Link {
    // DS4TP_RPATH=1: the library's directory as an rpath of the link;
    // otherwise a warning naming how the binary will find the library.
    fn rpath(&mut self, want_static: bool) {
        let dir = match (&self.lib_dir, want_static) {
            (Some(d), false) => d.clone(),
            _ => return,
        };
        let arg = format!("-Wl,-rpath,{}", dir.display());
        println!("cargo:rpath_arg={}", arg); // DEP_DS4TP_RPATH_ARG for direct dependents
        if on("DS4TP_RPATH") {
            // Cargo hands a build script's link arguments to its own
            // package's binaries, tests and examples only, never to a
            // dependent's: say what the dependent's build needs.
            self.link_args.push(arg.clone());
            println!(
                "cargo:warning=ds4tp-sys: DS4TP_RPATH=1 links ds4tp-sys's own targets with `{}`; \
                 cargo passes no link argument from a dependency to your binary: build it with \
                 RUSTFLAGS=\"-C link-arg={}\", or print `cargo:rustc-link-arg={}` from its build.rs",
                arg, arg, arg
            );
        } else if !loader_default(&dir) {
            let var = if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("macos") { "DYLD_LIBRARY_PATH" } else { "LD_LIBRARY_PATH" };
            println!(
                "cargo:warning=ds4tp-sys links libds4tp from {} with no rpath: run your binary \
                 with `{}={}`, or link it with RUSTFLAGS=\"-C link-arg={}\" (DS4TP_RPATH=1 does \
                 that for ds4tp-sys's own tests and examples), or use the `static` feature",
                dir.display(), var, dir.display(), arg
            );
        }
    }

    fn emit(&self) {
        for d in &self.search {
            println!("cargo:rustc-link-search=native={}", d.display());
        }
        for (kind, name) in &self.libs {
            if kind.is_empty() {
                println!("cargo:rustc-link-lib={}", name);
            } else {
                println!("cargo:rustc-link-lib={}={}", kind, name);
            }
        }
        for a in &self.link_args {
            println!("cargo:rustc-link-arg={}", a);
        }
        if let Some(d) = &self.lib_dir {
            println!("cargo:lib_dir={}", d.display());
        }
        if let Some(d) = &self.include {
            println!("cargo:include={}", d.display());
        }
    }
}

fn from_dir(dir: &Path, want_static: bool) -> Result<Link, String> {
    let names: &[&str] = if want_static { &["libds4tp.a"] } else { &["libds4tp.so", "libds4tp.dylib"] };
    if !names.iter().any(|n| dir.join(n).exists()) {
        return Err(format!("DS4TP_LIB_DIR={} holds none of {}", dir.display(), names.join(", ")));
    }
    let mut link = Link { search: vec![dir.to_path_buf()], lib_dir: Some(dir.to_path_buf()), ..Link::default() };
    let include = dir.join("../include");
    if include.join("ds4tp/ds4tp.h").exists() {
        link.include = Some(include);
    }
    if want_static {
        link.libs.push(("static", "ds4tp".into()));
        // The private libraries: from the ds4tp.pc next to the archive if
        // there is one, else the Linux default set.
        let pc = dir.join("pkgconfig");
        let private = if pc.join("ds4tp.pc").exists() {
            pkg_config(&["--static", "--libs"], Some(&pc)).ok()
        } else {
            None
        };
        match private {
            Some(out) => add_flags(&mut link, &out, true),
            None => link.libs.extend(FALLBACK_PRIVATE_LIBS.iter().map(|l| ("dylib", l.to_string()))),
        }
    } else {
        link.libs.push(("dylib", "ds4tp".into()));
    }
    Ok(link)
}

fn from_pkg_config(want_static: bool) -> Result<Link, String> {
    let args: &[&str] = if want_static { &["--static", "--libs"] } else { &["--libs"] };
    let libs = pkg_config(args, None)?;
    let mut link = Link::default();
    add_flags(&mut link, &libs, want_static);
    if let Ok(dir) = pkg_config(&["--variable=libdir"], None) {
        link.lib_dir = Some(PathBuf::from(dir.trim()));
    }
    if let Ok(dir) = pkg_config(&["--variable=includedir"], None) {
        link.include = Some(PathBuf::from(dir.trim()));
    }
    Ok(link)
}

// Runs `pkg-config ARGS ds4tp`; `extra_path` goes in front of PKG_CONFIG_PATH.
fn pkg_config(args: &[&str], extra_path: Option<&Path>) -> Result<String, String> {
    let program = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let mut cmd = Command::new(&program);
    cmd.args(args).arg("ds4tp");
    if let Some(p) = extra_path {
        let mut paths = vec![p.to_path_buf()];
        if let Some(old) = env::var_os("PKG_CONFIG_PATH") {
            paths.extend(env::split_paths(&old));
        }
        cmd.env("PKG_CONFIG_PATH", env::join_paths(paths).map_err(|e| e.to_string())?);
    }
    let shown = format!("{} {} ds4tp", program, args.join(" "));
    let out = cmd.output().map_err(|e| format!("tried `{}`: cannot run it ({})", shown, e))?;
    if !out.status.success() {
        return Err(format!(
            "tried `{}` with PKG_CONFIG_PATH={}: {}",
            shown,
            env::var("PKG_CONFIG_PATH").unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    String::from_utf8(out.stdout).map_err(|_| format!("`{}` printed non-UTF-8", shown))
}

// -L and -l flags of a pkg-config line; libds4tp itself static when asked.
fn add_flags(link: &mut Link, flags: &str, want_static: bool) {
    for f in flags.split_whitespace() {
        if let Some(d) = f.strip_prefix("-L") {
            link.search.push(PathBuf::from(d));
        } else if let Some(l) = f.strip_prefix("-l") {
            if l == "ds4tp" {
                if !link.libs.iter().any(|(_, n)| n == "ds4tp") {
                    link.libs.push((if want_static { "static" } else { "dylib" }, l.to_string()));
                }
            } else {
                link.libs.push(("", l.to_string()));
            }
        } else if f == "-pthread" {
            link.libs.push(("", "pthread".to_string()));
        } else if f.starts_with("-Wl,") {
            link.link_args.push(f.to_string());
        }
    }
}
