//! Errors meant for the person at the terminal, and the hint printed under any error.

use crate::recipe::RecipeError;

/// An error with the fix spelled out.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct UserError {
    pub message: String,
    pub hint: String,
}

impl UserError {
    pub fn new(message: impl Into<String>, hint: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            hint: hint.into(),
        }
    }
}

/// The hint of the first error in the chain that carries one.
pub fn hint_for(err: &anyhow::Error) -> Option<String> {
    // A `UserError` attached with `.context(..)` is found by downcasting the error itself;
    // the chain walk finds those that are sources.
    if let Some(e) = err.downcast_ref::<UserError>() {
        return Some(e.hint.clone());
    }
    err.chain().find_map(|cause| {
        if let Some(e) = cause.downcast_ref::<UserError>() {
            Some(e.hint.clone())
        } else {
            cause.downcast_ref::<RecipeError>().map(RecipeError::hint)
        }
    })
}

/// Whether the error is stdout closing under us (`metralectl list | head`), which is no error.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
