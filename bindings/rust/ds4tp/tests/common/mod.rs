//! Shared test helpers: the C programs the tests pair with, run as child
//! processes that are always reaped (killed after a deadline).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// ctest sets DS4TP_PEER / DS4TP_DEMO; by hand, a build tree of the
/// repository is searched.
pub fn program(var: &str, rel: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        return PathBuf::from(p);
    }
    // The repository root: the first ancestor holding include/ds4tp.
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.ancestors().find(|d| d.join("include/ds4tp/ds4tp.h").exists()).unwrap_or(&manifest);
    for build in ["build", "build-bind"] {
        let p = root.join(build).join(rel);
        if p.exists() {
            return p;
        }
    }
    panic!("set {} to the path of {} (ctest does)", var, rel);
}

pub fn peer_exe() -> PathBuf {
    program("DS4TP_PEER", "tests/bindings/ds4tp_peer")
}

pub fn demo_exe() -> PathBuf {
    program("DS4TP_DEMO", "examples/ds4tp_demo")
}

pub struct Peer {
    child: Option<Child>,
    stdout: Option<BufReader<ChildStdout>>,
    stderr: Option<BufReader<ChildStderr>>,
    early_err: String,
}

pub struct Finished {
    pub ok: bool,
    pub out: String,
    pub err: String,
}

impl Peer {
    pub fn spawn(exe: &PathBuf, args: &[String]) -> Peer {
        let child = Command::new(exe)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {}", exe.display(), e));
        Peer { child: Some(child), stdout: None, stderr: None, early_err: String::new() }
    }

    /// A C leader's first line: "port P".
    pub fn read_port(&mut self) -> u16 {
        let child = self.child.as_mut().unwrap();
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        self.stdout = Some(reader);
        line.strip_prefix("port ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("peer printed {:?} instead of its port", line))
    }

    /// Reads stderr lines until one contains `needle` (true) or the stream
    /// ends because the process exited (false).
    pub fn wait_stderr(&mut self, needle: &str) -> bool {
        if self.stderr.is_none() {
            let err = self.child.as_mut().unwrap().stderr.take().unwrap();
            self.stderr = Some(BufReader::new(err));
        }
        let reader = self.stderr.as_mut().unwrap();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return false,
                Ok(_) => {
                    self.early_err.push_str(&line);
                    if line.contains(needle) {
                        return true;
                    }
                }
            }
        }
    }

    /// Waits (at most 90 s, then kills) and collects the output.
    pub fn finish(mut self) -> Finished {
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(90);
        let mut killed = false;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                killed = true;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut out = String::new();
        if let Some(mut r) = self.stdout.take() {
            let _ = r.read_to_string(&mut out);
        } else if let Some(mut s) = child.stdout.take() {
            let _ = s.read_to_string(&mut out);
        }
        let mut err = std::mem::take(&mut self.early_err);
        if let Some(mut r) = self.stderr.take() {
            let _ = r.read_to_string(&mut err);
        } else if let Some(mut s) = child.stderr.take() {
            let _ = s.read_to_string(&mut err);
        }
        if killed {
            err.push_str("\n(killed after 90 s)");
        }
        Finished { ok: status.success() && !killed, out, err }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A loopback port nobody listens on right now, for C leaders that need
/// --port (see start_demo_leader for when another process takes it first).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts `ds4tp_demo --role leader --port P <args>` on a free port and
/// returns it once it listens (its INFO log says so); a port taken in
/// between makes the demo exit, and another port is tried.
pub fn start_demo_leader(args: &[String]) -> (Peer, u16) {
    let mut last = String::new();
    for _ in 0..5 {
        let port = free_port();
        let mut a = vec!["--role".to_string(), "leader".into(), "--port".into(), port.to_string()];
        a.extend(args.iter().cloned());
        let mut demo = Peer::spawn(&demo_exe(), &a);
        if demo.wait_stderr("listening on") {
            return (demo, port);
        }
        last = demo.finish().err;
    }
    panic!("ds4tp_demo did not listen after 5 ports:\n{}", last);
}

pub fn args(list: &[&dyn ToString]) -> Vec<String> {
    list.iter().map(|a| a.to_string()).collect()
}
