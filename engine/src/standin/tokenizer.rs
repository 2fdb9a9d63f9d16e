//! STAND-IN for `crate::tokenizer` (tokenizer branch): `tokenizer.json` through the
//! `tokenizers` crate, nothing more.

use std::path::Path;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TokenizerError(pub String);

pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    special: Vec<u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer").finish_non_exhaustive()
    }
}

impl Tokenizer {
    pub fn from_dir(dir: &Path) -> Result<Tokenizer, TokenizerError> {
        let path = dir.join("tokenizer.json");
        let inner = tokenizers::Tokenizer::from_file(&path)
            .map_err(|e| TokenizerError(format!("failed to load {}: {e}", path.display())))?;
        let special = inner
            .get_added_tokens_decoder()
            .iter()
            .filter(|(_, t)| t.special)
            .map(|(id, _)| *id)
            .collect();
        Ok(Tokenizer { inner, special })
    }

    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizerError> {
        self.inner
            .encode(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TokenizerError(e.to_string()))
    }

    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| TokenizerError(e.to_string()))
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    pub fn is_special(&self, id: u32) -> bool {
        self.special.contains(&id)
    }
}
