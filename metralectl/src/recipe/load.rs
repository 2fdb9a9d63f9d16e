//! Loading the registry: the recipes built into the binary, then the user's, which replace ours
//! by name.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use super::error::RecipeError;
use super::schema::Recipe;
use super::validate::validate;

/// Every `recipes/*.toml` of the repository, embedded at build time by `build.rs`:
/// (file name, contents), sorted by file name.
pub const BUILTIN_RECIPES: &[(&str, &str)] =
    include!(concat!(env!("OUT_DIR"), "/builtin_recipes.rs"));

/// Where a recipe came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    BuiltIn,
    User(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BuiltIn => f.write_str("built-in"),
            Self::User(path) => write!(f, "{}", path.display()),
        }
    }
}

/// One loaded, validated recipe.
#[derive(Debug, Clone)]
pub struct Entry {
    pub recipe: Recipe,
    pub source: Source,
    /// A user recipe that replaces a built-in one of the same name.
    pub overrides_builtin: bool,
}

impl Entry {
    /// The source as `list` and `show` say it.
    pub fn source_label(&self) -> String {
        if self.overrides_builtin {
            format!("{} (overrides built-in)", self.source)
        } else {
            self.source.to_string()
        }
    }
}

/// All recipes, sorted by name.
#[derive(Debug)]
pub struct Registry {
    entries: Vec<Entry>,
}

