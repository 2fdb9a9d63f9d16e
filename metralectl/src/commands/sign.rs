//! `metralectl sign FILE --key KEYFILE`: a detached minisign signature, FILE.minisig, written
//! atomically. Records measured elsewhere are signed here; `scripts/release` signs SHA256SUMS
//! with it.

use std::process::ExitCode;

use anyhow::Context as _;

use crate::cli::SignArgs;
use crate::printer::Printer;
use crate::signing;

pub fn sign(args: &SignArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    let key = signing::load_secret(&args.key)?;
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {} to sign it", args.file.display()))?;
    let sig = signing::sign(&args.file, &bytes, &key, args.trusted_comment.as_deref())?;
    printer.line(format!("wrote {}", sig.display()))?;
    Ok(ExitCode::SUCCESS)
}
