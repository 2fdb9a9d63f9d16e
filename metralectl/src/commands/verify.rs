//! `metralectl verify FILE [--sig SIGFILE] [--pubkey PUBKEY]`: checks a minisign signature
//! against the trusted keys (see `signing.rs`) and says exactly what failed, or who signed and
//! the signed comment. A benchmark record also gets its summary.

use std::path::Path;
use std::process::ExitCode;

use metrale_protocol::bench::Record;
use serde::Serialize;

use crate::cli::VerifyArgs;
use crate::printer::Printer;
use crate::signing::{self, TrustedKey};

#[derive(Debug, Serialize)]
struct VerifyJson<'a> {
    file: &'a Path,
    verified: bool,
    key: &'a str,
    key_id: &'a str,
    trusted_comment: &'a str,
    /// The record's date, when the file is a benchmark record.
    record_date: Option<&'a str>,
}

pub fn verify(args: &VerifyArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    let trusted = match &args.pubkey {
        Some(path) => vec![TrustedKey::load(path)?],
        None => signing::builtin_keys()?,
    };
    let (bytes, ok) = signing::verify_file(&args.file, args.sig.as_deref(), &trusted)?;
    let record = serde_json::from_slice::<Record>(&bytes).ok();
    if printer.json_mode() {
        printer.json(&VerifyJson {
            file: &args.file,
            verified: true,
            key: &ok.key_name,
            key_id: &ok.key_id,
            trusted_comment: &ok.trusted_comment,
            record_date: record.as_ref().map(|r| r.date.as_str()),
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    let what = record.map_or_else(String::new, |r| {
        format!("; a record of {} rungs measured {}", r.rungs.len(), r.date)
    });
    printer.line(format!(
        "{}: signature OK, signed by {} (key {}); trusted comment: {}{what}",
        args.file.display(),
        ok.key_name,
        ok.key_id,
        ok.trusted_comment,
    ))?;
    Ok(ExitCode::SUCCESS)
}
