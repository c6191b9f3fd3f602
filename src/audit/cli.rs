//! The `portcullis audit` subcommands, for the command line: arguments
//! (clap), running, rendering and exit statuses live here, so that
//! `src/main.rs` only dispatches.

use std::io::Write;
use std::path::PathBuf;

use clap::Subcommand;

use super::{grants, verify_against, Head};

/// `portcullis audit …`
#[derive(Debug, Subcommand)]
pub enum AuditCmd {
    /// Check a log's hash chain: exit 0 intact, 1 tampered (naming the first
    /// bad line), 125 the log cannot be read.
    Verify {
        /// The log.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// A head recorded earlier (`SEQ:HASH`, as a previous verify printed
        /// it): the log must reach it and hold that record there. Finds
        /// records cut off at the end, an edited last record, a replaced log.
        #[arg(long, value_name = "SEQ:HASH")]
        head: Option<Head>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Per path: who was granted write access, how many writes were refused
    /// there and by which rule; and the refused actions. Exit 0, or 125 when
    /// the log cannot be read.
    Grants {
        /// The log.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// The exit status for a log that cannot be read.
const CANNOT_READ: u8 = 125;

impl AuditCmd {
    /// Run the subcommand, writing the report to `out` and errors to `err`;
    /// returns the exit status.
    pub fn run(&self, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
        let (text, json, code) = match self {
            AuditCmd::Verify { file, head, json } => match verify_against(file, head.as_ref()) {
                Ok(r) => (r.render(), *json, serde_json::to_string_pretty(&r).map(|j| (j, r.exit_code()))),
                Err(e) => return fail(err, &e),
            },
            AuditCmd::Grants { file, json } => match grants(file) {
                Ok(r) => (r.render(), *json, serde_json::to_string_pretty(&r).map(|j| (j, r.exit_code()))),
                Err(e) => return fail(err, &e),
            },
        };
        let (j, status) = match code {
            Ok(x) => x,
            Err(e) => return fail(err, &e),
        };
        let written = if json { writeln!(out, "{j}") } else { write!(out, "{text}") };
        match written {
            Ok(()) => status,
            Err(_) => CANNOT_READ,
        }
    }
}

fn fail(err: &mut dyn Write, e: &dyn std::error::Error) -> u8 {
    let _ = writeln!(err, "portcullis: {}", crate::error_chain(e));
    CANNOT_READ
}