impl Registry {
    /// The built-in recipes, then every `*.toml` in `user_dir` (when it exists) on top.
    pub fn load(user_dir: Option<&Path>) -> Result<Self, RecipeError> {
        let mut entries = Vec::with_capacity(BUILTIN_RECIPES.len());
        for (file_name, text) in BUILTIN_RECIPES {
            let label = format!("recipes/{file_name} (built-in)");
            let recipe = parse(text, file_name, &label)?;
            entries.push(Entry {
                recipe,
                source: Source::BuiltIn,
                overrides_builtin: false,
            });
        }
        if let Some(dir) = user_dir {
            for path in user_recipe_files(dir)? {
                let text = fs::read_to_string(&path).map_err(|source| RecipeError::ReadFile {
                    path: path.clone(),
                    source,
                })?;
                let file_name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let recipe = parse(&text, &file_name, &path.display().to_string())?;
                let user = Entry {
                    recipe,
                    source: Source::User(path),
                    overrides_builtin: false,
                };
                match entries
                    .iter_mut()
                    .find(|e| e.recipe.name == user.recipe.name)
                {
                    Some(existing) => {
                        *existing = Entry {
                            overrides_builtin: true,
                            ..user
                        }
                    }
                    None => entries.push(user),
                }
            }
        }
        entries.sort_by(|a, b| a.recipe.name.cmp(&b.recipe.name));
        Ok(Self { entries })
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The recipe called `name`, or an error that suggests the nearest names.
    pub fn get(&self, name: &str) -> Result<&Entry, RecipeError> {
        self.entries
            .iter()
            .find(|e| e.recipe.name == name)
            .ok_or_else(|| RecipeError::Unknown {
                name: name.to_owned(),
                suggestions: suggest(name, self.entries.iter().map(|e| e.recipe.name.as_str())),
            })
    }
}

/// Up to three names close to `wanted`: those that contain it, or are near it by Jaro-Winkler
/// similarity, closest first.
fn suggest<'a>(wanted: &str, names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let wanted = wanted.to_lowercase();
    let mut scored: Vec<(f64, &str)> = names
        .filter_map(|name| {
            let score = strsim::jaro_winkler(&wanted, name);
            let contains = !wanted.is_empty() && name.contains(wanted.as_str());
            (contains || score >= 0.85)
                .then_some((if contains { 1.0 + score } else { score }, name))
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    scored
        .into_iter()
        .take(3)
        .map(|(_, name)| name.to_owned())
        .collect()
}

/// The `*.toml` files directly in `dir`, sorted; none when `dir` does not exist.
fn user_recipe_files(dir: &Path) -> Result<Vec<PathBuf>, RecipeError> {
    let read_dir = match fs::read_dir(dir) {
        Ok(read_dir) => read_dir,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(RecipeError::ReadDir {
                path: dir.to_owned(),
                source,
            });
        }
    };
    let mut files = Vec::new();
    for entry in read_dir {
        let path = entry
            .map_err(|source| RecipeError::ReadDir {
                path: dir.to_owned(),
                source,
            })?
            .path();
        if path.extension().is_some_and(|ext| ext == "toml") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Parse and validate one recipe file. `label` names the file in errors.
fn parse(text: &str, file_name: &str, label: &str) -> Result<Recipe, RecipeError> {
    let recipe: Recipe = toml::from_str(text).map_err(|e| RecipeError::Parse {
        file: label.to_owned(),
        message: e.to_string().trim_end().to_owned(),
    })?;
    let stem = file_name.strip_suffix(".toml").unwrap_or(file_name);
    validate(&recipe, stem, label)?;
    Ok(recipe)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::capacity::{DEFAULT_GPU_MEMORY_UTILIZATION, GIB, estimate};

    fn repo_recipe_files() -> Vec<(String, String)> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join("recipes");
        let mut files: Vec<(String, String)> = fs::read_dir(&dir)
            .expect("recipes/ is readable")
            .map(|e| e.expect("directory entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .map(|p| {
                let name = p
                    .file_name()
                    .expect("file name")
                    .to_string_lossy()
                    .into_owned();
                (name, fs::read_to_string(&p).expect("recipe is readable"))
            })
            .collect();
        files.sort();
        files
    }

    #[test]
    fn every_recipe_file_is_embedded_unchanged_and_validates() {
        let on_disk = repo_recipe_files();
        let embedded: Vec<(String, String)> = BUILTIN_RECIPES
            .iter()
            .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
            .collect();
        assert!(!on_disk.is_empty());
        assert_eq!(
            on_disk, embedded,
            "the binary embeds a different set of recipes than recipes/ holds"
        );
        let registry = Registry::load(None).expect("every built-in recipe validates");
        assert_eq!(registry.entries().len(), on_disk.len());
        assert!(
            registry
                .entries()
                .iter()
                .all(|e| e.source == Source::BuiltIn)
        );
    }

    #[test]
    fn the_recipes_users_ask_for_are_shipped() {
        let registry = Registry::load(None).expect("built-in recipes load");
        for name in [
            "qwen3.6-27b-fp8",
            "qwen3.6-27b-fp8-mtp",
            "qwen3.6-27b-nvfp4",
            "qwen3.6-27b-nvfp4-prefill-record",
            "qwen3.6-27b-nvfp4-unsloth",
            "qwen3.6-35b-a3b-fp8-bf16head",
            "qwen3.6-35b-a3b-fp8-mtp",
            "qwen3.6-35b-a3b-fp8-nvfp4head",
            "qwen3.6-35b-a3b-fp8-nvfp4head-experts-nvfp4",
            "qwen3.6-35b-a3b-fp8-nvfp4head-experts-nvfp4-gate-up",
            "qwen3.6-35b-a3b-nvfp4",
            "qwen3.6-35b-a3b-nvfp4-declared",
            "qwen3-0.6b",
            "qwen3-8b",
            "demo",
        ] {
            assert!(registry.get(name).is_ok(), "{name} is missing");
        }
    }

    #[test]
    fn every_gpu_recipe_fits_the_gpu_it_asks_for() {
        let registry = Registry::load(None).expect("built-in recipes load");
        for entry in registry.entries() {
            let r = &entry.recipe;
            let Some(gib) = r.requirements.gpu_memory_gib else {
                continue;
            };
            let util = r
                .serve
                .gpu_memory_utilization
                .unwrap_or(DEFAULT_GPU_MEMORY_UTILIZATION);
            let usable = f64::from(r.requirements.gpus) * gib * util * GIB;
            let est = estimate(r);
            assert!(est.complete, "{}: the estimate is incomplete", r.name);
            assert!(
                (est.total_bytes as f64) <= usable,
                "{} needs {:.1} GiB but asks for GPUs giving {:.1} GiB",
                r.name,
                est.total_bytes as f64 / GIB,
                usable / GIB
            );
        }
    }

    /// Each built-in recipe names its architecture, and the launcher refuses exactly those
    /// the engine would refuse at load: the families without CUDA kernels and those spread
    /// over several GPUs.
    #[test]
    fn builtin_recipes_the_engine_cannot_serve_are_refused_before_download() {
        let registry = Registry::load(None).expect("built-in recipes load");
        let mut refused = Vec::new();
        for entry in registry.entries() {
            let r = &entry.recipe;
            let named = r.model.as_ref().and_then(|m| m.architecture.as_deref());
            assert!(named.is_some(), "{} names no [model] architecture", r.name);
            if let Some(why) = super::super::support::refusal(r) {
                refused.push((r.name.as_str(), why));
            }
        }
        let names: Vec<&str> = refused.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["deepseek-v3.1", "minimax-m2"], "{refused:#?}");
    }

    #[test]
    fn user_recipes_replace_builtin_ones_by_name() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let (_, builtin) = BUILTIN_RECIPES
            .iter()
            .find(|(n, _)| *n == "qwen3-8b.toml")
            .expect("qwen3-8b is built in");
        let changed = builtin.replace("max_seq_len = 8192", "max_seq_len = 1024");
        assert_ne!(&changed, builtin);
        fs::write(dir.path().join("qwen3-8b.toml"), changed).expect("write");
        fs::write(
            dir.path().join("mine.toml"),
            changed_name(builtin, "qwen3-8b", "mine"),
        )
        .expect("write");
        fs::write(dir.path().join("notes.txt"), "not a recipe").expect("write");

        let registry = Registry::load(Some(dir.path())).expect("user recipes load");
        let ours = registry.get("qwen3-8b").expect("still there");
        assert_eq!(ours.recipe.serve.max_seq_len, 1024);
        assert_eq!(ours.source, Source::User(dir.path().join("qwen3-8b.toml")));
        assert!(ours.overrides_builtin);
        let mine = registry.get("mine").expect("a new user recipe");
        assert!(!mine.overrides_builtin);
        assert_eq!(registry.entries().len(), BUILTIN_RECIPES.len() + 1);
    }

    fn changed_name(text: &str, from: &str, to: &str) -> String {
        text.replace(&format!("name = \"{from}\""), &format!("name = \"{to}\""))
    }

    #[test]
    fn a_missing_user_directory_is_no_error() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let registry =
            Registry::load(Some(&dir.path().join("absent"))).expect("absent directory is fine");
        assert_eq!(registry.entries().len(), BUILTIN_RECIPES.len());
    }

    #[test]
    fn suggestions_prefer_names_that_contain_the_query() {
        let names = ["qwen3-8b", "qwen3.6-27b-fp8", "qwen3.6-27b-nvfp4", "demo"];
        assert_eq!(
            suggest("27b-fp8", names.into_iter()),
            vec!["qwen3.6-27b-fp8"]
        );
        assert_eq!(suggest("qwen3-8", names.into_iter())[0], "qwen3-8b");
        assert!(suggest("llama", names.into_iter()).is_empty());
    }

    #[test]
    fn suggestions_catch_a_typo() {
        let names = ["qwen3-8b", "qwen3-0.6b", "demo"];
        assert_eq!(suggest("demi", names.into_iter()), vec!["demo"]);
        assert_eq!(suggest("qwen3-8c", names.into_iter())[0], "qwen3-8b");
    }
}
