//! `metralectl completions SHELL`: completions generated from the clap definitions, with recipe
//! and engine names completed where a command takes one (bash, zsh and fish: `metralectl list
//! --names` asked at completion time, so the user's own recipes complete too).

use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::{Cli, CompletionsArgs};
use crate::printer::Printer;

/// The commands whose first argument is a recipe (or engine) name.
const TAKES_A_NAME: &str = "run show pull chat top stop logs";

pub fn completions(args: &CompletionsArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "metralectl", &mut script);
    let mut script = String::from_utf8_lossy(&script).into_owned();
    if args.shell == Shell::Zsh {
        script = zsh_names(&script);
    }
    script.push_str(&names(args.shell));
    printer.raw(script.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// zsh: the NAME and ENGINE arguments complete from `metralectl list --names` (clap offers
/// files there), through a function defined before the script's last lines call it.
fn zsh_names(script: &str) -> String {
    const FUNCTION: &str = "(( $+functions[_metralectl_names] )) ||
_metralectl_names() {
    local names; names=(${(f)\"$(metralectl list --names 2>/dev/null)\"})
    _describe -t names 'recipe or engine' names
}

";
    let mut out = String::with_capacity(script.len() + FUNCTION.len());
    for line in script.split_inclusive('\n') {
        let spec = line.trim_start_matches(['\'', '*', ':']);
        if line.starts_with('\'')
            && ["name -- ", "engine -- ", "engines -- "]
                .iter()
                .any(|p| spec.starts_with(p))
        {
            out.push_str(&line.replacen(":_default'", ":_metralectl_names'", 1));
        } else {
            if line.starts_with("if [ \"$funcstack[1]\" = \"_metralectl\" ]") {
                out.push_str(FUNCTION);
            }
            out.push_str(line);
        }
    }
    out
}

/// What completes names, after clap's script.
fn names(shell: Shell) -> String {
    let cases = TAKES_A_NAME.replace(' ', "|");
    match shell {
        Shell::Bash => format!(
            r#"
# Recipe and engine names where a command takes one (`metralectl list --names`).
_metralectl_names() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}"
    if [[ ${{COMP_CWORD}} -eq 2 && "${{cur}}" != -* ]]; then
        case "${{COMP_WORDS[1]}}" in
            {cases})
                COMPREPLY=( $(compgen -W "$(metralectl list --names 2>/dev/null)" -- "${{cur}}") )
                return 0 ;;
        esac
    fi
    _metralectl "$@"
}}
complete -F _metralectl_names -o nosort -o bashdefault -o default metralectl
"#
        ),
        Shell::Fish => format!(
            r#"
# Recipe and engine names where a command takes one (`metralectl list --names`).
complete -c metralectl -n "__fish_seen_subcommand_from {TAKES_A_NAME}" -f -a "(metralectl list --names 2>/dev/null)"
"#
        ),
        _ => String::new(),
    }
}
