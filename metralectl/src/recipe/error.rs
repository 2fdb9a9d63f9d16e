//! Everything that can go wrong finding, reading or checking a recipe.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum RecipeError {
    #[error("cannot read the recipe directory {}: {source}", path.display())]
    ReadDir { path: PathBuf, source: io::Error },

    #[error("cannot read recipe file {}: {source}", path.display())]
    ReadFile { path: PathBuf, source: io::Error },

    #[error("recipe file {file} is not valid: {message}")]
    Parse { file: String, message: String },

    #[error("recipe file {file}: field `{field}`: {problem}")]
    Invalid {
        file: String,
        field: String,
        problem: String,
    },

    #[error("no recipe named {name:?}")]
    Unknown {
        name: String,
        suggestions: Vec<String>,
    },
}

impl RecipeError {
    /// What to do about it, printed under the error.
    pub fn hint(&self) -> String {
        match self {
            Self::ReadDir { .. } | Self::ReadFile { .. } => {
                "check that the path exists and is readable, or point METRALE_CONFIG_DIR at \
                 another config directory"
                    .to_owned()
            }
            Self::Parse { .. } | Self::Invalid { .. } => {
                "fix the field named above; docs/recipes.md describes every field of a recipe"
                    .to_owned()
            }
            Self::Unknown { suggestions, .. } if !suggestions.is_empty() => format!(
                "did you mean {}? `metralectl list` shows every recipe",
                suggestions.join(", ")
            ),
            Self::Unknown { .. } => "`metralectl list` shows every recipe".to_owned(),
        }
    }
}
