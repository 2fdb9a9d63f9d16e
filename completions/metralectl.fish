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
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "run" -d 'Start a recipe: in a container when Docker and the NVIDIA runtime are ready, else natively'
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "top" -d 'Live dashboard of a running engine: throughput, batch, KV cache, every request'
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "chat" -d 'Talk to a model in the terminal: a running engine, or a recipe started for it'
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "doctor" -d 'Check this machine: Docker, NVIDIA runtime and driver, disk, port, shared memory, Hub token'
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "ps" -d 'List the running engines'
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "stop" -d 'Stop engines (a container is removed)'
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "logs" -d 'Show an engine\'s log'
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "pull" -d 'Fetch a recipe\'s engine image and Hub checkpoint ahead of time'
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "completions" -d 'Write shell completions to stdout'
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "bench" -d 'Measure an OpenAI-compatible server over a concurrency ladder (see docs/benchmarks.md)'
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "sign" -d 'Sign a file (a release\'s SHA256SUMS, a benchmark record): writes FILE.minisig'
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "verify" -d 'Check a signed file (a release\'s SHA256SUMS, a benchmark record) against a trusted key'
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "self" -d 'Update or remove this installation of metralectl and met'
complete -c metralectl -n "__fish_metralectl_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c metralectl -n "__fish_metralectl_using_subcommand list" -l vendor -d 'Only recipes whose checkpoint comes from this vendor (e.g. Qwen, NVIDIA)' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand list" -l family -d 'Only recipes of this model family (e.g. qwen3, qwen3.6)' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand list" -l json -d 'Print JSON (see docs/recipes.md for its fields)'
complete -c metralectl -n "__fish_metralectl_using_subcommand list" -l names -d 'Print only the names, one a line (shell completion reads them)'
complete -c metralectl -n "__fish_metralectl_using_subcommand list" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand list" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand list" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand show" -l json -d 'Print JSON (see docs/recipes.md for its fields)'
complete -c metralectl -n "__fish_metralectl_using_subcommand show" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand show" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand show" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand run" -l port -d 'Serve on this port instead of the recipe\'s' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand run" -l host -d 'Address to serve on (in a container: the host side of the port binding). The default keeps the engine to this machine; 0.0.0.0 opens it to every network it is on' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand run" -l gpus -d 'GPUs to give the engine: `all`, or indices like `0,1`' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand run" -l api-key -d 'Require `Authorization: Bearer KEY` on the API (passed to the engine as MET_API_KEY)' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand run" -l name -d 'Name of the engine for ps/stop/logs [default: the recipe name]' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand run" -l image -d 'Use this engine image instead of the recipe\'s (e.g. one built locally)' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand run" -l ready-timeout -d 'Give up if the engine is not ready after this many seconds' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand run" -l print -d 'Print the docker and native commands instead of running anything'
complete -c metralectl -n "__fish_metralectl_using_subcommand run" -l native -d 'Run `met` as a native process (found beside metralectl, then on PATH)'
complete -c metralectl -n "__fish_metralectl_using_subcommand run" -l docker -d 'Run the engine image in a container through the Docker Engine'
complete -c metralectl -n "__fish_metralectl_using_subcommand run" -s d -l detach -d 'Return once the engine is ready and leave it running (`metralectl stop` ends it)'
complete -c metralectl -n "__fish_metralectl_using_subcommand run" -l skip-checks -d 'Start even when this machine lacks the GPU, memory or compute capability the recipe asks for, or the engine lacks what its model needs on its device (the checks run before any download)'
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
complete -c metralectl -n "__fish_metralectl_using_subcommand chat" -l url -d 'Talk to this OpenAI-compatible server instead (e.g. http://127.0.0.1:8000)' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand chat" -l api-key -d 'The engine\'s API key' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand chat" -l model -d 'The model name to send [default: the first the server\'s /v1/models lists]' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand chat" -l system -d 'A system message that starts the conversation (and survives /reset)' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand chat" -l max-tokens -d 'Most tokens a reply may have [default: the engine\'s]' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand chat" -l temperature -d 'Sampling temperature [default: the model\'s]' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand chat" -l port -d 'When the recipe is started for the chat: serve on this port instead of the recipe\'s' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand chat" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand chat" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand chat" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand doctor" -l port -d 'Check this port instead of the default (8000)' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand doctor" -l json -d 'Print JSON: each check\'s id, status, finding and fix'
complete -c metralectl -n "__fish_metralectl_using_subcommand doctor" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand doctor" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand doctor" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand ps" -l json -d 'Print JSON'
complete -c metralectl -n "__fish_metralectl_using_subcommand ps" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand ps" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand ps" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand stop" -l all -d 'Stop every running engine'
complete -c metralectl -n "__fish_metralectl_using_subcommand stop" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand stop" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand stop" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand logs" -l tail -d 'Only the last N lines' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand logs" -s f -l follow -d 'Keep printing new lines until the engine stops (or Ctrl-C)'
complete -c metralectl -n "__fish_metralectl_using_subcommand logs" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand logs" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand logs" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand pull" -l image -d 'Pull this image instead of the recipe\'s' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand pull" -l no-image -d 'Only the checkpoint (for native runs): do not pull the engine image'
complete -c metralectl -n "__fish_metralectl_using_subcommand pull" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand pull" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand pull" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand completions" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand completions" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand completions" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l url -d 'Base URL of the OpenAI-compatible server (e.g. http://127.0.0.1:8000)' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l model -d 'The model name to send [default: the first one the server\'s /v1/models lists]' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l concurrency -d 'The ladder: concurrent requests of each rung, comma-separated' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l isl -d 'Prompt tokens a request, exactly' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l osl -d 'Generated tokens a request, exactly' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l reps -d 'Timed repetitions a rung' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l warmup -d 'Untimed repetitions before the timed ones, a rung' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l seed -d 'Seed of the prompts and of the sampler' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l temperature -d 'Sampling temperature' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l api-key -d 'The server\'s API key (sent as `Authorization: Bearer KEY`)' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l against -d 'Run the same ladder against this second server too, alternating rep by rep, and report the ratio a rung' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l against-model -d 'The model name to send to --against [default: the first one its /v1/models lists]' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l endpoint -d 'Which API to drive' -r -f -a "chat\t'`POST /v1/chat/completions`, the prompt as one user message'
completions\t'`POST /v1/completions`, the prompt as token ids'"
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l request-timeout -d 'Give up on a request after this many seconds (it counts as an error)' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l record -d 'Write the run as a record (JSON, see docs/benchmarks.md)' -r -F
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l response-format -d 'Constrain every request to the measured server (not --against\'s) with this `response_format`: `json_object`, or FILE holding a JSON schema (sent as `json_schema`). With the bench\'s `ignore_eos` the server writes one value after another up to --osl. `--against` the same URL measures the free ladder beside it (the ratio is constrained / free)' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l sign -d 'Sign the record with this secret key (from `metralectl bench keygen`): writes FILE.minisig' -r -F
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l streams -d 'Streams decoding at once; each sends its next request as soon as its last one ends' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l long-isl -d 'Prompt tokens of each long prompt' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l long-osl -d 'Generated tokens of each long prompt' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l long-every -d 'Time between two long prompts\' arrivals (`1s`, `500ms`, `0.5s`, `2m`; a bare number is seconds)' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l duration -d 'How long each phase lasts: the baseline (streams alone), then the loaded one' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l json -d 'Print the record as JSON instead of a table'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -l mixed -d 'Run the mixed load instead of the ladder: --streams requests decoding continuously (ISL/OSL from --isl/--osl), first alone, then while a long prompt arrives every --long-every; reports the streams\' ITL in both phases and the long prompts\' TTFT'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -f -a "gate" -d 'Rerun a baseline record\'s workload; fail when a rung is slower than the baseline by more than the tolerance, or when greedy outputs are not deterministic or leak special tokens'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -f -a "report" -d 'Generate bench/README.md (a table a record) and bench/ladder.svg (tok/s against concurrency per series) from the committed records'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -f -a "keygen" -d 'Write a minisign key pair for `--sign`: KEYFILE (secret, mode 0600) and KEYFILE.pub'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and not __fish_seen_subcommand_from gate report keygen help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from gate" -l baseline -d 'The baseline record (e.g. bench/baselines/NAME.json)' -r -F
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from gate" -l url -d 'The server to measure [default: the baseline\'s URL]' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from gate" -l api-key -d 'The server\'s API key (sent as `Authorization: Bearer KEY`)' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from gate" -l model -d 'Send this model name instead of the baseline\'s (the same model served under another name)' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from gate" -l tolerance -d 'How much slower than the baseline a rung may be, as a fraction' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from gate" -l json -d 'Print JSON'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from gate" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from gate" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from gate" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from report" -l records -d 'The directory of records' -r -F
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from report" -l out -d 'Where README.md and ladder.svg go' -r -F
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from report" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from report" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from report" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from keygen" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from keygen" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from keygen" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "gate" -d 'Rerun a baseline record\'s workload; fail when a rung is slower than the baseline by more than the tolerance, or when greedy outputs are not deterministic or leak special tokens'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "report" -d 'Generate bench/README.md (a table a record) and bench/ladder.svg (tok/s against concurrency per series) from the committed records'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "keygen" -d 'Write a minisign key pair for `--sign`: KEYFILE (secret, mode 0600) and KEYFILE.pub'
complete -c metralectl -n "__fish_metralectl_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c metralectl -n "__fish_metralectl_using_subcommand sign" -l key -d 'The secret key (from `metralectl bench keygen`, or `minisign -G -W`)' -r -F
complete -c metralectl -n "__fish_metralectl_using_subcommand sign" -l trusted-comment -d 'The signed comment [default: `timestamp:UNIX_TIME<TAB>file:NAME`, as minisign writes]' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand sign" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand sign" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand sign" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand verify" -l sig -d 'Its signature [default: FILE.minisig]' -r -F
complete -c metralectl -n "__fish_metralectl_using_subcommand verify" -l pubkey -l key -d 'Trust only this public key (a KEYFILE.pub) [default: the keys built in: the release key and bench/keys/*.pub]' -r -F
complete -c metralectl -n "__fish_metralectl_using_subcommand verify" -l json -d 'Print JSON'
complete -c metralectl -n "__fish_metralectl_using_subcommand verify" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand verify" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand verify" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand self; and not __fish_seen_subcommand_from update uninstall help" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand self; and not __fish_seen_subcommand_from update uninstall help" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand self; and not __fish_seen_subcommand_from update uninstall help" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand self; and not __fish_seen_subcommand_from update uninstall help" -f -a "update" -d 'Install the latest release (or --version) after checking its signature and hash'
complete -c metralectl -n "__fish_metralectl_using_subcommand self; and not __fish_seen_subcommand_from update uninstall help" -f -a "uninstall" -d 'Remove metralectl, met and what the installer added to your shell profile'
complete -c metralectl -n "__fish_metralectl_using_subcommand self; and not __fish_seen_subcommand_from update uninstall help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c metralectl -n "__fish_metralectl_using_subcommand self; and __fish_seen_subcommand_from update" -l version -d 'Install this version (up or down) instead of the latest' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand self; and __fish_seen_subcommand_from update" -l url -d 'Where releases live: URL/download/vVERSION/ and URL/latest/download/' -r
complete -c metralectl -n "__fish_metralectl_using_subcommand self; and __fish_seen_subcommand_from update" -l pubkey -d 'Trust this public key instead of the built-in release key (a mirror that signs its own releases; the tests)' -r -F
complete -c metralectl -n "__fish_metralectl_using_subcommand self; and __fish_seen_subcommand_from update" -l json -d 'Print JSON'
complete -c metralectl -n "__fish_metralectl_using_subcommand self; and __fish_seen_subcommand_from update" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand self; and __fish_seen_subcommand_from update" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand self; and __fish_seen_subcommand_from uninstall" -s y -l yes -d 'Do not ask for confirmation'
complete -c metralectl -n "__fish_metralectl_using_subcommand self; and __fish_seen_subcommand_from uninstall" -s q -l quiet -d 'Print only the result: no notes or warnings'
complete -c metralectl -n "__fish_metralectl_using_subcommand self; and __fish_seen_subcommand_from uninstall" -s h -l help -d 'Print help'
complete -c metralectl -n "__fish_metralectl_using_subcommand self; and __fish_seen_subcommand_from uninstall" -s V -l version -d 'Print version'
complete -c metralectl -n "__fish_metralectl_using_subcommand self; and __fish_seen_subcommand_from help" -f -a "update" -d 'Install the latest release (or --version) after checking its signature and hash'
complete -c metralectl -n "__fish_metralectl_using_subcommand self; and __fish_seen_subcommand_from help" -f -a "uninstall" -d 'Remove metralectl, met and what the installer added to your shell profile'
complete -c metralectl -n "__fish_metralectl_using_subcommand self; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top chat doctor ps stop logs pull completions bench sign verify self help" -f -a "list" -d 'List the recipes: built-in ones and yours'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top chat doctor ps stop logs pull completions bench sign verify self help" -f -a "show" -d 'Show everything a recipe pins, and whether it fits this machine'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top chat doctor ps stop logs pull completions bench sign verify self help" -f -a "run" -d 'Start a recipe: in a container when Docker and the NVIDIA runtime are ready, else natively'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top chat doctor ps stop logs pull completions bench sign verify self help" -f -a "top" -d 'Live dashboard of a running engine: throughput, batch, KV cache, every request'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top chat doctor ps stop logs pull completions bench sign verify self help" -f -a "chat" -d 'Talk to a model in the terminal: a running engine, or a recipe started for it'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top chat doctor ps stop logs pull completions bench sign verify self help" -f -a "doctor" -d 'Check this machine: Docker, NVIDIA runtime and driver, disk, port, shared memory, Hub token'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top chat doctor ps stop logs pull completions bench sign verify self help" -f -a "ps" -d 'List the running engines'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top chat doctor ps stop logs pull completions bench sign verify self help" -f -a "stop" -d 'Stop engines (a container is removed)'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top chat doctor ps stop logs pull completions bench sign verify self help" -f -a "logs" -d 'Show an engine\'s log'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top chat doctor ps stop logs pull completions bench sign verify self help" -f -a "pull" -d 'Fetch a recipe\'s engine image and Hub checkpoint ahead of time'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top chat doctor ps stop logs pull completions bench sign verify self help" -f -a "completions" -d 'Write shell completions to stdout'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top chat doctor ps stop logs pull completions bench sign verify self help" -f -a "bench" -d 'Measure an OpenAI-compatible server over a concurrency ladder (see docs/benchmarks.md)'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top chat doctor ps stop logs pull completions bench sign verify self help" -f -a "sign" -d 'Sign a file (a release\'s SHA256SUMS, a benchmark record): writes FILE.minisig'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top chat doctor ps stop logs pull completions bench sign verify self help" -f -a "verify" -d 'Check a signed file (a release\'s SHA256SUMS, a benchmark record) against a trusted key'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top chat doctor ps stop logs pull completions bench sign verify self help" -f -a "self" -d 'Update or remove this installation of metralectl and met'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and not __fish_seen_subcommand_from list show run top chat doctor ps stop logs pull completions bench sign verify self help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "gate" -d 'Rerun a baseline record\'s workload; fail when a rung is slower than the baseline by more than the tolerance, or when greedy outputs are not deterministic or leak special tokens'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "report" -d 'Generate bench/README.md (a table a record) and bench/ladder.svg (tok/s against concurrency per series) from the committed records'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "keygen" -d 'Write a minisign key pair for `--sign`: KEYFILE (secret, mode 0600) and KEYFILE.pub'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and __fish_seen_subcommand_from self" -f -a "update" -d 'Install the latest release (or --version) after checking its signature and hash'
complete -c metralectl -n "__fish_metralectl_using_subcommand help; and __fish_seen_subcommand_from self" -f -a "uninstall" -d 'Remove metralectl, met and what the installer added to your shell profile'

# Recipe and engine names where a command takes one (`metralectl list --names`).
complete -c metralectl -n "__fish_seen_subcommand_from run show pull chat top stop logs" -f -a "(metralectl list --names 2>/dev/null)"
