//! Plays the worker of the C demo's toy model against `ds4tp_demo --role
//! leader`: the leader's "bit-identical" lines prove the Rust worker
//! computed exactly what a C worker would have.
//!
//!   ds4tp_demo --role leader --port 7070 [--layers N --embd N --ffn N --tokens N]
//!   cargo run --offline --example demo_worker -- --connect 127.0.0.1:7070 [same dims]
mod toy;

use ds4tp::{Options, Pair};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut dims = toy::Dims { layers: 8, embd: 4096, ffn: 128, tokens: 32 };
    let (mut host, mut port) = (String::from("127.0.0.1"), 0u16);
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let (key, value) = (pair[0].as_str(), pair.get(1).map(String::as_str).unwrap_or(""));
        let ok = match key {
            "--connect" => match value.rsplit_once(':') {
                Some((h, p)) => {
                    host = h.to_string();
                    p.parse().map(|p| port = p).is_ok()
                }
                None => false,
            },
            "--layers" => value.parse().map(|v| dims.layers = v).is_ok(),
            "--embd" => value.parse().map(|v| dims.embd = v).is_ok(),
            "--ffn" => value.parse().map(|v| dims.ffn = v).is_ok(),
            "--tokens" => value.parse().map(|v| dims.tokens = v).is_ok(),
            _ => false,
        };
        if !ok {
            eprintln!("usage: demo_worker --connect HOST:PORT [--layers N] [--embd N] [--ffn N] [--tokens N]");
            return ExitCode::from(2);
        }
    }
    if port == 0 {
        eprintln!("demo_worker: --connect HOST:PORT is required");
        return ExitCode::from(2);
    }
    let result = Pair::new(&Options::worker(&host, port), &toy::identity(&dims)).and_then(|mut tp| {
        let outcome = toy::run(&mut tp, &dims)?;
        Ok((outcome, tp.transport()))
    });
    match result {
        Ok((o, transport)) => {
            println!(
                "rust worker: {} tokens over {}; reference {}, leader {}",
                dims.tokens,
                transport.name(),
                if o.mismatches == 0 { "bit-identical" } else { "MISMATCH" },
                if o.same_as_peer { "bit-identical" } else { "MISMATCH" }
            );
            if o.mismatches == 0 && o.same_as_peer {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("demo_worker: {}", e);
            ExitCode::FAILURE
        }
    }
}
