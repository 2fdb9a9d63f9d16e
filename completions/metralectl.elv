
use builtin;
use str;

set edit:completion:arg-completer[metralectl] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'metralectl'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'metralectl'= {
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
            cand list 'List the recipes: built-in ones and yours'
            cand show 'Show everything a recipe pins, and whether it fits this machine'
            cand run 'Start a recipe (for now: print the exact commands with --print)'
            cand top 'Live dashboard of a running engine: throughput, batch, KV cache, every request'
            cand completions 'Write shell completions to stdout'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'metralectl;list'= {
            cand --vendor 'Only recipes whose checkpoint comes from this vendor (e.g. Qwen, NVIDIA)'
            cand --family 'Only recipes of this model family (e.g. qwen3, qwen3.6)'
            cand --json 'Print JSON (see docs/recipes.md for its fields)'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;show'= {
            cand --json 'Print JSON (see docs/recipes.md for its fields)'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;run'= {
            cand --port 'Serve on this port instead of the recipe''s'
            cand --print 'Print the docker and native commands instead of running anything'
            cand --json 'With --print: print JSON (see docs/recipes.md for its fields)'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;top'= {
            cand --socket 'The engine''s metrics socket [default: the one `met serve` makes for --port]'
            cand --url 'Read `URL/v1/metrics/stream` instead (a remote engine or a container)'
            cand --api-key 'The engine''s API key, for --url'
            cand --port 'The engine''s port, to find its default socket [default: 8000]'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;completions'= {
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;help'= {
            cand list 'List the recipes: built-in ones and yours'
            cand show 'Show everything a recipe pins, and whether it fits this machine'
            cand run 'Start a recipe (for now: print the exact commands with --print)'
            cand top 'Live dashboard of a running engine: throughput, batch, KV cache, every request'
            cand completions 'Write shell completions to stdout'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'metralectl;help;list'= {
        }
        &'metralectl;help;show'= {
        }
        &'metralectl;help;run'= {
        }
        &'metralectl;help;top'= {
        }
        &'metralectl;help;completions'= {
        }
        &'metralectl;help;help'= {
        }
    ]
    $completions[$command]
}
