//! Turning a recipe's checkpoint into something to run: a Hub repository, or a directory found
//! on this machine.
//!
//! A relative `path` in a user recipe is relative to the directory that holds the recipe file.
//! In a built-in recipe (the `demo`), it is looked for, in order:
//! 1. in the current directory and each of its parents (running from a checkout of the repository);
//! 2. beside the `metralectl` executable, in its parent directory, and in
//!    `<parent>/share/metrale` (an install that put the binary in `<prefix>/bin` and the
//!    repository's `models/` in `<prefix>/share/metrale/models`);
//! 3. for `models/demo` alone, the copy shipped inside `metralectl`, written to the data
//!    directory (`demo_model.rs`): the demo runs from any installed launcher.

use std::env;
use std::path::{Path, PathBuf};

use super::load::{Entry, Source};
use super::schema::CommitHash;

#[derive(Debug, Clone)]
pub enum Location {
    Hub {
        repo: String,
        revision: Option<CommitHash>,
    },
    Local(LocalCheckpoint),
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct LocalCheckpoint {
    /// The path as the recipe writes it.
    pub written: String,
    /// The directory found, absolute; `None` when it is not on this machine.
    pub found: Option<PathBuf>,
    /// Every place looked in, in order.
    pub searched: Vec<PathBuf>,
}

impl LocalCheckpoint {
    /// Why it is missing and what to do, for a warning.
    pub fn missing_note(&self) -> String {
        format!(
            "checkpoint directory {} was not found (looked in the current directory and its parents, and \
             beside the metralectl executable); run from a checkout of the repository that has it, or copy \
             the recipe into your config directory and give an absolute `checkpoint.path`",
            self.written
        )
    }
}

/// Where the checkpoint of `entry` is.
pub fn locate(entry: &Entry) -> Location {
    let ck = &entry.recipe.checkpoint;
    match (&ck.repo, &ck.path) {
        (Some(repo), _) => Location::Hub {
            repo: repo.clone(),
            revision: ck.revision.clone(),
        },
        (None, Some(path)) => Location::Local(find_local(path, &entry.source)),
        // Validation guarantees one of the two; an empty path is reported as not found.
        (None, None) => Location::Local(find_local("", &entry.source)),
    }
}

fn find_local(written: &str, source: &Source) -> LocalCheckpoint {
    let path = Path::new(written);
    let candidates: Vec<PathBuf> = if written.is_empty() {
        Vec::new()
    } else if path.is_absolute() {
        vec![path.to_owned()]
    } else {
        match source {
            Source::User(file) => file
                .parent()
                .map(|dir| dir.join(path))
                .into_iter()
                .collect(),
            Source::BuiltIn => builtin_roots()
                .into_iter()
                .map(|root| root.join(path))
                .collect(),
        }
    };
    let mut found = candidates
        .iter()
        .find(|c| c.is_dir())
        .map(|c| std::fs::canonicalize(c).unwrap_or_else(|_| c.clone()));
    if found.is_none() && matches!(source, Source::BuiltIn) && written == crate::demo_model::WRITTEN
    {
        // Where it cannot be written, the missing-checkpoint note and refusal follow.
        found = crate::demo_model::materialize().ok();
    }
    LocalCheckpoint {
        written: written.to_owned(),
        found,
        searched: candidates,
    }
}

/// Directories a built-in recipe's relative path may be relative to, in search order.
fn builtin_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Ok(cwd) = env::current_dir() {
        roots.extend(cwd.ancestors().map(Path::to_path_buf));
    }
    if let Some(exe_dir) = env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        let parent = exe_dir.parent().map(Path::to_path_buf);
        roots.push(exe_dir);
        if let Some(parent) = parent {
            roots.push(parent.clone());
            roots.push(parent.join("share").join("metrale"));
        }
    }
    roots
}
