# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_metralectl_global_optspecs
    string join \n q/quiet h/help V/version
end

function __fish_metralectl_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_metralectl_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_metralectl_using_subcommand
    set -l cmd (__fish_metralectl_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c metralectl -n "__fish_metralectl_needs_command" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_needs_command" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_needs_command" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "list" -d 'List the recipes: built-in ones and yours'
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "show" -d 'Show everything a recipe pins, and whether it fits this machine'
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "run" -d 'Start a recipe (for now: print the exact commands with --print)'
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "top" -d 'Live dashboard of a running engine: throughput, batch, KV cache, every request'
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "completions" -d 'Write shell completions to stdout'
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c metralectl -n "__fish_metralectl_using_subcommand list" -l vendor -d 'Only recipes whose checkpoint comes from this vendor (e.g. Qwen, NVIDIA)' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand list" -l family -d 'Only recipes of this model family (e.g. qwen3, qwen3.6)' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand list" -l json -d 'Print JSON (see docs/recipes.md for its fields)'
complete -c metralectl -n "__fish_metralectl_using_subcommand list" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand list" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand list" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand show" -l json -d 'Print JSON (see docs/recipes.md for its fields)'
complete -c metralectl -n "__fish_metralectl_using_subcommand show" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand show" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand show" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand run" -l port -d 'Serve on this port instead of the recipe\'s' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand run" -l print -d 'Print the docker and native commands instead of running anything'
complete -c metralectl -n "__fish_metralectl_using_subcommand run" -l json -d 'With --print: print JSON (see docs/recipes.md for its fields)'
complete -c metralectl -n "__fish_metralectl_using_subcommand run" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand run" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand run" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand top" -l socket -d 'The engine\'s metrics socket [default: the one `met serve` makes for --port]' -r -F
complete -c metralectl -n "__fish_metralectl_using_subcommand top" -l url -d 'Read `URL/v1/metrics/stream` instead (a remote engine or a container)' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand top" -l api-key -d 'The engine\'s API key, for --url' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand top" -l port -d 'The engine\'s port, to find its default socket [default: 8000]' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand top" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand top" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand top" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand completions" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand completions" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand completions" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top completions help" -f -a "list" -d 'List the recipes: built-in ones and yours'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top completions help" -f -a "show" -d 'Show everything a recipe pins, and whether it fits this machine'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top completions help" -f -a "run" -d 'Start a recipe (for now: print the exact commands with --print)'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top completions help" -f -a "top" -d 'Live dashboard of a running engine: throughput, batch, KV cache, every request'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top completions help" -f -a "completions" -d 'Write shell completions to stdout'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top completions help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
